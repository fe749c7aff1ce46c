#!/usr/bin/env bash
# The installed zoo's lineage with compiled training steps, stage by stage, on one GPU in calls of under 10 minutes.
# Each stage starts from the previous stage's target.
#
#   bash experiments/retrain_zoo.sh STAGES OUT_DIR [INIT]      # STAGES: one stage or several, e.g. 3,4
#
#   1           from scratch: pretraining, then edit tuning on located requests (one epoch)
#   2           more edit tuning
#   3           span edits (half the synthetic edits are span edits; sequences up to 4,096 tokens)
#   4           against loops (unlikelihood of copies inside new text, repeated lines in the input)
#   cpu-repair  loop repair on the CPU (fp32, 23 steps of 6 continuations, 10-12 minutes on 2 cores; the weights
#               after 0, 12 and 23 steps gated on 64 validation prompts, the best kept; a CPU gate of 96 prompts
#               generated for 1.3-6.2 minutes on 2-core machines: generate_s in retrain_compiled_h200/*/*_cpu.json)
#   5           the same loop repair on the GPU in fp32 (unless the CPU repair ran: INIT=its folder and
#               NO_FP32_REPAIR=1); no heads (stage 8 trains the installed target's)
#   6           decision tuning of stage 5's target: the loss where the answer leaves or resumes the copy weighted 16
#               instead of 4, and the copy-margin hinge at weight 4 (1,862 steps, about 3 minutes of training)
#   7           loop repair of stage 6's target with the repeats' unlikelihood weighted 0.1 (fp32, 24 steps; the best
#               of the validation gates after 0, 12 and 24 steps kept): on the GPU where there is one (104 s with its
#               gates on an H200), else on the CPU (11 minutes on 2 cores; the installed target's was)
#   8           the installed target: 0.25 x stage 5's weights + 0.75 x stage 7's (experiments/weight_average.py;
#               BASE= names stage 5's folder when it is not $WORK_ROOT/zoo_stage5/tiny-coder), then its EAGLE-1
#               and EAGLE-3 heads, started from hybridsd/models/tiny-coder's where they fit (below)
# Stages 6-8 repeat the calls that made the installed target from its base (the base target, which stages 1-5
# retrain): zoo/margin_recipe_h200/ (seed 0: stage 6 with the hinge, stage 7 on the GPU, stage 8's average and its
# heads; its call.sh ran two draws side by side, so stage 6 had a longer time limit there).
#
# The whole recipe, three calls back to back on one GPU (each within the machine's idle window of the one before):
#   HYBRIDSD_COMMIT=<commit> bash experiments/retrain_zoo.sh 1,2 $OUT      # about 7.3 minutes on an H100
#   HYBRIDSD_COMMIT=<commit> bash experiments/retrain_zoo.sh 3,4,5 $OUT    # about 7.3
#   HYBRIDSD_COMMIT=<commit> bash experiments/retrain_zoo.sh 6,7,8 $OUT    # about 6.4
# 21.0 GPU-minutes in all on one H100 at commit 55730c8, every phase of target training stopping at its steps
# (experiments/results/zoo/retrain_hinge_recipe_h100/: its calls, each stage's seconds and its product's gate); the
# recipe before stage 6 had the hinge took 20.6 on one H200 (retrain_compiled_h200/recipe_end_to_end/). Each run's
# product is another draw of the recipe, not the installed weights (their gates there).
#
# INIT is the first stage's starting target: by default $WORK_ROOT/zoo_stage<N-1>/tiny-coder (WORK_ROOT: /tmp), where
# the previous stage left it on the same machine; on another machine (a fresh one) the stage stops with one line
# unless INIT names the previous stage's unpacked archive (e.g. `rm -r hybridsd/models/tiny-coder && cat
# FILES_AT/tiny-coder.tar.part-* | tar -x -C hybridsd/models`, then INIT=hybridsd/models/tiny-coder); later stages
# of STAGES start from the stage before them, which must be listed too. The heads start from
# hybridsd/models/tiny-coder's. Target stages share prepared data through $WORK_ROOT/zoo_data_cache (train_zoo.py
# --data-cache): stage 2 loads stage 1's, stage 4 and stage 6 stage 3's.
# GPU stages leave in OUT_DIR what train_zoo_gpu.sh leaves (the last stage's log and model archive) and every
# stage's record as stage<N>_<record>.json; cpu-repair writes the repaired folder to OUT_DIR/tiny-coder. On the
# device machine: carry [".whl", ".cache"], timeout 600 s, HYBRIDSD_COMMIT=<commit> (the copied tree's git is not
# the code that runs). The script sources experiments/device_env.sh (the wheels on PYTHONPATH, the carried data in
# /tmp/d) for every stage; a command after it in the same call sources it too, e.g. to gate stage 8's product:
#   source experiments/device_env.sh && python -m experiments.train_zoo gate --model /tmp/zoo_stage8/tiny-coder \
#     --rows eval --prompts 96 --out F
#
# Each target stage trains the installed (eager) lineage's steps (hybridsd/models/tiny-coder/training_config*.json:
# pretraining 2,236, edit tuning 1,024, 3,488, 2,871 and 2,557), so that its learning-rate schedule and product do not
# depend on the machine's speed; time budgets cap them where a slow machine would overrun a call (a stage's
# record says which stopped it), and a stage after the first of a call ends its training by CALL_S seconds (default
# 580) from the call's start. PRINT_ONLY=1 prints each stage's starting point and options instead of running it;
# SMOKE=1 runs the stages on a CPU with tiny budgets, data and repairs (train_zoo_gpu.sh --smoke: a smoke-sized model
# from scratch; about 4 minutes for 1,2,3,4,5 on 2 cores). TARGET_OPTIONS (train_zoo.py target options) are added
# after the options of every target stage of the call (1-4 and 6), e.g. TARGET_OPTIONS='--ambiguity-weight 4'
# (zoo/ambiguity_tuning_h200/runs.json). SHAPE_OPTIONS (train_zoo.py target's --num-layers, --num-heads,
# --num-kv-heads, --intermediate-size) are added to stage 1 alone, whose shape the later stages keep, e.g.
# SHAPE_OPTIONS='--num-layers 12 --intermediate-size 512' (zoo/target_shapes_h200/runs.json); stage 8's heads start
# from hybridsd/models/tiny-coder's when that folder has heads and the average has its target's shape, else from the
# average itself (heads_fit).
# Every run on one H200, its calls, times and product's gates:
# experiments/results/zoo/retrain_compiled_h200/stages.json; the whole recipe as it stands on one H100:
# experiments/results/zoo/retrain_hinge_recipe_h100/runs.json.
set -uo pipefail
STAGES=${1:?usage: retrain_zoo.sh STAGES OUT_DIR [INIT]}
OUT=${2:?usage: retrain_zoo.sh STAGES OUT_DIR [INIT]}
FIRST_INIT=${3:-}
mkdir -p "$OUT"
WORK_ROOT=${WORK_ROOT:-/tmp}  # holds each stage's folder zoo_stage<N> and the shared data cache zoo_data_cache
TUNE="--decision-weight 4 --compile-layers --data-cache $WORK_ROOT/zoo_data_cache"
SPAN="--sft-max-len 4096 --real-epochs 1 --synthetic-examples 60000 --span-share 0.5"
LOOPS="--repair-batch 6 --repair-new-tokens 96 --repair-steps 23 --repair-time-s 1200"  # the CPU repair's steps
SELECT="--gate-every 12 --gate-after 0"  # validation gates (64 prompts) after 0, 12 and 23 steps: the best is kept
CALL_S=${CALL_S:-580}  # a call's time: a stage after the call's first ends its training in time to finish by then

