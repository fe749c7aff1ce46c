"""The zoo model: tiny-coder's training and change requests (hybridsd/models/tiny-coder/training_config*.json,
repair_config*.json), its EAGLE heads (heads_training_eagle1_eagle3.json) and EAGLE-3 against EAGLE-1 on the same
held-out edits (the GPU edit-norm sweep)."""

from __future__ import annotations

import gzip
import json
import re

from experiments import results, zoo_gate
from experiments.zoo_data import RENAMED_NAMES_SHARE
from paper.sections import edit_norm
from paper.sections.sweep import cap_count
from paper.sections.simulation import SIMULATION
from paper.sections.tex import (MODEL_DIR, NUMBERS, RESULTS, commit_of, fmt, num, of_n, provenance, signed, table,
                                 tex_escape)

GPU_TESTS = RESULTS / "speed" / "gpu_tests.log"
COMPILE_RUNS = RESULTS / "zoo" / "train_compile_h200"
RETRAIN = RESULTS / "zoo" / "retrain_compiled_h200" / "stages.json"
SELECTION = RESULTS / "zoo" / "repair_selection_h200"
DATA_PREP = RESULTS / "zoo" / "data_prep_h200"
DECISION = RESULTS / "zoo" / "decision_tuning_h200"
PLACES = RESULTS / "zoo" / "edit_places_cpu_fp32"
AVERAGE = RESULTS / "zoo" / "weight_average_h200"
TRAIN_STEPS = RESULTS / "zoo" / "train_steps_h200"
AMBIGUITY = RESULTS / "zoo" / "ambiguity_tuning_h200"
DRIFT = RESULTS / "zoo" / "drift_repair_h200"
SOUP = RESULTS / "zoo" / "seed_soup_h200"
RENAME = RESULTS / "zoo" / "rename_tuning_h200"
SHAPES = RESULTS / "zoo" / "target_shapes_h200"
MARGIN = RESULTS / "zoo" / "copy_margin_h200"
RESYNC = RESULTS / "zoo" / "resync_repair_h200"
DECISIONS = RESULTS / "zoo" / "decision_repair_cpu"
DECISIONS_GPU = RESULTS / "zoo" / "decision_repair_h200"
MARGIN_RECIPE = RESULTS / "zoo" / "margin_recipe_h200"
HINGE_RECIPE = RESULTS / "zoo" / "retrain_hinge_recipe_h100"
REQUEST_TEXT = {"located": "located change requests", "subject": "the commit subject alone"}



# tiny-coder's lineage, oldest first: GPU target calls (train_zoo.py target), then loop repairs (train_zoo.py repair)
TARGET_CALLS = ("training_config_from_scratch.json", "training_config_edit_tuning.json",
                "training_config_span_edits.json", "training_config.json")
REPAIRS = ("repair_config_cpu.json", "repair_config.json")


def _gate(g: dict, tag: str) -> None:
    num(f"zooGate{tag}N", g["n"], "{:d}")
    num(f"zooGate{tag}Eos", 100 * g["eos_share"], "{:.0f}")
    num(f"zooGate{tag}Rho", g["spearman_ref_out"])
    num(f"zooGate{tag}OutNorm", g["median_out_norm"])
    num(f"zooGate{tag}Loops", g.get("loops", 0), "{:d}")
    num(f"zooGate{tag}NgramLow", g["ngram_seq_al_ref_low"])
    num(f"zooGate{tag}NgramHigh", g["ngram_seq_al_ref_high"])


def model() -> None:
    """The zoo model's lineage (GPU target calls, loop repairs on CPU and GPU), its change requests, its quality
    gate before and after the repairs, and its EAGLE heads."""
    calls = [json.loads((MODEL_DIR / f).read_text()) for f in TARGET_CALLS]
    cpu_repair, gpu_repair = (json.loads((MODEL_DIR / f).read_text()) for f in REPAIRS)
    scratch, tc = calls[0], calls[-1]
    heads = json.loads((MODEL_DIR / "heads_training_eagle1_eagle3.json").read_text())
    num("zooParams", tc["parameters"] / 1e6, "{:.1f}")
    num("zooTargetCalls", len(calls), "{:d}")
    num("zooTrainMin", (sum(c["wall_s"] for c in calls) + gpu_repair["wall_s"]) / 60, "{:.1f}")
    num("zooHeadsMin", heads["wall_s"] / 60, "{:.1f}")
    num("zooCpuRepairMin", cpu_repair["wall_s"] / 60, "{:.0f}")
    num("zooCpuRepairSteps", cpu_repair["repair"]["steps"], "{:d}")
    num("zooCpuRepairBatch", cpu_repair["config"]["repair_batch"], "{:d}")
    num("zooGpuRepairSteps", gpu_repair["repair"]["steps"], "{:d}")
    num("zooGpuRepairBatch", gpu_repair["config"]["repair_batch"], "{:d}")
    num("zooRepairWeight", gpu_repair["config"]["repair_weight"], "{:g}")
    num("zooRepairExamples", gpu_repair["data"]["examples"], "{:d}")
    num("zooPretrainMB", scratch["data"]["pretrain_chars"] / 1e6, "{:.0f}")
    num("zooPretrainPasses", scratch["pretrain"]["epochs"], "{:.1f}")
    num("zooPretrainTokens", scratch["pretrain"]["tokens_seen"] / 1e6, "{:.0f}")
    num("zooReplay", 100 * tc["config"]["sft_replay"], "{:.0f}")
    num("zooDecisionWeight", tc["config"]["decision_weight"], "{:g}")
    num("zooSpanShare", 100 * tc["config"]["span_share"], "{:.0f}")
    num("zooUnlikelihood", tc["config"]["unlikelihood_weight"], "{:g}")
    num("zooRepeatShare", 100 * tc["config"]["repeat_share"], "{:.0f}")
    num("zooSyntheticEdits", f"{tc['data']['synthetic_examples']:,}", "{}")
    num("zooRealRows", f"{tc['data']['sft_real_rows']:,}", "{}")
    num("zooEvalRows", tc["data"]["eval_rows"], "{:d}")
    num("zooEvalRepos", ", ".join(r.split("/")[1] for r in tc["data"]["eval_repos"]), "{}")
    num("zooLayers", tc["config"]["num_layers"], "{:d}")
    num("zooHidden", tc["config"]["hidden_size"], "{:d}")
    num("zooChangeRequests", REQUEST_TEXT[tc["config"].get("change_request", "subject")], "{}")
    num("zooTrainProv", provenance(gpu_repair["run_info"]), "{}")
    stages = calls + [cpu_repair, gpu_repair]
    num("zooStages", len(stages), "{:d}")
    dirty = sum(str(r["run_info"]["commit"]).endswith("-dirty") for r in stages)
    num("zooDirtyStages", dirty, "{:d}")
    sim_commit, sim_note = commit_of(json.loads(SIMULATION.read_text())["run_info"])
    files = r"(\code{training\_config*.json}, \code{repair\_config*.json} beside the weights)"
    gaps = []
    if "uncommitted" in sim_note:
        gaps.append(f"The simulation ran on a working tree with uncommitted changes (\\code{{{sim_commit}}}).")
    if dirty:
        gaps.append(f"Of the zoo target's {len(stages)} training stages {files}, {dirty} ran on working trees with "
                    "uncommitted changes.")
    num("provenanceDirty", " ".join(gaps), "{}")
    num("zooGateRefNorm", gpu_repair["quality_gate"]["median_ref_norm"])
    _gate(tc["quality_gate"], "Tuned")
    _gate(gpu_repair["quality_gate"], "")
    agree = lambda h: ", ".join(f"{a:.2f}" for a in h["holdout_agreement"])  # noqa: E731
    one, three = heads["heads"]["eagle1"], heads["heads"]["eagle3"]
    num("headsOneSteps", one["steps"], "{:d}")
    num("headsOneSeconds", one["train_s"], "{:.0f}")
    num("headsOneAgree", agree(one))
    num("headsPositions", len(one["holdout_agreement"]), "{:d}")
    num("headsThreeSteps", three["steps"], "{:d}")
    num("headsThreeSeconds", three["train_s"], "{:.0f}")
    num("headsThreeAgree", agree(three))
    num("headsThreeTTT", heads["config"]["ttt_steps"], "{:d}")
    num("headsThreeVocab", heads["config"]["draft_vocab"], "{:d}")
    num("headsThreeProv", provenance(heads["run_info"]), "{}")
    num("headsGenerated", heads["data"]["generated"], "{:d}")
    num("headsGeneratedTokens", f"{heads['data']['generated_tokens']:,}", "{}")


