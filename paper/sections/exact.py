"""Exact mode (experiments/results/exact/): bf16 speculative output against plain output over models, drafters,
draft lengths and compile settings (exact_match.jsonl), the step cost of fixed-size blocks and its kernels
(speed_exact.json; the same bench in other runs in speed_exact_repeats/) and the GPU tests of the same kernels
(gpu_tests_exact.log)."""

from __future__ import annotations

import json
import re

from experiments import bandwidth_floor
from hybridsd.attention import EXACT_CHUNK, EXACT_ROW_TILE, SPLIT_PROGRAMS, SPLIT_ROW_TILE
from paper.sections.tex import RESULTS, num, of_n, provenance, table, tex_escape

EXACT = RESULTS / "exact"


def _same(cell: str) -> tuple[int, int]:
    a, b = cell.split("/")
    return int(a), int(b)


def match() -> None:
    """exact_match.jsonl: one row per (model, compile, drafter, k); prompts whose output equals plain decoding's
    with and without exact mode."""
    rows = [json.loads(line) for line in (EXACT / "exact_match.jsonl").read_text().splitlines() if line.strip()]
    models = list(dict.fromkeys(r["model"] for r in rows))
    num("exactRows", len(rows), "{:d}")
    num("exactModels", ", ".join(tex_escape(m) for m in models), "{}")
    num("exactDrafters", len({r["drafter"] for r in rows}), "{:d}")
    num("exactKs", " and ".join(str(k) for k in sorted({r["k"] for r in rows})), "{}")
    num("exactBlockRows", " and ".join(str(n) for n in sorted({r["exact_rows"] for r in rows})), "{}")
    num("exactDtype", rows[0]["dtype"].replace("torch.", ""), "{}")
    prov = []
    for mode, what in (("exact_same", "exact mode"), ("nonexact_same", "without it")):  # each mode's runs
        infos = {r["run_info"][mode]["commit"]: r["run_info"][mode] for r in rows if mode in r["run_info"]}
        prov.append(f"{what}: " + "; ".join(provenance(info) for info in infos.values()))
    num("exactMatchProv", "; ".join(prov), "{}")
    lines = [r"\begin{tabular}{llrrrrr}", r"\toprule",
             r"model & compile & prompts & new tokens & configurations & exact: = plain & not exact: = plain \\",
             r"\midrule"]
    cell = lambda pairs: of_n(sum(a for a, _ in pairs), sum(b for _, b in pairs)) if pairs else "--"  # noqa: E731
    differ = []
    for m in models:
        for comp in dict.fromkeys(r["compile"] for r in rows if r["model"] == m):
            part = [r for r in rows if r["model"] == m and r["compile"] == comp]
            ex = [_same(r["exact_same"]) for r in part]
            nonex = [_same(r["nonexact_same"]) for r in part if "nonexact_same" in r]
            name = "off" if comp is False else tex_escape(str(comp))
            lines.append(f"{tex_escape(m)} & {name} & {part[0]['prompts']} & {part[0]['new_tokens']} & {len(part)} & "
                         f"{cell(ex)} & {cell(nonex)} \\\\")
            if sum(a for a, _ in nonex) < sum(b for _, b in nonex):
                differ.append(f"{tex_escape(m)} with compile {name}: {cell(nonex)}")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("exact_match", lines)
    ex = [_same(r["exact_same"]) for r in rows]
    num("exactSame", of_n(sum(a for a, _ in ex), sum(b for _, b in ex)), "{}")
    nonex = [_same(r["nonexact_same"]) for r in rows if "nonexact_same" in r]
    num("nonexactSame", of_n(sum(a for a, _ in nonex), sum(b for _, b in nonex)), "{}")
    num("nonexactDiffer", "; ".join(differ) or "none", "{}")
    num("exactAcceptedSentence", accepted_sentence(rows), "{}")