LISTED=  # set once a stage of STAGES has run (or been printed): the next starts from its folder, unchecked
previous() {  # the starting target of a stage whose previous stage is $1
  if [ -n "$FIRST_INIT" ]; then echo "$FIRST_INIT"
  else echo "$WORK_ROOT/zoo_stage$1/tiny-coder"; fi  # run_stage checks that it is there
}

deadline() {  # a target stage's deadline: $1 s, or less for a later stage of the call so that the call ends by CALL_S
  # (training ends the fine-tuning reserve, 55 s, before the deadline; about 25 s go to start-up, saving, archiving)
  local d=$((CALL_S - SECONDS + 30))
  if [ -z "$LISTED" ] || [ "$d" -ge "$1" ]; then echo "$1"; else echo "$d"; fi
}

heads_fit() {  # whether the installed folder ($2, default hybridsd/models/tiny-coder) has EAGLE-1 and EAGLE-3 heads
  # and the target in folder $1 its target's shape, so that those heads can start the new ones (not so while the
  # folder holds an unpacked stage archive given as INIT: a target alone)
  python3 - "$1" "${2:-hybridsd/models/tiny-coder}" <<'PY'
import json, os, sys
keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
new, installed = sys.argv[1:]
if not all(os.path.isfile(f"{installed}/{h}/config.json") for h in ("eagle1", "eagle3")):
    sys.exit(1)
a, b = (json.load(open(f"{d}/config.json")) for d in (new, installed))
sys.exit(0 if all(a[k] == b[k] for k in keys) else 1)
PY
}