def eagle3_gate() -> None:
    """The EAGLE-3 head against EAGLE-1 on the same held-out edits, k = 3 (the GPU edit-norm sweep): table and
    macros."""
    df = edit_norm.load()
    df = df[df.variant.isin(["eagle", "eagle3"])]
    al = results.corpus_al(df, by=["variant"]).set_index("variant")
    num("gateN", int(al.n.max()), "{:d}")
    num("gateOutLen", int(df.output_len.iloc[0]), "{:d}")
    num("gateK", int(df.k_eagle.iloc[0]), "{:d}")
    with gzip.open(next(edit_norm.SWEEP.glob("*eagle3__pr.jsonl.gz")), "rt") as f:
        first = json.loads(f.readline())
    num("gateProv", provenance(first["run_info"]), "{}")
    num("gateCapped", cap_count(df[df.variant == "eagle"]), "{:d}")
    pair = df.pivot_table(index="example_id", columns="variant", values="output_tokens", aggfunc="first")
    same = sum(a == b for a, b in zip(pair["eagle"], pair["eagle3"]))
    num("gateSameOut", of_n(same, len(pair)), "{}")
    heads = {"eagle": ("EAGLE-1", "headsOneSteps", "headsOneAgree"),
             "eagle3": ("EAGLE-3", "headsThreeSteps", "headsThreeAgree")}
    lines = [r"\begin{tabular}{lrlrrrl}", r"\toprule",
             r"head & training steps & held-out agreement & seq.\ AL & prec.\ AL & TPOT (ms) & $r_1, r_2, r_3$ \\",
             r"\midrule"]
    for var, (label, steps, agree) in heads.items():
        r = al.loc[var]
        rates = ", ".join(f"{r[f'r{i}']:.2f}" for i in (1, 2, 3))
        lines.append(f"{label} & {NUMBERS[steps]} & {{\\scriptsize {NUMBERS[agree]}}} & {fmt(r.seq_al)} & "
                     f"{fmt(r.precision_al)} & {fmt(r.tpot_ms)} & {{\\scriptsize {rates}}} \\\\")
        tag = {"eagle": "EagleOne", "eagle3": "EagleThree"}[var]
        num(f"gateAL{tag}", r.seq_al)
        num(f"gatePrec{tag}", r.precision_al)
        num(f"gateRates{tag}", rates, "{}")
    lines += [r"\bottomrule", r"\end{tabular}"]
    table("gate", lines)
    num("gateGain", al.loc["eagle3"].seq_al - al.loc["eagle"].seq_al)
    runs = re.split(r"^(?=# )", GPU_TESTS.read_text(), flags=re.M)[1:]  # each run: its command line, its outcomes
    m = re.search(r"(\d+) passed", runs[0])
    num("gpuTestsPassed", m.group(1) if m else "?", "{}")
    num("gpuTestsFailed", "no" if not re.search(r"\d+ failed", runs[0]) else re.search(r"(\d+) failed", runs[0])[1],
        "{}")
    num("gpuTestsCard", re.search(r" on one (\S+)", runs[0].splitlines()[0]).group(1), "{}")
    num("gpuTestsLater", " ".join(later_tests(run) for run in runs[1:]), "{}")


def later_tests(run: str) -> str:
    """A sentence on a later run appended to the GPU tests' log: its selection, commit, card and outcome."""
    head = run.splitlines()[0]
    sel, commit, card = re.search(r"-k (\S+) at ([0-9a-f]{7,40}) on one (\S+)", head).groups()
    passed, failed = (int(m[1]) if (m := re.search(rf"(\d+) {w}", run)) else 0 for w in ("passed", "failed"))
    what = re.search(r"\((.*)\)$", head)
    return (f"At \\code{{{commit[:7]}}} the tests selected by \\code{{{tex_escape(sel)}}}"
            f"{' (' + tex_escape(what[1]) + ')' if what else ''} ran on an {card}: {passed} passed, "
            f"{failed} failed.")


# ----------------------------------------------------------------------------- GPU speed


def compile_speed() -> None:
    """train_compile_h200/: the target trained from scratch eager and with --compile-layers under the same short
    budgets (device_run.sh train-speed); the lineage's training phases (TARGET_CALLS) at the compiled rates."""
    runs = {m: json.loads((COMPILE_RUNS / m / "training_config.json").read_text()) for m in ("eager", "compiled")}
    num("zooCompileProv", provenance(runs["compiled"]["run_info"]), "{}")
    speedup = {}
    for phase, tag in (("pretrain", "Pre"), ("sft", "Sft")):
        eager, compiled = (runs[m][phase] for m in ("eager", "compiled"))
        speedup[phase] = compiled["tokens_per_s_after_first_step"] / eager["tokens_per_s_after_first_step"]
        num(f"zooCompile{tag}X", speedup[phase])
        num(f"zooCompile{tag}First", compiled["first_step_s"], "{:.0f}")
    calls = [json.loads((MODEL_DIR / f).read_text()) for f in TARGET_CALLS]
    phases = [(p, c[p]["wall_s"]) for c in calls for p in ("pretrain", "sft") if "wall_s" in c[p]]
    first = {p: runs["compiled"][p]["first_step_s"] for p in ("pretrain", "sft")}
    num("zooCompileLineageMin", sum(s for _, s in phases) / 60, "{:.1f}")
    num("zooCompileLineageAtMin", sum(s / speedup[p] + first[p] for p, s in phases) / 60, "{:.1f}")
    retrain()


def retrain() -> None:
    """retrain_compiled_h200/: the lineage's first target stages rerun with compiled layers (retrain_zoo.sh) in
    separate calls, against the same stages of the base (eager) lineage; then the whole lineage
    (:func:`lineage`)."""
    stages = json.loads(RETRAIN.read_text())["stages"]
    eager = [json.loads((MODEL_DIR / f).read_text()) for f in TARGET_CALLS]
    run = [s["target_wall_s"] for s in stages]
    num("zooRetrainStages", len(stages), "{:d}")
    num("zooRetrainMin", sum(run) / 60, "{:.1f}")
    num("zooRetrainCallMin", sum(s["call_wall_s"] for s in stages) / 60, "{:.1f}")
    num("zooRetrainEagerMin", sum(e["wall_s"] for e in eager[: len(stages)]) / 60, "{:.1f}")
    num("zooRetrainDataS", "--".join(f"{s['data_prep_s']:.0f}" for s in (min(stages, key=lambda s: s["data_prep_s"]),
                                                                         max(stages, key=lambda s: s["data_prep_s"]))),
        "{}")
    shares = [s["sft"]["steps"] / s["eager_lineage"]["sft_steps"] for s in stages if s["sft"]["stopped_by"] == "time"]
    num("zooRetrainStepShare", f"{100 * min(shares):.0f}--{100 * max(shares):.0f}", "{}")
    sft_x = [s["sft"]["tokens_per_s_after_first_step"] / s["eager_lineage"]["sft_tokens_per_s"] for s in stages]
    num("zooRetrainSftX", f"{min(sft_x):.2f}--{max(sft_x):.2f}", "{}")
    num("zooRetrainProv", provenance(stages[-1]["run_info"]), "{}")
    num("zooRetrainCommits", ", ".join(r"\texttt{%s}" % s["commit"] for s in stages), "{}")
    record = json.loads(RETRAIN.read_text())
    lineage(record["lineage"], stages[0])
    rerun(record["lineage_data_first"], record["lineage"])
    step_budgets(record["lineage_step_budgets"])
    last_stages(record["stages_678_from_base"])
    numpy_batches(record["stages_12_numpy_batches"], record["lineage_step_budgets"])
    end_to_end(record["recipe_end_to_end"])
    deep_recipe(record["recipe_deep12"], record["recipe_end_to_end"])
    train_steps()
    repair_selection()
    decision_tuning()
    edit_places()
    data_prep(record["lineage_data_first"])