def accepted_sentence(rows: list[dict]) -> str:
    """A sentence on the draft tokens accepted in exact mode, from the rows that record them (``exact_accepted``, by
    source, and ``exact_drafted``): how many of those drafted, and in how many configurations every drafter and
    every hybrid's child had tokens accepted; empty when no row records them."""
    rec = [r for r in rows if "exact_accepted" in r]
    if not rec:
        return ""
    accepted = sum(sum(r["exact_accepted"].values()) for r in rec)
    drafted = sum(r["exact_drafted"] for r in rec)
    every = sum(all(r["exact_accepted"].get(c, 0) > 0 for c in r["drafter"].removesuffix("-tree").split("-"))
                for r in rec)
    names = [tex_escape(m) for m in dict.fromkeys(r["model"] for r in rec)]
    models = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return (f"In exact mode, over the {len(rec)} configurations of {models} whose run records it, {accepted:,} of "
            f"{drafted:,} draft tokens were accepted, and in {every} of them every drafter and each hybrid's children "
            "had tokens accepted, so the grid checks acceptance and rollback, not only rejection.")


def cost() -> None:
    """speed_exact.json: the compile-auto step with and without exact mode, and over the floor."""
    d = json.loads((EXACT / "speed_exact.json").read_text())
    num("exactProv", provenance(d["run_info"]), "{}")
    ratios = []
    for c, tag in (("2048", "A"), ("512", "B")):
        ms, floor = d["contexts"][c], bandwidth_floor.step_floor_ms(d, int(c))
        num(f"exactFloor{tag}", floor)
        num(f"exactCtx{tag}", int(c), "{:d}")
        for q, qt in ((1, "One"), (9, "Nine")):
            plain, exact = ms[f"graph_auto_chain_q{q}"], ms[f"graph_auto_exact_chain_q{q}"]
            num(f"exactAuto{qt}{tag}", plain)
            num(f"exactExact{qt}{tag}", exact)
            num(f"exactExact{qt}X{tag}", exact / floor)
            num(f"exactOver{qt}{tag}", exact / plain)
            ratios.append(exact / floor)
    num("exactXLow", min(ratios))
    num("exactXHigh", max(ratios))
    # the same bench of the same library code in other runs (speed_exact_repeats/repeat*.json, each naming its commit)
    runs = [d] + [json.loads(f.read_text()) for f in sorted((EXACT / "speed_exact_repeats").glob("*.json"))]
    num("exactRuns", len(runs), "{:d}")
    for key, tag in (("graph_auto_exact_chain_q1", "Exact"), ("graph_auto_chain_q1", "Auto")):
        x = [r["contexts"]["2048"][key] / bandwidth_floor.step_floor_ms(r, 2048) for r in runs]
        num(f"exactRuns{tag}Low", min(x))
        num(f"exactRuns{tag}High", max(x))
    over = [r["contexts"]["2048"]["graph_auto_exact_chain_q1"] / r["contexts"]["2048"]["graph_auto_chain_q1"]
            for r in runs]  # exact decode over the non-exact decode timed in the same run
    num("exactRunsOverLow", min(over))
    num("exactRunsOverHigh", max(over))