run_stage() {
  local stage=$1 init
  case $stage in
    1) init= ;;
    2|3|4) init=$(previous $((stage - 1))) ;;
    cpu-repair|5) init=$(previous 4) ;;
    6|7|8) init=$(previous $((stage - 1))) ;;
    *) echo "retrain_zoo.sh: unknown stage '$stage' (1, 2, 3, 4, cpu-repair, 5, 6, 7, 8)" >&2; return 2 ;;
  esac
  FIRST_INIT=
  if [ "$stage" != 1 ] && [ -z "$LISTED" ] && [ ! -f "$init/config.json" ]; then
    echo "retrain_zoo.sh: stage $stage needs the previous stage's target, not found at '$init' (run that stage on" \
      "this machine first, or give its unpacked archive as INIT)" >&2; return 2
  fi
  if [ -n "$LISTED" ] && [ -z "${PRINT_ONLY:-}${SMOKE:-}" ] && [ $((CALL_S - SECONDS)) -lt 150 ]; then
    echo "retrain_zoo.sh: stage $stage would not end by CALL_S=$CALL_S s from the call's start ($SECONDS s gone);" \
      "run it in a call of its own" >&2; return 2
  fi
  local extra
  case $stage in
    1) extra="$TUNE --no-gate --sft-max-len 2048 --span-share 0 --pretrain-steps 2236 --pretrain-time-s 140 \
         --sft-steps 1024 --deadline-s 500" ;;
    2) extra="$TUNE --no-gate --sft-max-len 2048 --span-share 0 --sft-lr 5e-4 --sft-epochs 5 --sft-steps 3488 \
         --sft-time-s 290 --deadline-s $(deadline 505)" ;;
    3) extra="$TUNE --no-gate $SPAN --sft-lr 5e-4 --sft-epochs 4 --sft-steps 2871 --sft-time-s 215 \
         --deadline-s $(deadline 505)" ;;
    4) extra="$TUNE --no-gate $SPAN --sft-lr 4e-4 --sft-epochs 4 --sft-steps 2557 --sft-time-s 185 \
         --deadline-s $(deadline 460) --unlikelihood-weight 1 --repeat-share 0.3" ;;
    cpu-repair) extra="$LOOPS $SELECT" ;;
    5) extra=  # the CPU repair's steps in fp32, the step kept by the validation gates; none after a CPU repair
       [ -n "${NO_FP32_REPAIR:-}" ] || extra="$LOOPS --repair-fp32 $SELECT" ;;
    6) extra="--no-gate --compile-layers --data-cache $WORK_ROOT/zoo_data_cache --sft-max-len 4096 --real-epochs 1 \
         --synthetic-examples 20000 --span-share 0.5 --pretrain-chars 30000000 --decision-weight 16 --sft-lr 3e-4 \
         --sft-steps 1862 --sft-time-s 220 --deadline-s $(deadline 340) --unlikelihood-weight 1 --repeat-share 0.3 \
         --copy-margin-weight 4" ;;
    7) extra="--repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 \
         --repair-fp32 $SELECT" ;;
    8) extra="--weight 0.75" ;;
  esac
  local base=${BASE:-$WORK_ROOT/zoo_stage5/tiny-coder}
  if [ "$stage" = 8 ] && [ -z "${PRINT_ONLY:-}" ] && [ ! -f "$base/config.json" ]; then
    echo "retrain_zoo.sh: stage 8 averages with stage 5's target, not found at '$base' (give its folder as BASE)" >&2
    return 2
  fi
  case $stage in 1|2|3|4|6) extra="$extra ${TARGET_OPTIONS:-}" ;; esac  # a variant's options (the later one wins)
  [ "$stage" != 1 ] || extra="$extra ${SHAPE_OPTIONS:-}"  # another shape: from scratch only
  if [ -n "${SMOKE:-}" ]; then  # tiny budgets and data after the stage's own options (the later option wins)
    case $stage in
      1|2|3|4|6) extra="$extra --pretrain-time-s 3 --sft-time-s 3 --deadline-s 150 --synthetic-examples 40 \
         --compile-backend aot_eager" ;;
      8) ;;
      *) extra=$(echo "$extra" | sed 's/--repair-steps [0-9]*/--repair-steps 2/g') ;;
    esac
  fi
  if [ -n "${PRINT_ONLY:-}" ]; then echo "stage $stage: INIT=$init OPTIONS=$(echo $extra)"; LISTED=1; return 0; fi
  source experiments/device_env.sh || return 1  # once per call: for every python3 below, not only train_zoo_gpu.sh's
  echo "== stage $stage from '${init:-scratch}' $(date +%T)"
  case $stage in
    cpu-repair) python3 -m experiments.train_zoo repair --init "$init" --out "$OUT/tiny-coder" $extra ;;
    5) NO_TARGET=1 NO_HEADS=1 TARGET_DIR=$init REPAIR=$extra REPAIR_S=300 WORK=$WORK_ROOT/zoo_stage5 \
         bash experiments/train_zoo_gpu.sh "$OUT" ${SMOKE:+--smoke} || return 1
       for f in "$WORK_ROOT"/zoo_stage5/tiny-coder/repair_config*.json; do
         cp "$f" "$OUT/stage5_$(basename "$f")"
       done ;;
    7) rm -rf "$WORK_ROOT/zoo_stage7"
       python3 -m experiments.train_zoo repair --init "$init" --out "$WORK_ROOT/zoo_stage7/tiny-coder" \
         ${SMOKE:+--smoke} $extra || return 1
       cp "$WORK_ROOT/zoo_stage7/tiny-coder/repair_config.json" "$OUT/stage7_repair_config.json" ;;
    8) rm -rf "$WORK_ROOT/zoo_stage8_average"
       python3 -m experiments.weight_average "$base" "$init" $extra --out "$WORK_ROOT/zoo_stage8_average" || return 1
       heads_fit "$WORK_ROOT/zoo_stage8_average" || export HEADS_INIT=  # else the heads start from the average
       NO_TARGET=1 TARGET_DIR=$WORK_ROOT/zoo_stage8_average WORK=$WORK_ROOT/zoo_stage8 \
         bash experiments/train_zoo_gpu.sh "$OUT" ${SMOKE:+--smoke} || return 1
       for f in "$WORK_ROOT"/zoo_stage8/tiny-coder/{average_config,heads_training_eagle1_eagle3}.json; do
         cp "$f" "$OUT/stage8_$(basename "$f")"
       done ;;
    *) INIT=$init TARGET_EXTRA=$extra NO_HEADS=1 TARGET_S=585 WORK=$WORK_ROOT/zoo_stage$stage \
         bash experiments/train_zoo_gpu.sh "$OUT" ${SMOKE:+--smoke} || return 1
       cp "$WORK_ROOT/zoo_stage$stage/tiny-coder/training_config.json" "$OUT/stage${stage}_training_config.json" ;;
  esac
  LISTED=1
}

for stage in ${STAGES//,/ }; do
  run_stage "$stage" || exit $?
done