def lineage(run: dict, separate_first: dict) -> None:
    """retrain_compiled_h200/lineage/: the five stages back to back on one machine (their GPU-minutes, with and
    without the machine's start; stage 1's pretraining against the stage 1 run alone), and its product's gates
    against the base target's and its own before the repairs (stage 4) on the same prompts (GPU bf16 alone;
    CPU fp32 for all, with the paired difference of the Spearman correlations)."""
    folder = RETRAIN.parent / run["folder"]
    calls = run["calls"]
    num("zooLineageMin", sum(c["call_wall_s"] for c in calls) / 60, "{:.1f}")
    num("zooLineageLeaseMin", run["lease_s_through_stage5"] / 60, "{:.1f}")
    num("zooLineageCalls", len(calls), "{:d}")
    first = json.loads((folder / "stage1_training_config.json").read_text())
    num("zooLineageProv", provenance(first["run_info"]), "{}")
    num("zooLineagePreSteps", f"{first['pretrain']['steps']:,}", "{}")
    num("zooLineagePreTok", first["pretrain"]["tokens_per_s_after_first_step"] / 1e6, "{:.2f}")
    num("zooSeparatePreSteps", f"{separate_first['pretrain']['steps']:,}", "{}")
    num("zooSeparatePreTok", separate_first["pretrain"]["tokens_per_s_after_first_step"] / 1e6, "{:.2f}")
    for tag, name in (("GpuEval", "gate_eval96_h200.json"), ("GpuVal", "gate_val160_h200.json"),
                      ("CpuEval", "gate_eval96_cpu.json"), ("CpuVal", "gate_val160_cpu.json"),
                      ("InstEval", "installed_gate_eval96_cpu.json"), ("InstVal", "installed_gate_val160_cpu.json"),
                      ("PreVal", "stage4_gate_val160_cpu.json")):
        g = zoo_gate.read_gate(folder / name)["quality_gate"]
        num(f"zooLineage{tag}N", g["n"], "{:d}")
        gate_numbers(f"zooLineage{tag}", g)
    for tag, before in (("Eval", "installed_gate_eval96_cpu.json"), ("Val", "installed_gate_val160_cpu.json"),
                        ("PreVal", "stage4_gate_val160_cpu.json")):
        after = "gate_val160_cpu.json" if "val160" in before else "gate_eval96_cpu.json"
        paired_difference(f"zooLineageDiff{tag}", *(zoo_gate.read_gate(folder / f) for f in (before, after)))


def gate_numbers(prefix: str, g: dict) -> None:
    """A gate's EOS share (%), Spearman correlation with its 95% interval, and loops, as ``prefix``Eos, Rho, Loops."""
    lo, hi = g["spearman_ci95"]
    num(f"{prefix}Eos", 100 * g["eos_share"], "{:.0f}")
    num(f"{prefix}Rho", f"{g['spearman_ref_out']:.2f} [{lo:.2f}, {hi:.2f}]", "{}")
    num(f"{prefix}Loops", g["loops"], "{:d}")


def selection_numbers(prefix: str, selection: dict) -> None:
    """A gated repair's selection: the gated steps, each gate's EOS share (%) and Spearman correlation, and the step
    kept, as ``prefix``Steps, Eos, Rhos and Chosen."""
    gates = selection["gates"]
    num(f"{prefix}Steps", ", ".join(str(g["step"]) for g in gates), "{}")
    num(f"{prefix}Eos", ", ".join(f"{100 * g['eos_share']:.0f}" for g in gates), "{}")
    num(f"{prefix}Rhos", ", ".join(f"{g['spearman_ref_out']:.2f}" for g in gates), "{}")
    num(f"{prefix}Chosen", selection["chosen_step"], "{:d}")


def repair_settings(prefix: str, record: dict) -> None:
    """A repair record's (``repair_config.json``) batch, steps, learning rate and decision weight as ``prefix``Batch,
    Steps, Lr and Dw."""
    cfg = record["config"]
    num(f"{prefix}Batch", cfg["repair_batch"], "{:d}")
    num(f"{prefix}Steps", record["repair"]["steps"], "{:d}")
    num(f"{prefix}Lr", cfg["repair_lr"], "{:g}")
    num(f"{prefix}Dw", cfg["decision_weight"], "{:g}")


def paired_difference(name: str, a: dict, b: dict) -> None:
    """Gate ``b``'s Spearman correlation minus gate ``a``'s on the same prompts, with its paired 95% interval."""
    c = zoo_gate.compare_gates(a, b)
    num(name, "$%s$ [$%s$, $%s$]" % (signed(c["spearman_b_minus_a"]), *map(signed, c["ci95"])), "{}")


def product_gates(prefix: str, folder, device: str, against: dict) -> None:
    """A product's gates on the 96 evaluation and 160 validation prompts (``folder``/gate_<prompts>_<device>.json) as
    ``prefix``<Eval|Val> numbers (:func:`gate_numbers`), each paired with the gates on the same prompts at
    ``against[tag](prompts)`` as ``prefix``Diff<Eval|Val><tag>."""
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        gate = zoo_gate.read_gate(folder / f"gate_{prompts}_{device}.json")
        gate_numbers(f"{prefix}{tag}", gate["quality_gate"])
        for name, path in against.items():
            paired_difference(f"{prefix}Diff{tag}{name}", zoo_gate.read_gate(path(prompts)), gate)


def installed_gate(prompts: str):
    """The weight-average target's GPU gate record on ``prompts`` (eval96 or val160), the pairing partner of the
    variants below (the installed target before the hinge recipe's product; its macros are tagged ``Inst``)."""
    return AVERAGE / f"installed_gate_{prompts}_h200.json"


def calls_provenance(calls: list[dict], run_info: dict) -> str:
    """``commits abc1234 and def5678, NVIDIA H200, torch 2.x, 2026-11-29``: the calls' commits, in order, with one
    record's machine."""
    shas = list(dict.fromkeys(c["commit"] for c in calls))
    commits = " and ".join(f"\\texttt{{{c}}}" for c in shas)
    return (f"commit{'s' if len(shas) > 1 else ''} {commits}, {tex_escape(run_info['device'])}, "
            f"torch {tex_escape(run_info['torch'])}, {run_info['date'][:10]}")


def spurious_ratio(c: dict) -> str:
    """An edit_places comparison's B-over-A departures from the copy with its interval."""
    return "%.2f [%.2f, %.2f]" % (c["spurious_b_over_a"], *c["spurious_ci95"])


def found_points(c: dict, digits: int = 1) -> str:
    """An edit_places comparison's B-minus-A share of the places found, in points, with its interval."""
    d, lo, hi = (100 * v for v in (c["found_share_b_minus_a"], *c["found_ci95"]))
    return f"${d:+.{digits}f}$ [${lo:+.{digits}f}$, ${hi:+.{digits}f}$]"


def rerun(run: dict, first: dict) -> None:
    """retrain_compiled_h200/lineage_data_first/: the same lineage rerun back to back with the edit data made before
    pretraining (its GPU-minutes, stage 1's data preparation and pretraining) and its product's CPU gates, each
    paired with the base target's and with the first lineage's product's on the same prompts."""
    folder, first_folder = (RETRAIN.parent / r["folder"] for r in (run, first))
    num("zooRerunMin", sum(c["call_wall_s"] for c in run["calls"]) / 60, "{:.1f}")
    num("zooRerunLeaseMin", run["lease_s_through_stage5"] / 60, "{:.1f}")
    stage1 = json.loads((folder / "stage1_training_config.json").read_text())
    num("zooRerunProv", provenance(stage1["run_info"]), "{}")
    num("zooRerunDataS", stage1["data_prep_s"], "{:.0f}")
    num("zooRerunPreSteps", f"{stage1['pretrain']['steps']:,}", "{}")
    num("zooRerunPreTok", stage1["pretrain"]["tokens_per_s_after_first_step"] / 1e6, "{:.2f}")
    product_gates("zooRerun", folder, "cpu", {"Inst": lambda p: first_folder / f"installed_gate_{p}_cpu.json",
                                              "First": lambda p: first_folder / f"gate_{p}_cpu.json"})


def step_budgets(run: dict) -> None:
    """retrain_compiled_h200/lineage_step_budgets/: the lineage back to back with each target stage training the
    base lineage's step counts (its GPU-minutes, steps, stage 5's selection gates) and its product's GPU gates,
    each paired with the base target's on the same prompts."""
    folder = RETRAIN.parent / run["folder"]
    num("zooEagerStepsMin", sum(c["call_wall_s"] for c in run["calls"]) / 60, "{:.1f}")
    num("zooEagerStepsLeaseMin", run["lease_s_through_stage5"] / 60, "{:.1f}")
    stages = [json.loads((folder / f"stage{i}_training_config.json").read_text()) for i in range(1, 5)]
    num("zooEagerStepsProv", provenance(stages[0]["run_info"]), "{}")
    num("zooEagerStepsPreSteps", f"{stages[0]['pretrain']['steps']:,}", "{}")
    num("zooEagerStepsSftSteps", ", ".join(f"{s['sft']['steps']:,}" for s in stages), "{}")
    num("zooEagerStepsAllBySteps", "all" if stopped_by_steps(stages) else "not all", "{}")
    selection_numbers("zooEagerStepsSel", json.loads((folder / "stage5_repair_config.json").read_text())["selection"])
    product_gates("zooEagerSteps", folder, "h200", {"": lambda p: SELECTION / f"installed_gate_{p}_h200.json"})
    cpu_repairs(folder, run["cpu_repairs"])