def gpu_tests() -> None:
    """gpu_tests_exact.log: pytest's outcome lines (``-v`` progress lines or ``-rA`` summary lines) of the split
    kernel's exact-path tests, of the row matmul kernel's and of the exact-mode grids; a sentence on them, or on their
    absence (a run stopped by its time limit prints none of its summary)."""
    log = (EXACT / "gpu_tests_exact.log").read_text()
    outcome = {}  # test id -> outcome, from either form of line
    for m in re.finditer(r"^(?:(PASSED|FAILED|ERROR) (\S+::\S+)|(\S+::\S+) (PASSED|FAILED|ERROR))", log, re.M):
        outcome[m[2] or m[3]] = m[1] or m[4]
    passed = [t.split("::")[1].split("[")[0] for t, o in outcome.items() if o == "PASSED"]
    failed = sum(o != "PASSED" for o in outcome.values())
    kernel = sum(t.startswith("test_exact_split_kernel") for t in passed)
    row = sum(t.startswith("test_row_linear") and "folded_norm" not in t for t in passed)
    norm = sum(t.startswith("test_row_linear_folded_norm") for t in passed)
    grid = sum(t.startswith("test_exact_mode") for t in passed)
    if passed or failed:
        text = (f"The GPU tests of the same kernels (\\code{{exact/gpu\\_tests\\_exact.log}}): {kernel} tests of the "
                "split kernel's exact path (a tree's rows equal, bit for bit, the same tokens as a chain, each token's "
                "own decode step and the kernel without the gathering path; with the queries rotated in the kernel, a "
                "chain's rows the same over a longer span with NaN past the key bound), "
                f"{row} of the matmul kernel (a row's bits the same alone and in blocks of 9 and 16 rows whatever the "
                f"others hold, eager and replayed from a CUDA graph), {norm} of the same for the RMS norm folded into "
                f"two of them, and {grid} of the grids, with {failed} failures.")
    else:  # the run ended before pytest's summary: say what the grid's file holds
        rows = [json.loads(line) for line in (EXACT / "exact_match.jsonl").read_text().splitlines() if line.strip()]
        cut = sum("nonexact_same" not in r for r in rows)
        text = ("The log of the pytest run that wrote these lines (\\code{exact/gpu\\_tests\\_exact.log}) holds no "
                f"outcome lines: the run ended before pytest's summary, with every exact-mode line written and {cut} "
                f"of the {len(rows)} configurations without their run without exact mode.")
    num("exactTestsSentence", text, "{}")


def kernels() -> None:
    """speed_exact.json's kernels timed apart at context 2048: the attention of a 16-row exact block by its real
    tokens against the non-exact kernel's decode and 9-token steps, and the matmuls of 16 rows (cuBLAS, and exact
    mode's row_linear) against 1."""
    d = json.loads((EXACT / "speed_exact.json").read_text())
    plans = {p["case"]: p["ms_per_step"] for p in d["attention_plans"]  # each case at the grid it runs with
             if (p["programs"], p["row_tile"]) == ((SPLIT_PROGRAMS, EXACT_ROW_TILE) if p["case"].startswith("exact")
                                                   else (SPLIT_PROGRAMS, SPLIT_ROW_TILE))}
    for case, tag in (("decode", "Decode"), ("chain_q9", "Nine"), ("exact16_decode", "ExactDecode"),
                      ("exact16_chain9", "ExactNine"), ("exact16_tree9", "ExactTree"),
                      ("exact16_two_views", "ExactSixteen")):
        num(f"exactAttn{tag}", plans[case], "{:.2f}")
    in_place = [plans.get(f"exact16_{c}_in_place") for c in ("decode", "chain9")]  # timed by later benches
    num("exactAttnInPlace", "" if None in in_place else
        f" (without the gathering path, as exact mode runs them: {in_place[0]:.2f} and {in_place[1]:.2f}\\,ms)", "{}")
    num("exactChunk", EXACT_CHUNK, "{:d}")
    gemm = {}  # ms per step of every layer's matmuls and the LM head, by kernel and block rows
    for row in d["gemm_rows"]:
        gemm[row["kernel"], row["rows"]] = gemm.get((row["kernel"], row["rows"]), 0.0) + row["ms_per_step"]
    head = next(r["ms_per_step"] for r in d["gemm_rows"]
                if (r["kernel"], r["kind"], r["rows"]) == ("F.linear", "lm_head", 16))
    row = gemm["row_linear", 16] + head  # exact mode: its layers' row_linear (with SiLU gate, residuals), cuBLAS head
    num("exactGemmOne", gemm["F.linear", 1])
    num("exactGemmSixteen", gemm["F.linear", 16])
    matrices = bandwidth_floor.matrices_floor_ms(d)  # the matmuls' own floor: no KV reads
    num("exactMatricesFloor", matrices)
    num("exactGemmSixteenX", gemm["F.linear", 16] / matrices)
    num("exactRowGemm", row)
    num("exactRowGemmX", row / matrices)


def make() -> None:
    match()
    cost()
    gpu_tests()
    kernels()
