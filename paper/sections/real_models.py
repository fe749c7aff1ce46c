"""An 8B-shaped Llama-3.1 folder loaded from disk and run through experiments/spec_bench.py's vLLM-style command
line (experiments/results/real_models/): load time, peak memory and time per output token per method, and the
replay check (a drafter that replays the plain output, so AL is known) of measured against predicted tokens/s."""

from __future__ import annotations

import json

from experiments import results
from paper.sections.tex import RESULTS, commit_of, fmt, num, table, tex_escape

REAL = RESULTS / "real_models"
METHODS = {"none": "plain", "ngram": "n-gram", "eagle3": "EAGLE-3", "ngram-eagle3": "n-gram + EAGLE-3"}


def make() -> None:
    df = results.load_runs([str(REAL / f"l31__{m}.jsonl") for m in METHODS])
    first = json.loads((REAL / "l31__none.jsonl").read_text().splitlines()[0])
    info = [json.loads(line)["run_info"] for m in METHODS
            for line in (REAL / f"l31__{m}.jsonl").read_text().splitlines() if line.strip()]
    num("realCommit", commit_of(first["run_info"])[0], "{}")
    num("realDevice", tex_escape(first["run_info"]["device"]), "{}")
    num("realDate", first["run_info"]["date"][:10], "{}")
    num("realPrompts", int(df.groupby("method").size().max()), "{:d}")
    num("realOutLen", int(df.output_len.max()), "{:d}")
    num("realDataset", "MT-Bench" if set(df.dataset) == {"mt-bench"} else ", ".join(sorted(set(df.dataset))), "{}")
    num("realLoadLow", min(i["load_s"] for i in info), "{:.1f}")
    num("realLoadHigh", max(i["load_s"] for i in info), "{:.1f}")
    num("realMemLow", min(i["peak_mem_gb"] for i in info), "{:.1f}")
    num("realMemHigh", max(i["peak_mem_gb"] for i in info), "{:.1f}")
    al = results.corpus_al(df, by=["method"]).set_index("method")
    num("realALMax", float(al.seq_al.max()))
    lines = [r"\begin{tabular}{lrrr}", r"\toprule", r"method & prompts & seq.\ AL & TPOT (ms) \\", r"\midrule"]
    for m, label in METHODS.items():
        r = al.loc[m]
        lines.append(f"{label} & {int(r.n)} & {fmt(r.seq_al)} & {fmt(r.tpot_ms)} \\\\")
        num(f"realTpot{''.join(w.capitalize() for w in m.split('-')).replace('3', 'Three')}", r.tpot_ms)
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("real_models", lines)

    auto = json.loads((REAL / "l31__compile_auto.jsonl").read_text().splitlines()[0])
    num("realAutoMem", auto["run_info"]["peak_mem_gb"], "{:.1f}")
    num("realAutoOutLen", auto["config"]["output_len"], "{:d}")

    replay = [json.loads(line) for line in (REAL / "l31__replay.jsonl").read_text().splitlines() if line.strip()]
    rp = [r["replay"] for r in replay]
    num("replayCommit", commit_of(replay[0]["run_info"])[0], "{}")
    num("replayN", len(rp), "{:d}")
    num("replayK", rp[0]["k"], "{:d}")
    num("replayOutLen", replay[0]["config"]["output_len"], "{:d}")
    num("replayAL", rp[0]["seq_normalized_al"])
    num("replayMeasured", ", ".join(f"{r['tokens_per_s']:.0f}" for r in rp), "{}")
    num("replayPredicted", ", ".join(f"{r['predicted_with_prefill_tokens_per_s']:.0f}" for r in rp), "{}")
    gaps = [100 * (1 - r["tokens_per_s"] / r["predicted_with_prefill_tokens_per_s"]) for r in rp]
    num("replayGaps", ", ".join(f"{g:.0f}" for g in gaps), "{}")
    low, high = (f"{g:.0f}" for g in (min(gaps), max(gaps)))
    num("replayGapRange", low if low == high else f"{low}--{high}", "{}")  # "2", not "2--2"
    num("replayDecodeMs", sum(r["decode_ms"] for r in rp) / len(rp))
    num("replayVerifyMs", sum(r["verify_ms"] for r in rp) / len(rp))