def last_stages(run: dict) -> None:
    """retrain_compiled_h200/stages_678_from_base/: stages 6-8 run from the base target (their GPU-minutes, each
    stage's seconds), stage 7's selection gates, and the product's GPU gates paired with the base target's and with
    the installed target's on the same prompts."""
    folder = RETRAIN.parent / run["folder"]
    stage_s = {k: v for c in run["calls"] for k, v in c["stage_s"].items()}
    num("zooLastMin", run["stages_gpu_s"] / 60, "{:.1f}")
    for stage, tag in (("6", "Six"), ("7", "Seven"), ("8", "Eight")):
        num(f"zooLast{tag}S", stage_s[stage], "{:d}")
    stage6 = json.loads((folder / "stage6_training_config.json").read_text())
    num("zooLastProv", provenance(stage6["run_info"]), "{}")
    selection_numbers("zooLastSel", json.loads((folder / "stage7_repair_config.json").read_text())["selection"])
    product_gates("zooLast", folder, "h200", {"Base": lambda p: SELECTION / f"installed_gate_{p}_h200.json",
                                              "Inst": installed_gate})


def numpy_batches(run: dict, first: dict) -> None:
    """retrain_compiled_h200/stages_12_numpy_batches/: stages 1 and 2 in one call with the edit-tuning batches built in
    numpy (the call's seconds, stage 1's data preparation, the edit-tuning throughputs against the step-budget
    lineage's same stages)."""
    folder = RETRAIN.parent / run["folder"]
    (call,) = run["calls"]
    stages = [json.loads((folder / f"stage{i}_training_config.json").read_text()) for i in (1, 2)]
    before = [json.loads((RETRAIN.parent / first["folder"] / f"stage{i}_training_config.json").read_text())
              for i in (1, 2)]
    num("zooFastCallS", call["call_wall_s"], "{:.0f}")
    num("zooFastOldCallsS", sum(c["call_wall_s"] for c in first["calls"] if c["stages"] in ("1", "2")), "{:.0f}")
    num("zooFastProv", provenance(stages[0]["run_info"]), "{}")
    num("zooFastDataS", stages[0]["data_prep_s"], "{:.0f}")
    num("zooFastOldDataS", before[0]["data_prep_s"], "{:.0f}")
    for tag, runs in (("Fast", stages), ("Old", before)):
        tok = [s["sft"]["tokens_per_s_after_first_step"] / 1e6 for s in runs]
        num(f"zoo{tag}SftTok", f"{min(tok):.2f}--{max(tok):.2f}", "{}")
        num(f"zoo{tag}SftS", " and ".join(f"{s['sft']['wall_s']:.0f}" for s in runs), "{}")


def stopped_by_steps(targets: list[dict]) -> bool:
    """Whether every pretraining and edit-tuning phase of these target-stage records stopped at its steps."""
    return all(t[p]["stopped_by"] == "steps" for t in targets for p in ("pretrain", "sft")
               if t[p] and "stopped_by" in t[p])


def whole_recipe(run: dict, folder=None) -> tuple:
    """A whole-recipe run's folder (``folder``, else its record's under retrain_compiled_h200/), its stages' seconds
    (all eight) and its target stages' records, checked against the run's record of whether every pretraining and
    edit-tuning phase stopped at its steps."""
    folder = RETRAIN.parent / run["folder"] if folder is None else folder
    stage_s = {k: v for c in run["calls"] for k, v in c["stage_s"].items()}
    assert sorted(stage_s) == list("12345678")
    targets = [json.loads((folder / f"stage{i}_training_config.json").read_text()) for i in (1, 2, 3, 4, 6)]
    assert stopped_by_steps(targets) == run["every_phase_stopped_by_steps"]
    return folder, stage_s, targets


def recipe_times(prefix: str, run: dict, folder=None) -> tuple:
    """A whole recipe run back to back (:func:`whole_recipe`): the calls' seconds and their sum, the lease through
    stage 8, each stage's seconds, whether every target phase stopped at its steps and the run's machine, as
    ``prefix``Min, LeaseMin, CallsS, StageS, AllBySteps and Prov; returns :func:`whole_recipe`'s tuple."""
    folder, stage_s, targets = whole_recipe(run, folder)
    assert sum(c["call_wall_s"] for c in run["calls"]) == run["recipe_gpu_s"]
    num(f"{prefix}Min", run["recipe_gpu_s"] / 60, "{:.1f}")
    num(f"{prefix}LeaseMin", run["lease_s_through_stage8"] / 60, "{:.1f}")
    num(f"{prefix}StageS", ", ".join(str(stage_s[k]) for k in sorted(stage_s)), "{}")
    num(f"{prefix}CallsS", ", ".join(str(c["call_wall_s"]) for c in run["calls"]), "{}")
    num(f"{prefix}AllBySteps", "every" if run["every_phase_stopped_by_steps"] else "not every", "{}")
    num(f"{prefix}Prov", provenance(targets[0]["run_info"]), "{}")
    return folder, stage_s, targets


def end_to_end(run: dict) -> None:
    """retrain_compiled_h200/recipe_end_to_end/: stages 1-8 back to back on one machine (:func:`recipe_times`, the
    edit-tuning throughputs, stage 1's data) and the product's GPU gates, paired with the installed target's on the
    same prompts."""
    folder, stage_s, targets = recipe_times("zooEnd", run)
    num("zooEndDataS", targets[0]["data_prep_s"], "{:.0f}")
    tok = [t["sft"]["tokens_per_s_after_first_step"] / 1e6 for t in targets]
    num("zooEndSftTok", f"{min(tok):.2f}--{max(tok):.2f}", "{}")
    product_gates("zooEnd", folder, "h200", {"Inst": installed_gate})


def deep_recipe(run: dict, end: dict) -> None:
    """retrain_compiled_h200/recipe_deep12/: the whole recipe for the twelve-layer shape (its GPU-minutes, the stages'
    commits, every phase stopping at its steps) and its product's GPU gates, each paired with the installed target's
    and with the installed shape's end-to-end run's on the same prompts."""
    folder, stage_s, targets = whole_recipe(run)
    assert sum(stage_s.values()) == run["recipe_gpu_s"] and targets[0]["config"]["num_layers"] == 12
    num("zooDeepRecipeMin", run["recipe_gpu_s"] / 60, "{:.1f}")
    num("zooDeepRecipeAllBySteps", "every" if run["every_phase_stopped_by_steps"] else "not every", "{}")
    num("zooDeepRecipeShare", run["recipe_gpu_s"] / sum(c["call_wall_s"] for c in end["calls"]), "{:.2f}")
    num("zooDeepRecipeProv", calls_provenance(run["calls"], targets[-1]["run_info"]), "{}")
    product_gates("zooDeepRecipe", folder, "h200", {
        "Inst": installed_gate,
        "End": lambda p: RETRAIN.parent / end["folder"] / f"gate_{p}_h200.json"})


def train_steps() -> None:
    """train_steps_h200/: experiments.bench_train_steps on one H200: the edit-tuning step with the batches built per
    row (the earlier code) and in numpy, in two runs on the same machine, and the compile modes (the per-row
    batches' run of every mode)."""
    runs = {name: json.loads((TRAIN_STEPS / f"{name}.json").read_text())
            for name in ("numpy_batches", "per_row_batches", "compile_modes_per_row_batches")}
    fast, slow, modes = (runs[n]["modes"] for n in runs)
    num("zooStepsProv", provenance(runs["numpy_batches"]["run_info"]), "{}")
    num("zooStepsShapes", runs["numpy_batches"]["batch_shapes"], "{:d}")
    num("zooStepsPerRowMs", slow["layers"]["median_ms_per_step"], "{:.1f}")
    num("zooStepsNumpyMs", fast["layers"]["median_ms_per_step"], "{:.1f}")
    num("zooStepsX", slow["layers"]["median_ms_per_step"] / fast["layers"]["median_ms_per_step"])
    num("zooStepsKernelMs", fast["layers"]["profiled"]["gpu_kernel_ms_per_step"], "{:.0f}")
    num("zooStepsGraphsMs", fast["layers-graphs"]["median_ms_per_step"], "{:.1f}")
    num("zooStepsGraphsFirstMs", fast["layers-graphs"]["passes"][0]["ms_per_step"], "{:.0f}")
    num("zooStepsModelMs", modes["model"]["median_ms_per_step"], "{:.1f}")
    num("zooStepsModelKernelMs", modes["model"]["profiled"]["gpu_kernel_ms_per_step"], "{:.0f}")
    num("zooStepsModesLayersMs", modes["layers"]["median_ms_per_step"], "{:.1f}")
    num("zooStepsModesLayersKernelMs", modes["layers"]["profiled"]["gpu_kernel_ms_per_step"], "{:.0f}")


