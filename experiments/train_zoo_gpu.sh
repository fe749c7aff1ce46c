#!/usr/bin/env bash
# Retrain the zoo in one call on one GPU (under 10 minutes on one H200): the tiny-coder target fine-tuned on
# located change requests (train_zoo.py target --init, with its quality gate on held-out prompts), then its
# EAGLE-1 and EAGLE-3 heads (train_heads.py, started from the current heads), then an archive of the new folder.
#
#   bash experiments/train_zoo_gpu.sh OUT_DIR [--smoke]     # --smoke: CPU, tiny budgets, about 2 minutes
#
# The model folder is built in $WORK (default /tmp/zoo_work)/tiny-coder; OUT_DIR receives only
# train_zoo_gpu.log and tiny-coder.tar.part-* (pieces of at most 15 MB; unpack with
# `cat tiny-coder.tar.part-* | tar -x -C DEST`). Expects, as device_run.sh: .whl/ (rapidfuzz wheels) and
# .cache/code_edits_dev.jsonl.xz (or .gz) carried along on the GPU machine (experiments/device_env.sh); without
# .cache/ it reads ../shared/data.
# On the device machine: command `bash experiments/train_zoo_gpu.sh $OUT`, carry [".whl", ".cache"], timeout 570 s
# (the stages stop themselves: target <= 330 s, heads <= 240 s). Install the result in place with
# `rm -r hybridsd/models/tiny-coder && cat FILES_AT/tiny-coder.tar.part-* | tar -x -C hybridsd/models`.
# TARGET_EXTRA passes more train_zoo.py target options (e.g. TARGET_EXTRA="--decision-weight 5"). REPAIR (train_zoo.py
# repair options, e.g. REPAIR="--repair-batch 16 --repair-new-tokens 128 --repair-steps 8 --repair-time-s 100") runs a
# loop repair of the target before the heads (its repair_config.json replaces an earlier one in the folder); several,
# separated by ';', run in order (the earlier ones' records kept as repair_config_<i>.json). When the
# target fails its quality gate the heads are not trained (FORCE_HEADS=1 trains them anyway; NO_HEADS=1 never).
# INIT= (empty) trains the target from scratch (pretraining, then edit tuning; give it TARGET_S=585 and NO_HEADS=1:
# the whole call is the target) instead of fine-tuning hybridsd/models/tiny-coder; NO_TARGET=1 trains only the
# heads, of the installed target (or of the target in TARGET_DIR). The heads start from the installed ones
# (HEADS_INIT= : from the target, for a target of another shape).
#
# The base target, in order (install each step's result before the next; about 33 GPU-minutes with the heads and 12
# CPU-minutes;
# each step's record is in hybridsd/models/tiny-coder/, named after the step):
#   INIT= NO_HEADS=1 TARGET_S=585 TARGET_EXTRA="--decision-weight 4 --sft-max-len 2048 --deadline-s 470 \
#     --span-share 0" bash experiments/train_zoo_gpu.sh $OUT      # from scratch: 6.3 min (training_config_from_scratch.json)
#   NO_HEADS=1 TARGET_S=585 TARGET_EXTRA="--decision-weight 4 --sft-max-len 2048 --sft-lr 5e-4 --sft-epochs 5 \
#     --sft-time-s 420 --deadline-s 505 --span-share 0" bash experiments/train_zoo_gpu.sh $OUT
#     # more edit tuning: 7.7 min (training_config_edit_tuning.json)
#   NO_HEADS=1 TARGET_S=585 TARGET_EXTRA="--decision-weight 4 --sft-max-len 4096 --sft-lr 5e-4 --sft-epochs 4 \
#     --sft-time-s 420 --deadline-s 505 --real-epochs 1 --synthetic-examples 60000 --span-share 0.5" \
#     bash experiments/train_zoo_gpu.sh $OUT      # span edits: 7.8 min (training_config_span_edits.json)
#   NO_HEADS=1 TARGET_S=540 TARGET_EXTRA="--decision-weight 4 --sft-max-len 4096 --sft-lr 4e-4 --sft-epochs 4 \
#     --sft-time-s 380 --deadline-s 460 --real-epochs 1 --synthetic-examples 60000 --span-share 0.5 \
#     --unlikelihood-weight 1 --repeat-share 0.3" bash experiments/train_zoo_gpu.sh $OUT
#     # against loops: 7.0 min (training_config.json; edits where asked, but loops: 59% of outputs end with EOS)
#   python -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out REPAIRED --repair-batch 6 \
#     --repair-new-tokens 96 --repair-steps 23 --repair-time-s 1200      # loop repair, CPU: 12 min (repair_config_cpu.json)
#   python -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out REPAIRED --repair-batch 16 \
#     --repair-new-tokens 128 --repair-steps 8 --repair-time-s 100       # loop repair, GPU: 1 min (repair_config.json)
# The installed target then averages the base target's weights (0.25) with those of its descendant (0.75), tuned
# 1,862 steps more with --decision-weight 16 and --copy-margin-weight 4 on one GPU and loop-repaired in fp32 with the
# repeats' unlikelihood weighted 0.1: stages 6-8 of experiments/retrain_zoo.sh, whose run is
# experiments/results/zoo/margin_recipe_h200/ (seed 0; python -m experiments.weight_average: average_config.json):
#   NO_TARGET=1 TARGET_DIR=AVERAGE bash experiments/train_zoo_gpu.sh $OUT   # the two heads: 3 min (heads_training_eagle1_eagle3.json)
#
# A shorter recipe, the last stages' settings from the start, with the validation repositories
# (TargetConfig.validation_repos) held out of training: three calls, about 22 GPU-minutes before the heads.
#   INIT= NO_HEADS=1 TARGET_S=585 TARGET_EXTRA="--decision-weight 4 --sft-max-len 4096 --deadline-s 540 \
#     --span-share 0.5 --unlikelihood-weight 1 --repeat-share 0.3 --real-epochs 1 --synthetic-examples 60000 \
#     --sft-time-s 320 --sft-epochs 3" bash experiments/train_zoo_gpu.sh $OUT      # from scratch: 8.3 min
#   NO_HEADS=1 TARGET_S=585 TARGET_EXTRA="--decision-weight 4 --sft-max-len 4096 --sft-lr 5e-4 --sft-epochs 4 \
#     --sft-time-s 420 --deadline-s 505 --real-epochs 1 --synthetic-examples 60000 --span-share 0.5 \
#     --unlikelihood-weight 1 --repeat-share 0.3" bash experiments/train_zoo_gpu.sh $OUT      # edit tuning: 8.1 min
#   NO_TARGET=1 NO_HEADS=1 REPAIR_S=440 REPAIR="--repair-mode both --repair-batch 16 --repair-new-tokens 128 \
#     --repair-steps 40 --repair-time-s 230 --repair-copy-share 0.5 --gate-every 4 --gate-after 0 --gate-prompts 32" \
#     bash experiments/train_zoo_gpu.sh $OUT      # repair, the step of the best validation gate kept: 5.5 min
# Their targets' gates on 32 held-out evaluation prompts (GPU, bf16): EOS share 0.34, 0.44, 0.84; Spearman 0.20,
# 0.34, 0.53; looping outputs 15, 10, 1. The repair's validation gates (every 4 steps) show its trade: EOS share
# 0.38 -> 0.88-0.91 and loops 18 -> 2 by step 12-24, while the median output norm falls 0.55 -> 0.28-0.36 and
# Spearman peaks at 0.61 (step 4) and then stays at 0.37-0.47: fewer loops, but also less new text.
# TARGET_EXTRA="... --compile-layers" compiles each decoder layer for the training steps: 1.73x / 1.63x the tokens per
# second of pretraining / edit tuning after a first step of 7 / 8 s (device_run.sh train-speed,
# experiments/results/zoo/train_compile_h200/); the calls above ran eager.
# experiments/retrain_zoo.sh runs the base lineage above with compiled layers, stage by stage (as run:
# experiments/results/zoo/retrain_compiled_h200/).
# TARGET_EXTRA="... --no-gate" skips the quality gate at the end of a target call (a stage whose target is trained
# further, with NO_HEADS=1: nothing reads its gate); its record says so.
# On 96 evaluation prompts (CPU, `python -m experiments.train_zoo gate --rows eval --prompts 96`) the repaired target
# has EOS share 0.83 and Spearman 0.34 [95% CI 0.17, 0.50], the base target 0.99 and 0.56 [0.40, 0.69].
set -uo pipefail
OUT=${1:?usage: train_zoo_gpu.sh OUT_DIR [--smoke]}
SMOKE=${2:-}
WORK=${WORK:-/tmp/zoo_work}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
rm -rf "$WORK/tiny-coder"
log="$OUT/train_zoo_gpu.log"
start=$(date +%s)
stamp() { echo "== $1 $(date +%T) (+$(( $(date +%s) - start ))s)" | tee -a "$log"; }
source experiments/device_env.sh || { echo "device_env.sh failed (its line above)" | tee -a "$log"; exit 1; }

