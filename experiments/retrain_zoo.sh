#!/usr/bin/env bash
# The installed zoo's lineage with compiled training steps, stage by stage: five GPU calls of under 10 minutes
# (about 24 GPU-minutes in all on one H200) and one CPU step. Each stage starts from the previous stage's target.
#
#   bash experiments/retrain_zoo.sh STAGE OUT_DIR [INIT]
#
#   1           from scratch: pretraining, then edit tuning on located requests (one epoch)
#   2           more edit tuning
#   3           span edits (half the synthetic edits are span edits; sequences up to 4,096 tokens)
#   4           against loops (unlikelihood of copies inside new text, repeated lines in the input)
#   cpu-repair  loop repair on the CPU (fp32, 23 steps of 6 continuations; about 12 minutes on 2 cores)
#   5           loop repair on the GPU (8 steps of 16 continuations), then the EAGLE-1 and EAGLE-3 heads
#
# INIT is the previous stage's target: by default /tmp/zoo_stage<N-1>/tiny-coder when the previous stage ran on the
# same machine, else hybridsd/models/tiny-coder (unpack the previous stage's archive there first:
# `rm -r hybridsd/models/tiny-coder && cat FILES_AT/tiny-coder.tar.part-* | tar -x -C hybridsd/models`). Stage 5
# starts from hybridsd/models/tiny-coder: the CPU-repaired folder, with the heads to start from in eagle1/ and eagle3/.
# GPU stages write what train_zoo_gpu.sh writes to OUT_DIR (its log and the model folder's archive); cpu-repair
# writes the repaired folder to OUT_DIR/tiny-coder. On the device machine: carry [".whl", ".cache"], timeout 600 s.
#
# The time budgets are the eager lineage's (see train_zoo_gpu.sh's header) divided by the measured speed-up of
# compiled layers (1.73x pretraining, 1.63x edit tuning: experiments/results/zoo/train_compile_h200/), plus the
# first step's compilation, so that each stage takes about the eager lineage's number of steps; the learning
# rate follows the same schedule over them. Stages whose target is trained further skip the quality gate.
# PRINT_ONLY=1 prints a stage's starting point and options instead of running it.
set -uo pipefail
STAGE=${1:?usage: retrain_zoo.sh STAGE OUT_DIR [INIT]}
OUT=${2:?usage: retrain_zoo.sh STAGE OUT_DIR [INIT]}
mkdir -p "$OUT"
previous() {  # the previous stage's target folder
  if [ -n "${INIT:-}" ]; then echo "$INIT"
  elif [ -f "/tmp/zoo_stage$1/tiny-coder/config.json" ]; then echo "/tmp/zoo_stage$1/tiny-coder"
  else echo hybridsd/models/tiny-coder; fi
}
INIT=${3:-}
TUNE="--decision-weight 4 --compile-layers"
SPAN="--sft-max-len 4096 --real-epochs 1 --synthetic-examples 60000 --span-share 0.5"
case $STAGE in
  1) export INIT= TARGET_EXTRA="$TUNE --no-gate --sft-max-len 2048 --span-share 0 --pretrain-time-s 106 --deadline-s 470" ;;
  2) export INIT=$(previous 1) TARGET_EXTRA="$TUNE --no-gate --sft-max-len 2048 --span-share 0 --sft-lr 5e-4 \
       --sft-epochs 5 --sft-time-s 224 --deadline-s 505" ;;
  3) export INIT=$(previous 2) TARGET_EXTRA="$TUNE --no-gate $SPAN --sft-lr 5e-4 --sft-epochs 4 --sft-time-s 197 \
       --deadline-s 505" ;;
  4) export INIT=$(previous 3) TARGET_EXTRA="$TUNE --no-gate $SPAN --sft-lr 4e-4 --sft-epochs 4 --sft-time-s 171 \
       --deadline-s 460 --unlikelihood-weight 1 --repeat-share 0.3" ;;
  cpu-repair)
     src=$(previous 4)
     exec python3 -m experiments.train_zoo repair --init "$src" --out "$OUT/tiny-coder" --repair-batch 6 \
       --repair-new-tokens 96 --repair-steps 23 --repair-time-s 1200 ;;
  5) export NO_TARGET=1 REPAIR="--repair-batch 16 --repair-new-tokens 128 --repair-steps 8 --repair-time-s 100" ;;
  *) echo "retrain_zoo.sh: unknown stage '$STAGE' (1, 2, 3, 4, cpu-repair, 5)" >&2; exit 2 ;;
esac
[ "$STAGE" = 5 ] || [ "$STAGE" = 1 ] || [ -f "$INIT/config.json" ] || {
  echo "retrain_zoo.sh: stage $STAGE needs the previous stage's target, not found at '$INIT'" >&2; exit 2; }
if [ -n "${PRINT_ONLY:-}" ]; then echo "INIT=$INIT TARGET_EXTRA=${TARGET_EXTRA:-} REPAIR=${REPAIR:-}"; exit 0; fi
export NO_HEADS=${NO_HEADS-$([ "$STAGE" = 5 ] || echo 1)} TARGET_S=585 WORK=/tmp/zoo_stage$STAGE
exec bash experiments/train_zoo_gpu.sh "$OUT"