def cpu_repairs(folder, runs: dict) -> None:
    """lineage_step_budgets/stage4_cpu_repair*: the lineage's stage-4 weights repaired on the CPU, gated (the gates'
    EOS shares and correlations) and as the base target was (23 steps, then 8 more of more continuations,
    ungated); the latter's CPU gates paired with the base target's and with the stage-4 weights' own."""
    selection_numbers("zooEagerStepsCpuSel", json.loads((folder / runs["gated"]["record"]).read_text())["selection"])
    steps = [json.loads((folder / runs[k]["record"]).read_text()) for k in ("repair", "then")]
    num("zooEagerStepsCpuRepairMin", sum(r["wall_s"] for r in steps) / 60, "{:.0f}")
    num("zooEagerStepsCpuRepairSteps", " + ".join(str(r["repair"]["steps"]) for r in steps), "{}")
    num("zooEagerStepsCpuRepairBatch", " and ".join(str(r["config"]["repair_batch"]) for r in steps), "{}")
    num("zooEagerStepsCpuRepairProv", provenance(steps[-1]["run_info"]), "{}")
    installed = RETRAIN.parent / "lineage"
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        gate = zoo_gate.read_gate(folder / runs["then"][prompts])
        gate_numbers(f"zooEagerStepsCpuRep{tag}", gate["quality_gate"])
        before = zoo_gate.read_gate(installed / f"installed_gate_{prompts}_cpu.json")
        paired_difference(f"zooEagerStepsCpuRepDiff{tag}", before, gate)
        unrepaired = zoo_gate.read_gate(folder / runs["stage4_gates"][prompts])
        gate_numbers(f"zooEagerStepsCpuPre{tag}", unrepaired["quality_gate"])
        paired_difference(f"zooEagerStepsCpuRepDiffPre{tag}", unrepaired, gate)


def repair_selection() -> None:
    """repair_selection_h200/: stage 5's loop repair, its step chosen by 64-prompt validation gates, applied once more
    to the base target; the gates along the repair, and the base and the repaired target on the same 96
    evaluation and 160 validation prompts (GPU bf16, paired differences of the Spearman correlations), and the
    base target's answers that hold its correlation down (:func:`experiments.zoo_gate.misses`)."""
    record = json.loads((SELECTION / "repair_config.json").read_text())
    selection_numbers("zooSel", record["selection"])
    num("zooSelN", record["selection"]["gates"][0]["n"], "{:d}")
    num("zooSelWallS", record["wall_s"], "{:.0f}")
    num("zooSelProv", provenance(record["run_info"]), "{}")
    num("zooMissUnder", 100 * zoo_gate.MISS_UNDER, "{:.0f}")
    num("zooMissOver", zoo_gate.MISS_OVER, "{:g}")
    num("zooMissSlack", zoo_gate.MISS_SLACK, "{:g}")
    num("zooMissMinRef", zoo_gate.MISS_MIN_REF, "{:g}")
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        inst, rep = (zoo_gate.read_gate(SELECTION / f"{who}_gate_{prompts}_h200.json")
                     for who in ("installed", "repaired"))
        num(f"zooSel{tag}N", inst["quality_gate"]["n"], "{:d}")
        gate_numbers(f"zooSelInst{tag}", inst["quality_gate"])
        gate_numbers(f"zooSelRep{tag}", rep["quality_gate"])
        paired_difference(f"zooSelDiff{tag}", inst, rep)
        miss = zoo_gate.misses(inst)  # the installed target's answers that hold its correlation down
        num(f"zooMiss{tag}Rho", miss["rho"])
        for kind, name in (("short", "Short"), ("long", "Long"), ("short_unedited", "Unedited")):
            num(f"zooMiss{tag}{name}", miss[kind], "{:d}")
        for kind, name in (("short", "NoShort"), ("long", "NoLong"), ("both", "NoBoth")):
            num(f"zooMiss{tag}{name}", miss[f"rho_without_{kind}"])


def decision_tuning() -> None:
    """decision_tuning_h200/: the base target tuned further with a heavier loss weight where the answer leaves or
    resumes the copy, then loop-repaired with the repeats' unlikelihood weighted as before and more weakly; the two
    kinds of misses of each on the base target's evaluation and validation prompts, their gates, and each repaired
    one's paired difference from the base target (repair_selection_h200/installed_gate_*: installed when it ran)."""
    tuning = json.loads((DECISION / "training_config.json").read_text())
    repair = json.loads((DECISION / "repair_config.json").read_text())
    num("zooDecWeight", tuning["config"]["decision_weight"], "{:g}")
    num("zooDecSteps", f"{tuning['sft']['steps']:,}", "{}")
    num("zooDecRepairSteps", repair["repair"]["steps"], "{:d}")
    num("zooDecRepairChosen", repair["selection"]["chosen_step"], "{:d}")
    num("zooDecProv", provenance(tuning["run_info"]), "{}")
    weak = json.loads((DECISION / "weak_repair_config.json").read_text())
    num("zooDecWeakWeight", weak["config"]["repair_weight"], "{:g}")
    num("zooDecRepWeight", repair["config"]["repair_weight"], "{:g}")
    num("zooDecWeakSteps", weak["repair"]["steps"], "{:d}")
    num("zooDecWeakProv", provenance(weak["run_info"]), "{}")
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        base = zoo_gate.read_gate(SELECTION / f"installed_gate_{prompts}_h200.json")
        for who, name in (("tuned", "Tuned"), ("repaired", "Rep"), ("weak_repaired", "Weak")):
            gate = zoo_gate.read_gate(DECISION / f"{who}_gate_{prompts}_h200.json")
            gate_numbers(f"zooDec{name}{tag}", gate["quality_gate"])
            miss = zoo_gate.misses(gate)
            for kind, key in (("Unedited", "short_unedited"), ("Long", "long")):
                num(f"zooDec{name}{tag}{kind}", miss[key], "{:d}")
            if who != "tuned":
                paired_difference(f"zooDec{name}Diff{tag}", base, gate)


def edit_places() -> None:
    """edit_places_cpu_fp32/: teacher-forced on the gate prompts' references (evaluation, validation and training
    rows), the share of the places where the reference leaves the copy that each target leaves it at too, and its
    departures from the copy per 1,000 tokens where the reference copies; for the base target, the decision-tuned one
    before and after each of its two loop repairs, and the installed target (installed_average_*.json; with the
    share of its departures that are the same text in other tokens)."""
    labels = {"installed": "Inst", "tuned": "Tuned", "repaired": "Rep", "repaired_weak": "Weak",
              "installed_average": "Avg"}  # "installed" in the first files: the base target, installed when they ran
    for tag, name in (("Eval", "eval96"), ("Val", "val160"), ("Train", "train96")):
        record = zoo_gate.read_gate(PLACES / f"{name}.json")  # stored gzipped
        num(f"zooPlaces{tag}N", record["prompts"], "{:d}")
        average = zoo_gate.read_gate(PLACES / f"installed_average_{name}.json")
        for model in record["models"] + average["models"]:
            s = model["summary"]
            num(f"zooPlaces{tag}{labels[model['label']]}Found", 100 * s["found_share"], "{:.0f}")
            num(f"zooPlaces{tag}{labels[model['label']]}Spur", s["spurious_per_1000"], "{:.0f}")
            if "spurious_same_text_share" in s:
                num(f"zooPlaces{tag}{labels[model['label']]}Same", 100 * s["spurious_same_text_share"], "{:.0f}")
    num("zooPlacesProv", provenance(record["run_info"]), "{}")
    num("zooPlacesAvgProv", provenance(average["run_info"]), "{}")


def data_prep(rerun_run: dict) -> None:
    """data_prep_h200/: stage 3's edit-tuning examples made in one call with the compiled token alignment and with
    difflib (same examples), and stage 1 of the lineage at that code in another call (its data preparation
    against the rerun's)."""
    timing = json.loads((DATA_PREP / "alignment_timing.json").read_text())
    num("zooAlignCompiledS", "--".join(f"{timing[k]:.0f}" for k in ("sft_examples_compiled_s",
                                                                     "sft_examples_compiled_again_s")), "{}")
    num("zooAlignDifflibS", timing["sft_examples_difflib_s"], "{:.0f}")
    num("zooAlignRows", f"{timing['rows']:,}", "{}")
    num("zooAlignProv", provenance(timing["run_info"]), "{}")
    stage1 = json.loads((DATA_PREP / "stage1_training_config.json").read_text())
    before = json.loads((RETRAIN.parent / rerun_run["folder"] / "stage1_training_config.json").read_text())
    num("zooStageOneDataS", stage1["data_prep_s"], "{:.0f}")
    num("zooStageOneWallS", stage1["wall_s"], "{:.0f}")
    num("zooStageOneRerunWallS", before["wall_s"], "{:.0f}")
    num("zooStageOnePreTok", stage1["pretrain"]["tokens_per_s_after_first_step"] / 1e6, "{:.2f}")
    num("zooStageOnePreSteps", f"{stage1['pretrain']['steps']:,}", "{}")
    num("zooStageOneProv", provenance(stage1["run_info"]), "{}")


