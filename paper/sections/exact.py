"""Exact mode (experiments/results/exact/): bf16 speculative output against plain output over models, drafters,
draft lengths and compile settings (exact_match.jsonl), the step cost of fixed-size blocks (speed_exact.json)
and the GPU test log of the same commit."""

from __future__ import annotations

import json
import re

from paper.sections.tex import RESULTS, num, of_n, provenance, table, tex_escape

EXACT = RESULTS / "exact"


def _same(cell: str) -> tuple[int, int]:
    a, b = cell.split("/")
    return int(a), int(b)


def match() -> None:
    """exact_match.jsonl: one row per (model, compile, drafter, k); prompts whose output equals plain decoding's
    with and (uncompiled only) without exact mode."""
    rows = [json.loads(line) for line in (EXACT / "exact_match.jsonl").read_text().splitlines() if line.strip()]
    models = list(dict.fromkeys(r["model"] for r in rows))
    num("exactRows", len(rows), "{:d}")
    num("exactModels", ", ".join(tex_escape(m) for m in models), "{}")
    num("exactDrafters", len({r["drafter"] for r in rows}), "{:d}")
    num("exactKs", " and ".join(str(k) for k in sorted({r["k"] for r in rows})), "{}")
    num("exactBlockRows", " and ".join(str(n) for n in sorted({r["exact_rows"] for r in rows})), "{}")
    num("exactDevice", tex_escape(rows[0]["device"]), "{}")
    num("exactTorch", tex_escape(rows[0]["torch"]), "{}")
    num("exactDtype", rows[0]["dtype"].replace("torch.", ""), "{}")
    num("exactMatchProv", provenance(rows[0]["run_info"]), "{}")
    lines = [r"\begin{tabular}{lrrrrr}", r"\toprule",
             r"model & prompts & new tokens & configurations & exact: = plain & not exact: = plain \\", r"\midrule"]
    for m in models:
        part = [r for r in rows if r["model"] == m]
        ex = [_same(r["exact_same"]) for r in part]
        nonex = [_same(r["nonexact_same"]) for r in part if "nonexact_same" in r]
        cell = lambda pairs: of_n(sum(a for a, _ in pairs), sum(b for _, b in pairs)) if pairs else "--"  # noqa: E731
        lines.append(f"{tex_escape(m)} & {part[0]['prompts']} & {part[0]['new_tokens']} & {len(part)} & "
                     f"{cell(ex)} & {cell(nonex)} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("exact_match", lines)
    ex = [_same(r["exact_same"]) for r in rows]
    num("exactSame", of_n(sum(a for a, _ in ex), sum(b for _, b in ex)), "{}")
    nonex = [(r, _same(r["nonexact_same"])) for r in rows if "nonexact_same" in r]
    num("nonexactSame", of_n(sum(a for _, (a, _) in nonex), sum(b for _, (_, b) in nonex)), "{}")
    diff = [r for r, (a, b) in nonex if a < b]
    num("nonexactDiffer", "; ".join(f"{tex_escape(r['model'])}, {tex_escape(r['drafter'])}, $k={r['k']}$: "
                                   f"{r['nonexact_same']}" for r in diff) or "none", "{}")


def cost() -> None:
    """speed_exact.json: the compile-auto step with and without exact mode, and over the floor."""
    d = json.loads((EXACT / "speed_exact.json").read_text())
    num("exactProv", provenance(d["run_info"]), "{}")
    num("exactFloor", d["floor_ms"])
    ratios = []
    for c, tag in (("2048", "A"), ("512", "B")):
        ms = d["contexts"][c]
        num(f"exactCtx{tag}", int(c), "{:d}")
        for q, qt in ((1, "One"), (9, "Nine")):
            plain, exact = ms[f"graph_auto_chain_q{q}"], ms[f"graph_auto_exact_chain_q{q}"]
            num(f"exactAuto{qt}{tag}", plain)
            num(f"exactExact{qt}{tag}", exact)
            num(f"exactExact{qt}X{tag}", exact / d["floor_ms"])
            num(f"exactOver{qt}{tag}", exact / plain)
            ratios.append(exact / d["floor_ms"])
    num("exactXLow", min(ratios))
    num("exactXHigh", max(ratios))


def gpu_tests() -> None:
    log = (EXACT / "gpu_tests_zoo_trees_real.log").read_text()
    m = re.search(r"(\d+) passed", log)
    num("exactTestsPassed", m.group(1) if m else "?", "{}")
    f = re.search(r"(\d+) failed", log)
    num("exactTestsFailed", f.group(1) if f else "no", "{}")


def one_view_kernel() -> None:
    """exact_match_one_view_kernel.jsonl and speed/trees_exact_kernels.json: the split kernel that skips the key
    views no row of a tile reads, checked again (match) and timed (exact decode per compile mode, attention of a
    16-row exact block with one or two views)."""
    rows = [json.loads(line) for line in (EXACT / "exact_match_one_view_kernel.jsonl").read_text().splitlines()
            if line.strip()]
    ex = [_same(r["exact_same"]) for r in rows]
    num("exactViewProv", provenance(rows[0]["run_info"]), "{}")
    num("exactViewConfigs", len(rows), "{:d}")
    num("exactViewSame", of_n(sum(a for a, _ in ex), sum(b for _, b in ex)), "{}")
    num("exactViewKs", ", ".join(str(k) for k in sorted({r["k"] for r in rows})), "{}")
    num("exactViewZoo", sum(r["model"] == "tiny-coder" for r in rows), "{:d}")
    d = json.loads((RESULTS / "speed" / "trees_exact_kernels.json").read_text())
    r = d["contexts"]["2048"]
    for key, tag in (("graph_auto_exact_chain_q1", "Auto"), ("graph_autotune_exact_chain_q1", "Tune"),
                     ("graph_auto_chain_q1", "Plain")):
        num(f"exactView{tag}Ms", r[key])
        num(f"exactView{tag}X", r[key] / d["floor_ms"])
    plans = {(p["case"], p["programs"]): p["ms_per_step"] for p in d["attention_plans"]}
    num("exactViewAttnOne", plans[("exact16_one_view", 128)], "{:.3f}")
    num("exactViewAttnTwo", plans[("exact16_two_views", 128)], "{:.3f}")
    num("exactViewAttnDecode", plans[("decode", 128)], "{:.3f}")


def make() -> None:
    match()
    cost()
    gpu_tests()
    one_view_kernel()
