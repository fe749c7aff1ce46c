"""The zoo model: tiny-coder's training and change requests (hybridsd/models/tiny-coder/training_config*.json), its
EAGLE heads (heads_training_eagle3.json, heads_training_eagle1.log) and EAGLE-3 against EAGLE-1 on the same held-out
edits (the GPU edit-norm sweep)."""

from __future__ import annotations

import json
import re

from experiments import results
from paper.sections import edit_norm
from paper.sections.sweep import cap_count
from paper.sections.tex import MODEL_DIR, NUMBERS, RESULTS, fmt, num, of_n, provenance, table

GPU_TESTS = RESULTS / "speed" / "gpu_tests.log"
REQUEST_TEXT = {"located": "located change requests", "subject": "the commit subject alone"}



def eagle1_log() -> dict:
    """Steps, seconds and held-out agreement of the EAGLE-1 head, from its training log."""
    log = (MODEL_DIR / "heads_training_eagle1.log").read_text()
    start, steps = re.search(r"\[\s*([\d.]+)s\] eagle1: training (\d+) steps", log).groups()
    end, agree = re.search(r"\[\s*([\d.]+)s\] eagle1: held-out top-1 agreement by draft position \[(.*)\]", log).groups()
    return {"steps": int(steps), "train_s": float(end) - float(start),
            "holdout_agreement": [float(a) for a in agree.split(",")]}


def model() -> None:
    """The zoo model's training facts, its change requests and its EAGLE heads."""
    tc = json.loads((MODEL_DIR / "training_config.json").read_text())
    scratch = json.loads((MODEL_DIR / "training_config_from_scratch.json").read_text())
    num("zooParams", tc["parameters"] / 1e6, "{:.1f}")
    num("zooTrainMin", (scratch["wall_s"] + tc["wall_s"]) / 60, "{:.1f}")
    num("zooPretrainMB", scratch["data"]["pretrain_chars"] / 1e6, "{:.0f}")
    num("zooPretrainPasses", scratch["pretrain"]["epochs"], "{:.1f}")
    num("zooPretrainTokens", scratch["pretrain"]["tokens_seen"] / 1e6, "{:.0f}")
    num("zooReplay", 100 * tc["config"]["sft_replay"], "{:.0f}")
    num("zooDecisionWeight", tc["config"]["decision_weight"], "{:g}")
    num("zooSyntheticEdits", f"{tc['data']['synthetic_examples']:,}", "{}")
    num("zooRealRows", f"{tc['data']['sft_real_rows']:,}", "{}")
    num("zooEvalRows", tc["data"]["eval_rows"], "{:d}")
    num("zooEvalRepos", ", ".join(r.split("/")[1] for r in tc["data"]["eval_repos"]), "{}")
    num("zooLayers", tc["config"]["num_layers"], "{:d}")
    num("zooHidden", tc["config"]["hidden_size"], "{:d}")
    num("zooChangeRequests", REQUEST_TEXT[tc["config"].get("change_request", "subject")], "{}")
    num("zooTrainProv", provenance(tc["run_info"]), "{}")
    g = tc["quality_gate"]
    num("zooGateN", g["n"], "{:d}")
    num("zooGateEos", 100 * g["eos_share"], "{:.0f}")
    num("zooGateRho", g["spearman_ref_out"])
    num("zooGateOutNorm", g["median_out_norm"])
    num("zooGateRefNorm", g["median_ref_norm"])
    one = eagle1_log()
    rec3 = json.loads((MODEL_DIR / "heads_training_eagle3.json").read_text())
    new3 = rec3["heads"]["eagle3"]
    agree = lambda h: ", ".join(f"{a:.2f}" for a in h["holdout_agreement"])  # noqa: E731
    num("headsOneSteps", one["steps"], "{:d}")
    num("headsOneSeconds", one["train_s"], "{:.0f}")
    num("headsOneAgree", agree(one))
    num("headsPositions", len(one["holdout_agreement"]), "{:d}")
    num("headsThreeSteps", new3["steps"], "{:d}")
    num("headsThreeSeconds", new3["train_s"], "{:.0f}")
    num("headsThreeAgree", agree(new3))
    num("headsThreeTTT", rec3["config"]["ttt_steps"], "{:d}")
    num("headsThreeVocab", rec3["config"]["draft_vocab"], "{:d}")
    num("headsThreeProv", provenance(rec3["run_info"]), "{}")
    num("headsThreeInit", "from the target's" if rec3["config"].get("init_from_target") else "from scratch", "{}")


def eagle3_gate() -> None:
    """The EAGLE-3 head against EAGLE-1 on the same held-out edits, k = 3 (the GPU edit-norm sweep): table and
    macros."""
    df = edit_norm.load()
    df = df[df.variant.isin(["eagle", "eagle3"])]
    al = results.corpus_al(df, by=["variant"]).set_index("variant")
    num("gateN", int(al.n.max()), "{:d}")
    num("gateOutLen", int(df.output_len.iloc[0]), "{:d}")
    num("gateK", int(df.k_eagle.iloc[0]), "{:d}")
    first = json.loads(next(edit_norm.SWEEP.glob("*eagle3__pr.jsonl")).read_text().splitlines()[0])
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
    log = GPU_TESTS.read_text()
    m = re.search(r"(\d+) passed", log)
    num("gpuTestsPassed", m.group(1) if m else "?", "{}")
    num("gpuTestsFailed", "no" if not re.search(r"\d+ failed", log) else re.search(r"(\d+) failed", log).group(1),
        "{}")


# ----------------------------------------------------------------------------- GPU speed


def make() -> None:
    model()
    eagle3_gate()