def weight_average() -> None:
    """weight_average_h200/ (its average_config.json): the weight-average target, the base target's weights
    averaged with its decision-tuned, weakly repaired descendant's; the validation gates that chose the weight (CPU),
    its gates on the base target's evaluation and validation prompts (GPU), the kinds of misses there, and its paired
    differences from the base target and from the descendant."""
    record = json.loads((AVERAGE / "average_config.json").read_text())
    num("zooAvgWeight", record["weight"], "{:g}")
    num("zooAvgBaseWeight", 1 - record["weight"], "{:g}")
    num("zooAvgProv", provenance(record["run_info"]), "{}")
    for tag, name in (("Half", "average050"), ("Chosen", "average075")):  # the weights tried: 0.5 and 0.75
        g = zoo_gate.read_gate(AVERAGE / f"{name}_gate_val64_cpu.json")["quality_gate"]
        num(f"zooAvgSel{tag}Eos", 100 * g["eos_share"], "{:.0f}")
        num(f"zooAvgSel{tag}Rho", g["spearman_ref_out"])
    num("zooAvgSelN", g["n"], "{:d}")
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        gate = zoo_gate.read_gate(AVERAGE / f"installed_gate_{prompts}_h200.json")
        base = zoo_gate.read_gate(SELECTION / f"installed_gate_{prompts}_h200.json")
        weak = zoo_gate.read_gate(DECISION / f"weak_repaired_gate_{prompts}_h200.json")
        gate_numbers(f"zooAvg{tag}", gate["quality_gate"])
        miss = zoo_gate.misses(gate)
        for kind, key in (("Unedited", "short_unedited"), ("Long", "long")):
            num(f"zooAvg{tag}{kind}", miss[key], "{:d}")
        paired_difference(f"zooAvgDiff{tag}", base, gate)
        paired_difference(f"zooAvgWeakDiff{tag}", weak, gate)
    num("zooAvgGateProv", provenance(gate["run_info"]), "{}")
    every = {who: zoo_gate.read_gate(AVERAGE / f"{who}_gate_eval274_cpu.json") for who in ("installed", "base")}
    for who, tag in (("installed", "Avg"), ("base", "Base")):  # every admitted evaluation edit, CPU fp32
        gate_numbers(f"zooAllEval{tag}", every[who]["quality_gate"])
    num("zooAllEvalN", every["installed"]["quality_gate"]["n"], "{:d}")
    num("zooAllEvalMedianRef", every["installed"]["quality_gate"]["median_ref_norm"])
    paired_difference("zooAllEvalDiff", every["base"], every["installed"])
    num("zooAllEvalProv", provenance(every["installed"]["run_info"]), "{}")


def ambiguity_tuning() -> None:
    """ambiguity_tuning_h200/: stages 6-8 from the base target with the answer's ambiguous copies weighted in stage
    6 (train_zoo --ambiguity-weight): the weight, the GPU-minutes of the three stages, and the product's gates paired
    with the installed target's on the same prompts (``zooAmb...``)."""
    stage6 = json.loads((AMBIGUITY / "stage6_training_config.json").read_text())
    num("zooAmbWeight", stage6["config"]["ambiguity_weight"], "{:g}")
    num("zooAmbProv", provenance(stage6["run_info"]), "{}")
    runs = json.loads((AMBIGUITY / "runs.json").read_text())
    num("zooAmbMin", sum(s for c in runs["calls"] for s in c.get("stage_s", {}).values()) / 60, "{:.1f}")
    product_gates("zooAmb", AMBIGUITY, "h200", {"Inst": installed_gate})


def drift_repair() -> None:
    """drift_repair_h200/: the installed target repaired in the drift mode (train_zoo repair --repair-mode drift) in
    four variants (learning rate; the anchors' decision weight and the drift term's weight), and the last one rerun
    and followed by the recipe's loop repair and weight averages: each repair's steps, each product's gates paired
    with the installed target's on the same prompts, and the kinds of misses on the evaluation prompts
    (``zooDrift...``)."""
    rerun = "lr1e-4_decision16_resync0.3_9steps"
    variants = {"": "lr1e-4", "Fast": "lr3e-4", "Dec": "lr1e-4_decision16", "DecWeak": "lr1e-4_decision16_resync0.3",
                "Rerun": rerun, "RerunAvg": f"{rerun}_avg0.75", "RerunHalf": f"{rerun}_avg0.5"}
    for tag, variant in variants.items():
        if (DRIFT / variant / "repair_config.json").exists():
            record = json.loads((DRIFT / variant / "repair_config.json").read_text())
            cfg = record["config"]
            num(f"zooDrift{tag}Lr", cfg["repair_lr"], "{:g}")
            num(f"zooDrift{tag}Dw", cfg["decision_weight"], "{:g}")
            num(f"zooDrift{tag}Rw", cfg["resync_weight"], "{:g}")
            num(f"zooDrift{tag}Steps", record["repair"]["steps"], "{:d}")
            num(f"zooDrift{tag}Prov", provenance(record["run_info"]), "{}")
        else:
            average = json.loads((DRIFT / variant / "average_config.json").read_text())
            num(f"zooDrift{tag}Weight", average["weight"], "{:g}")
        product_gates(f"zooDrift{tag}", DRIFT / variant, "h200",
                      {"Inst": installed_gate})
        miss = zoo_gate.misses(zoo_gate.read_gate(DRIFT / variant / "gate_eval96_h200.json"))
        num(f"zooDrift{tag}EvalShort", miss["short"], "{:d}")
        num(f"zooDrift{tag}EvalLong", miss["long"], "{:d}")
    num("zooDriftBatch", json.loads((DRIFT / "lr1e-4" / "repair_config.json").read_text())["config"]["repair_batch"],
        "{:d}")
    loops = json.loads((DRIFT / rerun / "loop_repair_config.json").read_text())
    selection_numbers("zooDriftRerunLoop", loops["selection"])
    installed = zoo_gate.misses(zoo_gate.read_gate(AVERAGE / "installed_gate_eval96_h200.json"))
    num("zooDriftInstEvalShort", installed["short"], "{:d}")
    num("zooDriftInstEvalLong", installed["long"], "{:d}")


def draws() -> None:
    """seed_soup_h200/ and rename_tuning_h200/: more draws of the installed recipe's stages 6-8 from the base target
    (seeds 1-3) and the soup of all four draws; stage 6 with a share of its edits' files renamed. Each product's gates
    paired with the installed target's, the stage-6 steps, and the soup's weights (``zooSoup...``,
    ``zooRename...``)."""
    installed = {"Inst": installed_gate}
    steps = []
    for tag, variant in (("One", "seed1"), ("Two", "seed2"), ("Three", "seed3"), ("", "soup")):
        product_gates(f"zooSoup{tag}", SOUP / variant, "h200", installed)
        if variant != "soup":
            sft = json.loads((SOUP / variant / "stage6_training_config.json").read_text())["sft"]
            steps.append(100 * sft["steps"] / sft["planned_steps"])
    num("zooSoupStepShare", f"{min(steps):.0f}--{max(steps):.0f}", "{}")
    soup = json.loads((SOUP / "soup" / "average_config.json").read_text())
    num("zooSoupProv", provenance(soup["run_info"]), "{}")
    num("zooSoupWeights", ", ".join(f"{w:g}" for w in soup["weights"]), "{}")
    num("zooRenameNames", RENAMED_NAMES_SHARE, "{:g}")
    for tag, variant in (("Half", "rename0.5"), ("All", "rename1.0")):
        product_gates(f"zooRename{tag}", RENAME / variant, "h200", installed)
        cfg = json.loads((RENAME / variant / "stage6_training_config.json").read_text())
        num(f"zooRename{tag}Share", cfg["config"]["rename_share"], "{:g}")
        num(f"zooRename{tag}Prov", provenance(cfg["run_info"]), "{}")


