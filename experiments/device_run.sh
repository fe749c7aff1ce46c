#!/usr/bin/env bash
# One GPU-machine call: run the named stages in order, each under its own time limit, logs and results to $OUT.
#
#   bash experiments/device_run.sh COMMIT tests heads3 speed sweep
#   # two GPUs, two stage lists at once:
#   (CUDA_VISIBLE_DEVICES=0 bash experiments/device_run.sh COMMIT speed &
#    CUDA_VISIBLE_DEVICES=1 bash experiments/device_run.sh COMMIT tests heads3 gate; wait)
#
# COMMIT is recorded in every results file (the copied working tree has no .git). Stages:
#   tests   tests/test_cuda.py (CUDA graphs, compile, lossless fp32 on GPU, bf16 match rate)
#   heads3  retrain the EAGLE-3 head with the full vocabulary as draft vocabulary (-> $OUT/heads/eagle3)
#   gate    the retrained EAGLE-3 head (if heads3 ran) against EAGLE-1: spec_bench k=3 on held-out edits
#   speed   experiments/bench_speed.py (8B shape vs floor and HF baselines, EAGLE draft cost, zoo tokens/s)
#   profile 8B-shape steps compiled (default and max-autotune), and the kernel split of a compiled step
#           (-> bench_profile.json; PROFILE_ARGS replaces the bench arguments)
#   sweep   experiments/sweep.py --preset gpu-one-call (-> $OUT/sweeps), data-parallel over every GPU
# Expects .whl/ (rapidfuzz for Python 3.12) and .cache/*.jsonl.gz carried along; make them here first:
#   mkdir -p .cache && for f in code_edits_dev mt_bench editeval; do gzip -c ../shared/data/$f.jsonl > .cache/$f.jsonl.gz; done
#   echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl rapidfuzz==3.14.6
set -uo pipefail
export PYTHONUNBUFFERED=1 HYBRIDSD_COMMIT="$1"
shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/d
# one install per machine (two stage lists may start at once): the first to take the lock installs
( flock 9; [ -f /tmp/site/.done ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/*.whl && touch /tmp/site/.done; } ) 9>/tmp/site.lock || exit 1
export PYTHONPATH=/tmp/site:$PWD HYBRIDSD_DATA=/tmp/d
gunzip -c .cache/code_edits_dev.jsonl.gz > /tmp/d/code_edits_dev.jsonl
for f in mt_bench editeval; do [ -f .cache/$f.jsonl.gz ] && gunzip -c .cache/$f.jsonl.gz > /tmp/d/$f.jsonl; done
log="$OUT/run_$(IFS=_; echo "$*").log"  # one log per stage list: two lists may run at once, one per GPU
for stage in "$@"; do
  echo "== $stage $(date +%T)" | tee -a "$log"
  case $stage in
    tests)  HYBRIDSD_INSTAFAIL=1 timeout ${TESTS_S:-170} python3 -m pytest -q -p no:cacheprovider -rA --tb=short tests/test_cuda.py \
              tests/test_generate.py -k "cuda or compiled" > "$OUT/tests.log" 2>&1
            grep -E "^(PASSED|FAILED|ERROR)|passed|failed|^E |^!! " "$OUT/tests.log" | head -60 | tee -a "$log" ;;
    heads3) timeout 280 python3 experiments/train_heads.py --data /tmp/d --out "$OUT/heads" --kinds eagle3 \
              --draft-vocab 10240 --ttt-steps 3 --gen-seconds 20 --gen-batch 64 --max-new 512 \
              --seconds-per-head ${HEAD_S:-120} ${HEAD_ARGS:-} 2>&1 | grep -vE "step [0-9]+ loss" | tee -a "$log" ;;
    gate)   [ -f "$OUT/heads/eagle3/model.safetensors" ] && cp "$OUT"/heads/eagle3/* hybridsd/models/tiny-coder/eagle3/
            for m in eagle eagle3; do
              timeout 60 python3 experiments/spec_bench.py --method $m --num-speculative-tokens 3 --num-prompts 12 \
                --output-len 384 --output "$OUT/gate/$m.jsonl" 2>&1 | tail -2 | tee -a "$log"
            done
            python3 experiments/summarize_runs.py "$OUT"/gate/*.jsonl 2>&1 | tail -8 | tee -a "$log" ;;
    speed)  timeout ${SPEED_S:-380} python3 experiments/bench_speed.py --out "$OUT/bench_speed.json" ${SPEED_ARGS:-} 2>&1 \
              | grep -v Warning | tail -70 | tee -a "$log" ;;
    profile) timeout ${PROFILE_S:-400} python3 experiments/bench_speed.py --out "$OUT/bench_profile.json" \
              ${PROFILE_ARGS:---contexts 2048 --configs graph_compiled graph_autotune --skip hf-compile hf-generate eagle overhead zoo} \
              --profile 2>&1 | grep -v Warning | tail -40 | tee -a "$log" ;;
    sweep)  [ -d .cache/sweeps ] && mkdir -p "$OUT/sweeps" && cp -n .cache/sweeps/* "$OUT/sweeps/"  # resume a carried run
            ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
            timeout ${SWEEP_S:-540} torchrun --standalone --nproc_per_node="$ngpu" experiments/sweep.py \
              --preset gpu-one-call --out-dir "$OUT/sweeps" ${SWEEP_ARGS:-} > "$OUT/sweep_full.log" 2>&1
            grep -v "it/s\]" "$OUT/sweep_full.log" | grep -A 30 -m 3 "FAILED\|Traceback" | head -80 | tee -a "$log"
            grep -v "it/s\]" "$OUT/sweep_full.log" | tail -3 | tee -a "$log" ;;
    *) echo "unknown stage $stage" | tee -a "$log" ;;
  esac
done