if [ "$SMOKE" = "--smoke" ]; then
  TARGET_ARGS="--smoke"; TARGET_S=300; HEADS_S=300
  HEAD_ARGS="--device cpu --limit 4 --gen-seconds 1 --gen-batch 2 --max-new 16 --steps 2 --seq-len 128 --batch-size 2 --max-before-chars 1200"
else
  TARGET_ARGS=""; TARGET_S=${TARGET_S:-330}; HEADS_S=${HEADS_S:-240}
  HEAD_ARGS="--gen-seconds ${GEN_S:-15} --gen-batch 64 --max-new 512 --seconds-per-head ${HEAD_S:-60} --ttt-steps 3 ${HEAD_ARGS:-}"
fi

if [ -n "${NO_TARGET:-}" ]; then
  mkdir -p "$WORK/tiny-coder" && cp "${TARGET_DIR:-hybridsd/models/tiny-coder}"/*.* "$WORK/tiny-coder/"  # no heads
  FORCE_HEADS=1
else
stamp "target"
INIT=${INIT-hybridsd/models/tiny-coder}
timeout "$TARGET_S" python3 -m experiments.train_zoo target ${INIT:+--init "$INIT"} --out "$WORK/tiny-coder" \
  $TARGET_ARGS ${TARGET_EXTRA:-} 2>&1 | grep --line-buffered -v "Loading weights" | tee -a "$log"
fi
[ -f "$WORK/tiny-coder/training_config.json" ] || { echo "target training failed" | tee -a "$log"; exit 1; }
record="$WORK/tiny-coder/training_config.json"

IFS=';' read -r -a repairs <<< "${REPAIR:-}"
for i in "${!repairs[@]}"; do  # loop repairs of the target in order (train_zoo.py repair), the last one's gate
  # decides the heads; an earlier one's record is kept as repair_config_<i>.json
  stamp "loop repair $((i + 1)) of ${#repairs[@]}"
  rm -rf "$WORK/repaired"
  timeout "${REPAIR_S:-150}" python3 -m experiments.train_zoo repair --init "$WORK/tiny-coder" --out "$WORK/repaired" \
    ${SMOKE:+--smoke} ${repairs[$i]} 2>&1 | grep --line-buffered -vE "Loading weights|^\[repair\] step=[0-9]*[1-9] " \
    | tee -a "$log"
  [ -f "$WORK/repaired/repair_config.json" ] || { echo "loop repair failed" | tee -a "$log"; exit 1; }
  cp "$WORK"/repaired/* "$WORK/tiny-coder/" && rm -r "$WORK/repaired"
  if [ $((i + 1)) -lt ${#repairs[@]} ]; then
    cp "$WORK/tiny-coder/repair_config.json" "$WORK/tiny-coder/repair_config_$((i + 1)).json"
  fi
  record="$WORK/tiny-coder/repair_config.json"
done

passed=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['quality_gate']['passed'])" \
  "$record" 2>/dev/null)
if [ -n "${NO_HEADS:-}" ]; then
  stamp "heads not trained (NO_HEADS)"
elif [ "$passed" != "True" ] && [ -z "${FORCE_HEADS:-}" ] && [ "$SMOKE" != "--smoke" ]; then
  stamp "gate not passed: heads skipped (FORCE_HEADS=1 trains them anyway)"
else
stamp "heads"
timeout "$HEADS_S" python3 -m experiments.train_heads --target "$WORK/tiny-coder" --out "$WORK/tiny-coder" \
  ${HEADS_INIT---init-heads hybridsd/models/tiny-coder} --data "$HYBRIDSD_DATA" --draft-vocab 3584 $HEAD_ARGS 2>&1 \
  | grep --line-buffered -vE "step [0-9]+ loss|Loading weights" | tee -a "$log"
fi

stamp "archive"
du -ab "$WORK/tiny-coder" | tee -a "$log"
rm -f "$OUT"/tiny-coder.tar.part-*  # an earlier call's pieces would mix into this archive
tar -C "$WORK" -cf - tiny-coder | split -b 15M - "$OUT/tiny-coder.tar.part-"
ls -la "$OUT" | tee -a "$log"
stamp "done"