def shapes() -> None:
    """target_shapes_h200/: other shapes of the target trained from scratch as the recipe's stage 1 at two seeds,
    teacher-forced on the gate's prompts: each against the installed shape of the same seed, and the installed shape's
    second seed against its first (``zooShape...``): spurious departures from the copy as a ratio, places found as a
    difference in points, each with its paired bootstrap interval."""
    runs = json.loads((SHAPES / "runs.json").read_text())

    for tag, rows in (("Eval", "eval96"), ("Val", "validation160")):
        for shape, label in (("Heads", "heads12"), ("Deep", "deep12")):
            pair = [json.loads((SHAPES / "comparisons" / f"{rows}_seed{seed}_{label}.json").read_text())
                    for seed in (0, 1)]
            num(f"zooShape{shape}{tag}Spur", " and ".join(map(spurious_ratio, pair)), "{}")
            num(f"zooShape{shape}{tag}Found", " and ".join(map(found_points, pair)), "{}")
        seeds = json.loads((SHAPES / "comparisons" / f"{rows}_installed_seed1_vs_seed0.json").read_text())
        num(f"zooShapeSeed{tag}Spur", spurious_ratio(seeds), "{}")
        num(f"zooShapeSeed{tag}Found", found_points(seeds), "{}")
        inst = [runs["places"][rows][f"installed_seed{seed}"]["spurious_per_1000"] for seed in (0, 1)]
        num(f"zooShapeInst{tag}Spur", " and ".join(f"{v:.1f}" for v in inst), "{}")
    for shape, label in (("Heads", "heads12"), ("Deep", "deep12"), ("Inst", "installed")):
        num(f"zooShape{shape}Params", runs["shapes"][label]["parameters"] / 1e6, "{:.1f}")
    ri = json.loads((SHAPES / "installed_seed1" / "training_config.json").read_text())["run_info"]
    num("zooShapeProv", calls_provenance(runs["calls"], ri), "{}")


def copy_margin() -> None:
    """copy_margin_h200/: the installed target tuned more with the copy-margin hinge (train_zoo --copy-margin-weight)
    against the same tuning without it, and two products of the recipe's loop repair and average after it (the hinge
    in the repair's anchors or not): the settings, each product's gates paired with the installed target's (and the
    tuned ones' with the control's), and teacher-forced departures from the copy and places found, paired
    (``zooMargin...``)."""
    from experiments.edit_places import compare_places, read_side

    control = json.loads((MARGIN / "control" / "training_config.json").read_text())
    cfgs = {tag: json.loads((MARGIN / v / "training_config.json").read_text())
            for tag, v in (("Four", "margin4"), ("Sixteen", "margin16"))}
    for tag, record in cfgs.items():
        shared = {k: v for k, v in record["config"].items() if k != "copy_margin_weight"}
        assert shared == {k: v for k, v in control["config"].items() if k != "copy_margin_weight"}, tag
        assert record["sft"]["stopped_by"] == control["sft"]["stopped_by"] == "steps"
        num(f"zooMargin{tag}W", record["config"]["copy_margin_weight"], "{:g}")
    cfg = control["config"]
    assert cfg["copy_margin_weight"] == 0
    num("zooMarginMargin", cfgs["Four"]["config"]["copy_margin"], "{:g}")
    num("zooMarginSteps", control["sft"]["steps"], "{:d}")
    num("zooMarginLr", cfg["sft_lr"], "{:g}")
    num("zooMarginDw", cfg["decision_weight"], "{:g}")
    runs = json.loads((MARGIN / "runs.json").read_text())
    num("zooMarginProv", calls_provenance(runs["calls"], control["run_info"]), "{}")
    ctl = lambda p: MARGIN / "control" / f"gate_{p}_h200.json"  # noqa: E731
    for tag, variant in (("Four", "margin4"), ("Sixteen", "margin16")):
        product_gates(f"zooMargin{tag}", MARGIN / variant, "h200", {"Ctl": ctl})
    tuned = [zoo_gate.read_gate(MARGIN / v / f"gate_{p}_h200.json")["quality_gate"]["eos_share"]
             for v in ("control", "margin4", "margin16") for p in ("eval96", "val160")]
    num("zooMarginTunedMaxEos", 100 * max(tuned), "{:.0f}")
    for tag, variant in (("Loops", "margin4_rerun_loops_avg0.75"), ("Hinge", "hinge_loops_avg0.75")):
        product_gates(f"zooMargin{tag}", MARGIN / variant, "h200", {"Inst": installed_gate})
        average = json.loads((MARGIN / variant / "average_config.json").read_text())
        num(f"zooMargin{tag}Weight", average["weight"], "{:g}")
        repair = json.loads((MARGIN / variant / "loop_repair_config.json").read_text())
        num(f"zooMargin{tag}Kept", repair["selection"]["chosen_step"], "{:d}")
        num(f"zooMargin{tag}RepairW", repair["config"]["copy_margin_weight"], "{:g}")
    sides = {"installed": "eval96_tuned.json.gz:installed", "control": "eval96_tuned.json.gz:control",
             "Four": "eval96_tuned.json.gz:margin4", "Sixteen": "eval96_tuned.json.gz:margin16",
             "Loops": "eval96_averages.json.gz:avg", "Hinge": "eval96_hinge.json.gz:avg_hinge"}
    samples = {k: read_side(str(MARGIN / "places" / s))[1] for k, s in sides.items()}
    for tag, against in (("Four", "control"), ("Sixteen", "control"), ("Loops", "installed"), ("Hinge", "installed")):
        c = compare_places(samples[against], samples[tag])
        num(f"zooMargin{tag}Spur", spurious_ratio(c), "{}")
        num(f"zooMargin{tag}Found", found_points(c, 0), "{}")
    num("zooMarginCtlSpurN", compare_places(samples["installed"], samples["control"])["b"]["spurious_per_1000"],
        "{:.1f}")


def resync_repair() -> None:
    """resync_repair_h200/: the installed target repaired in the resync mode (the way back to the copy after the
    model's own new lines at a changed place), with changed places only and with half of them kept lines, and the
    latter rerun with the recipe's loop repair and average after it: the settings, each product's gates paired with
    the installed target's, and the installed target's loops (``zooResync...``)."""
    cfgs = {tag: json.loads((RESYNC / v / "repair_config.json").read_text())
            for tag, v in (("Changed", "copy0"), ("Kept", "copy0.5"))}
    changed, kept = cfgs["Changed"], cfgs["Kept"]
    assert {k: v for k, v in changed["config"].items() if k != "repair_copy_share"} == \
        {k: v for k, v in kept["config"].items() if k != "repair_copy_share"}
    assert changed["config"]["repair_mode"] == "resync" and changed["repair"]["steps"] == kept["repair"]["steps"]
    repair_settings("zooResync", changed)
    num("zooResyncKeptShare", kept["config"]["repair_copy_share"], "{:g}")
    runs = json.loads((RESYNC / "runs.json").read_text())
    num("zooResyncProv", calls_provenance(runs["calls"], changed["run_info"]), "{}")
    for tag, variant in (("Changed", "copy0"), ("Kept", "copy0.5")):
        product_gates(f"zooResync{tag}", RESYNC / variant, "h200", {"Inst": installed_gate})
    product_gates("zooResyncAvg", RESYNC / "copy0.5_loops_avg0.75", "h200", {"Inst": installed_gate})
    loops = json.loads((RESYNC / "copy0.5_loops" / "loop_repair_config.json").read_text())
    rerun = json.loads((RESYNC / "copy0.5_loops" / "repair_config.json").read_text())
    assert rerun["config"] == kept["config"]  # a rerun of the kept-line repair
    num("zooResyncAvgKept", loops["selection"]["chosen_step"], "{:d}")
    num("zooResyncAvgWeight", json.loads((RESYNC / "copy0.5_loops_avg0.75" / "average_config.json").read_text())
        ["weight"], "{:g}")
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        num(f"zooResyncInstLoops{tag}", zoo_gate.read_gate(installed_gate(prompts))["quality_gate"]["loops"], "{:d}")


def decision_repair() -> None:
    """decision_repair_cpu/: the installed target repaired in the decisions mode (train_zoo repair --repair-mode
    decisions) on a CPU, then averaged with the installed target and, as the recipe does, loop-repaired and averaged,
    and another draw of the repair and its average: the repair's settings, each product's CPU gates paired with the
    installed target's CPU gates on the same prompts, the two draws' soup with the installed target, and the kinds of
    misses on the evaluation prompts (``zooFirstDec...``)."""
    draw = "decisions_seed0"
    record = json.loads((DECISIONS / draw / "repair_config.json").read_text())
    repair_settings("zooFirstDec", record)
    num("zooFirstDecChosen", record["selection"]["chosen_step"], "{:d}")
    num("zooFirstDecProv", provenance(record["run_info"]), "{}")
    loops = json.loads((DECISIONS / f"{draw}_loops" / "repair_config.json").read_text())
    num("zooFirstDecLoopsChosen", loops["selection"]["chosen_step"], "{:d}")
    second = json.loads((DECISIONS / "decisions_seed1" / "repair_config.json").read_text())
    num("zooFirstDecTwoSeed", second["config"]["seed"], "{:d}")
    num("zooFirstDecTwoChosen", second["selection"]["chosen_step"], "{:d}")
    installed = lambda prompts: DECISIONS / f"installed_gate_{prompts}_cpu.json"  # noqa: E731
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160")):
        gate_numbers(f"zooFirstDecInst{tag}", zoo_gate.read_gate(installed(prompts))["quality_gate"])
    products = {"": draw, "Avg": f"{draw}_avg0.5", "LoopsAvg": f"{draw}_loops_avg0.75",
                "Two": "decisions_seed1", "TwoAvg": "decisions_seed1_avg0.5",  # Two: another draw
                "Soup": "decisions_soup"}  # 0.5 x the installed target + 0.25 x each draw
    for tag, folder in products.items():
        product_gates(f"zooFirstDec{tag}", DECISIONS / folder, "cpu", {"Inst": installed})
        if "_avg" in folder:
            average = json.loads((DECISIONS / folder / "average_config.json").read_text())
            num(f"zooFirstDec{tag}Weight", average["weight"], "{:g}")
    soup = json.loads((DECISIONS / "decisions_soup" / "average_config.json").read_text())
    num("zooFirstDecSoupWeights", " and ".join(f"{w:g}" for w in soup["weights"][:2]), "{}")  # installed, each draw
    for tag, gate in (("Inst", installed("eval96")), *((t, DECISIONS / f / "gate_eval96_cpu.json")
                                                        for t, f in products.items())):
        miss = zoo_gate.misses(zoo_gate.read_gate(gate))
        num(f"zooFirstDec{tag}EvalShort", miss["short"], "{:d}")
        num(f"zooFirstDec{tag}EvalLong", miss["long"], "{:d}")


def decision_repair_gpu() -> None:
    """decision_repair_h200/: the decisions repair at the GPU's batch, two draws side by side, and each one's average
    with the installed target: the settings, each product's GPU gates paired with the installed target's, and the
    kinds of misses on the evaluation prompts (``zooGpuDec...``)."""
    runs = json.loads((DECISIONS_GPU / "runs.json").read_text())
    first, second = (json.loads((DECISIONS_GPU / d / "repair_config.json").read_text()) for d in runs["draws"])
    assert {k: v for k, v in first["config"].items() if k != "seed"} == \
        {k: v for k, v in second["config"].items() if k != "seed"}
    repair_settings("zooGpuDec", first)
    num("zooGpuDecTwoSteps", second["repair"]["steps"], "{:d}")
    num("zooGpuDecTime", first["config"]["repair_time_s"], "{:.0f}")
    num("zooGpuDecProv", calls_provenance([runs["call"]], first["run_info"]), "{}")
    products = {"": "seed0", "Two": "seed1", "Avg": "seed0_avg0.5", "TwoAvg": "seed1_avg0.5"}
    for tag, folder in products.items():
        product_gates(f"zooGpuDec{tag}", DECISIONS_GPU / folder, "h200", {"Inst": installed_gate})
        miss = zoo_gate.misses(zoo_gate.read_gate(DECISIONS_GPU / folder / "gate_eval96_h200.json"))
        num(f"zooGpuDec{tag}EvalShort", miss["short"], "{:d}")
        num(f"zooGpuDec{tag}EvalLong", miss["long"], "{:d}")
    miss = zoo_gate.misses(zoo_gate.read_gate(installed_gate("eval96")))
    num("zooGpuDecInstEvalShort", miss["short"], "{:d}")
    num("zooGpuDecInstEvalLong", miss["long"], "{:d}")


def margin_recipe() -> None:
    """margin_recipe_h200/: stages 6-8 from the base target with the copy-margin hinge in stage 6, two draws: the
    hinge's weight, each draw's GPU gates paired with the weight-average target's and its misses on the evaluation
    prompts (``zooMr...``). Seed 0's product is the installed target: its two GPU sweeps (edit_norm.SWEEP and
    ALL_HELD_OUT) must equal runs.json's summaries of them, beside which runs.json holds the weight-average target's
    sweeps of the same prompts (``zooAvgSweep...``, ``zooAvgAll...``)."""
    runs = json.loads((MARGIN_RECIPE / "runs.json").read_text())
    first = json.loads((MARGIN_RECIPE / "seed0" / "stage6_training_config.json").read_text())
    num("zooMrWeight", first["config"]["copy_margin_weight"], "{:g}")
    num("zooMrProv", calls_provenance(runs["calls"], first["run_info"]), "{}")
    num("zooMrWeightsCommit", f"\\texttt{{{runs['product_seed0']['weights_commit']}}}", "{}")
    for tag, folder in (("", "seed0"), ("Two", "seed1")):
        product_gates(f"zooMr{tag}", MARGIN_RECIPE / folder, "h200", {"Inst": installed_gate})
        miss = zoo_gate.misses(zoo_gate.read_gate(MARGIN_RECIPE / folder / "gate_eval96_h200.json"))
        num(f"zooMr{tag}EvalShort", miss["short"], "{:d}")
        num(f"zooMr{tag}EvalLong", miss["long"], "{:d}")
    average_all = zoo_gate.read_gate(AVERAGE / "installed_gate_eval274_cpu.json")  # all 274 evaluation edits
    seed0_all = zoo_gate.read_gate(MARGIN_RECIPE / "seed0" / "gate_eval274_cpu.json")
    gate_numbers("zooMrAllEval", seed0_all["quality_gate"])
    gate_numbers("zooMrAllEvalInst", average_all["quality_gate"])
    paired_difference("zooMrAllDiffEvalInst", average_all, seed0_all)
    for tag, gate in (("", seed0_all), ("Inst", average_all)):
        miss = zoo_gate.misses(gate)
        num(f"zooMrAll{tag}Short", miss["short"], "{:d}")
        num(f"zooMrAll{tag}Long", miss["long"], "{:d}")
    for tag, prompts in (("Eval", "eval96"), ("Val", "val160"), ("Train", "train96")):  # teacher-forced places
        c = zoo_gate.read_gate(MARGIN_RECIPE / "seed0" / f"edit_places_{prompts}_vs_installed_cpu.json")
        num(f"zooMrPlaces{tag}Spur", spurious_ratio(c), "{}")
        num(f"zooMrPlaces{tag}Found", found_points(c), "{}")
        (own,) = zoo_gate.read_gate(MARGIN_RECIPE / "seed0" / f"edit_places_{prompts}_cpu.json")["models"]
        num(f"zooMrPlaces{tag}FoundShare", 100 * own["summary"]["found_share"], "{:.0f}")  # the installed target's
        num(f"zooMrPlaces{tag}SpurN", own["summary"]["spurious_per_1000"], "{:.0f}")
    for key, folder in (("sweep", edit_norm.SWEEP), ("all_heldout", edit_norm.ALL_HELD_OUT)):
        recorded = runs["product_seed0"][key]
        if recorded["seed0"] != edit_norm.sweep_summary(folder):  # the installed target's sweeps, as recorded
            raise ValueError(f"{MARGIN_RECIPE}/runs.json's {key} summary is not {folder}'s")
        tag = {"sweep": "Sweep", "all_heldout": "All"}[key]
        prev = recorded["weight_average"]  # the weight-average target's sweep of the same prompts (runs.json)
        num(f"zooAvg{tag}Rho", prev["spearman_ref_out"])
        num(f"zooAvg{tag}Stopped", of_n(prev["ended_before_cap"], prev["prompts"]), "{}")
        for binning, side in (("ref_edit_norm", "Ref"), ("output_edit_norm", "Out")):
            num(f"zooAvg{tag}{side}HighN", prev[binning]["top_bins_prompts"], "{:d}")
            num(f"zooAvg{tag}{side}HighNgramDrop", prev[binning]["fall_to_top_bins_percent"]["ngram"],
                "{:.1f}" if key == "all_heldout" else "{:.0f}")


def hinge_recipe() -> None:
    """retrain_hinge_recipe_h100/: the recipe as it stands (stage 6 with the hinge) from scratch, stages 1-8 back to
    back on one H100 (:func:`recipe_times`) and its product's GPU gate on the 96 evaluation prompts, paired with the
    installed target's (``zooHinge...``)."""
    run = json.loads((HINGE_RECIPE / "runs.json").read_text())
    _, _, targets = recipe_times("zooHinge", run, HINGE_RECIPE)
    assert targets[-1]["config"]["copy_margin_weight"] > 0  # stage 6 with the hinge
    gate = zoo_gate.read_gate(HINGE_RECIPE / "gate_eval96_h100.json")
    gate_numbers("zooHingeEval", gate["quality_gate"])
    paired_difference("zooHingeDiffEvalMr", zoo_gate.read_gate(MARGIN_RECIPE / "seed0" / "gate_eval96_h200.json"),
                      gate)


def make() -> None:
    model()
    weight_average()
    ambiguity_tuning()
    drift_repair()
    draws()
    shapes()
    copy_margin()
    resync_repair()
    decision_repair()
    decision_repair_gpu()
    margin_recipe()
    hinge_recipe()
    compile_speed()
    eagle3_gate()
