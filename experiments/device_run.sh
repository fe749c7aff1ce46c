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
#   gputests every test that needs CUDA but the exact-mode grid (which `exact` runs), and the CPU tests of the same
#           files that the selection names (-> gpu_tests.log, the file experiments/results/speed/gpu_tests.log is;
#           about 4 minutes)
#   heads3  retrain the EAGLE-3 head with the full vocabulary as draft vocabulary (-> $OUT/heads/eagle3)
#   gate    the retrained EAGLE-3 head (if heads3 ran) against EAGLE-1: spec_bench k=3 on held-out edits
#   speed   experiments.bench_speed (8B shape vs floor and HF baselines, EAGLE draft cost, zoo tokens/s)
#   profile 8B-shape steps compiled (default and max-autotune), and the kernel split of a compiled step
#           (-> bench_profile.json; PROFILE_ARGS replaces the bench arguments; with an exact configuration,
#           e.g. "--contexts 2048 --configs graph_auto graph_auto_exact --skip hf-compile hf-generate eagle overhead
#           zoo", its padded block is profiled too)
#   sweep   experiments.sweep --preset $SWEEP_PRESET (default gpu-one-call; -> $OUT/sweeps.tar: a call returns only a
#           few files), data-parallel over every GPU
#   train-speed  the zoo target's training from scratch twice with the same short budgets (train_zoo.py target: 60 s
#           of pretraining, 60 s of edit tuning on 8,000 synthetic edits), eager and with --compile-layers (-> each
#           run's training_config.json and train_log.json in $OUT/train_speed/{eager,compiled}; about 6 minutes)
#   exact   exact mode's GPU tests: the split kernel's exact path, row_linear, and the bf16 grids of the tiny models and
#           the zoo (EXACT_KS, default 1,3,8; EXACT_MODES, default exact,nonexact: exact mode alone with "exact";
#           EXACT_K selects grids, default every one; about 9.5 min, at one call's
#           limit: EXACT_K=tiny_models and EXACT_K=on_the_zoo split it over two calls; EXACT_SEL replaces the whole
#           pytest -k selection, kernel tests included) -> each test's outcome line as
#           it ends in gpu_tests_exact.log, the grid's rows merged into exact_match.jsonl (experiments.exact_rows)
# A device call carries at most 64 MiB: the tracked tree (about 59 MiB) with .whl/ and .cache/ (4 MiB) fits.
# Expects .whl/ (rapidfuzz for Python 3.12) and .cache/*.jsonl.gz carried along; make them here first:
#   mkdir -p .cache && for f in code_edits_dev mt_bench editeval; do gzip -c ../shared/data/$f.jsonl > .cache/$f.jsonl.gz; done
#   xz -9c ../shared/data/code_edits_dev.jsonl > .cache/code_edits_dev.jsonl.xz   # smaller; read first when present
#   echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl rapidfuzz==3.14.6
set -uo pipefail
export PYTHONUNBUFFERED=1 HYBRIDSD_COMMIT="$1"
shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source experiments/device_env.sh || exit 1  # the wheels on PYTHONPATH, the carried data in /tmp/d
log="$OUT/run_$(IFS=_; echo "$*").log"  # one log per stage list: two lists may run at once, one per GPU
for stage in "$@"; do
  echo "== $stage $(date +%T)" | tee -a "$log"
  case $stage in
    tests)  HYBRIDSD_INSTAFAIL=1 timeout ${TESTS_S:-170} python3 -m pytest -q -p no:cacheprovider -rA --tb=short tests/test_cuda.py \
              tests/test_compile.py -k "cuda or compiled" > "$OUT/tests.log" 2>&1
            grep -E "^(PASSED|FAILED|ERROR)|passed|failed|^E |^!! " "$OUT/tests.log" | head -60 | tee -a "$log" ;;
    heads3) timeout 280 python3 -m experiments.train_heads --data "$HYBRIDSD_DATA" --out "$OUT/heads" --kinds eagle3 \
              --draft-vocab 10240 --ttt-steps 3 --gen-seconds 20 --gen-batch 64 --max-new 512 \
              --seconds-per-head ${HEAD_S:-120} ${HEAD_ARGS:-} 2>&1 | grep -vE "step [0-9]+ loss" | tee -a "$log" ;;
    gate)   [ -f "$OUT/heads/eagle3/model.safetensors" ] && cp "$OUT"/heads/eagle3/* hybridsd/models/tiny-coder/eagle3/
            for m in eagle eagle3; do
              timeout 60 python3 -m experiments.spec_bench --method $m --num-speculative-tokens 3 --num-prompts 12 \
                --output-len 384 --output "$OUT/gate/$m.jsonl" 2>&1 | tail -2 | tee -a "$log"
            done
            python3 -m experiments.summarize_runs "$OUT"/gate/*.jsonl 2>&1 | tail -8 | tee -a "$log" ;;
    speed)  timeout ${SPEED_S:-380} python3 -m experiments.bench_speed --out "$OUT/bench_speed.json" ${SPEED_ARGS:-} 2>&1 \
              | grep -v Warning | tail -70 | tee -a "$log" ;;
    profile) timeout ${PROFILE_S:-400} python3 -m experiments.bench_speed --out "$OUT/bench_profile.json" \
              ${PROFILE_ARGS:---contexts 2048 --configs graph_compiled graph_autotune --skip hf-compile hf-generate eagle overhead zoo} \
              --profile 2>&1 | grep -v Warning | tail -40 | tee -a "$log" ;;
    sweep)  [ -d .cache/sweeps ] && mkdir -p "$OUT/sweeps" && cp -n .cache/sweeps/* "$OUT/sweeps/"  # resume a carried run
            ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
            timeout ${SWEEP_S:-540} torchrun --standalone --nproc_per_node="$ngpu" -m experiments.sweep \
              --preset ${SWEEP_PRESET:-gpu-one-call} --out-dir "$OUT/sweeps" ${SWEEP_ARGS:-} > "$OUT/sweep_full.log" 2>&1
            grep -v "it/s\]" "$OUT/sweep_full.log" | grep -A 30 -m 3 "FAILED\|Traceback" | head -80 | tee -a "$log"
            grep -v "it/s\]" "$OUT/sweep_full.log" | tail -3 | tee -a "$log"
            tar -cf "$OUT/sweeps.tar" -C "$OUT" sweeps && rm -r "$OUT/sweeps" ;;
    gputests) files="tests/test_cuda.py tests/test_generate.py tests/test_trees.py tests/test_attention.py"
              files="$files tests/test_real_models.py tests/test_bad_input.py tests/test_families.py"
              sel="(cuda or graphed or compiled or exact or another_device or gpu) and not exact_mode_bf16_equals_plain"
              card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE "[A-Z][0-9]{2,4}" | head -1)
              { echo "# python -m pytest -rA $files -k '$sel' at $HYBRIDSD_COMMIT on one ${card:-GPU} (warnings left out)"
                HYBRIDSD_INSTAFAIL=1 timeout ${TESTS_S:-540} python3 -m pytest -q -p no:cacheprovider -rA --tb=short \
                  $files -k "$sel" 2>&1 | grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|[0-9]+ (passed|failed)|^E |^!! "; } \
                > "$OUT/gpu_tests.log"
              grep -E "^(FAILED|ERROR)|passed|failed|^!! " "$OUT/gpu_tests.log" | head -40 | tee -a "$log" ;;
    exact)  sel="${EXACT_SEL:-row_linear or exact_split_kernel or ${EXACT_K:-exact_mode}}"
            modes=${EXACT_MODES:-exact,nonexact}
            { echo "# tests/test_cuda.py -k '$sel' (commit $HYBRIDSD_COMMIT, HYBRIDSD_EXACT_KS=${EXACT_KS:-1,3,8}, HYBRIDSD_EXACT_MODES=$modes)"
              HYBRIDSD_INSTAFAIL=1 HYBRIDSD_EXACT_JSON="$OUT/exact_grid.jsonl" HYBRIDSD_EXACT_KS=${EXACT_KS:-1,3,8} \
                HYBRIDSD_EXACT_MODES=$modes \
                timeout ${TESTS_S:-570} python3 -u -m pytest -v -p no:cacheprovider --tb=short tests/test_cuda.py -k "$sel" \
                2>&1 | grep -E " (PASSED|FAILED|ERROR|SKIPPED)|^(FAILED|ERROR) |^E |[0-9]+ (passed|failed)"; } \
              > "$OUT/gpu_tests_exact.log"
            touch "$OUT/exact_grid.jsonl"
            python3 -m experiments.exact_rows --run "$OUT/exact_grid.jsonl" "$HYBRIDSD_COMMIT" \
              "HYBRIDSD_EXACT_KS=${EXACT_KS:-1,3,8} HYBRIDSD_EXACT_MODES=$modes HYBRIDSD_EXACT_JSON=... pytest tests/test_cuda.py -k '$sel'" \
              --out "$OUT/exact_match.jsonl" | tee -a "$log"
            tail -3 "$OUT/gpu_tests_exact.log" | tee -a "$log" ;;
    train-speed) for mode in eager compiled; do
              WORK=/tmp/train_speed_$mode INIT= NO_HEADS=1 TARGET_S=280 TARGET_EXTRA="--pretrain-time-s 60 \
                --sft-time-s 60 --deadline-s 260 --synthetic-examples 8000 --pretrain-chars 40000000 \
                $([ $mode = compiled ] && echo --compile-layers)" bash experiments/train_zoo_gpu.sh /tmp/train_speed_out_$mode \
                > "$OUT/train_speed_$mode.log" 2>&1
              mkdir -p "$OUT/train_speed/$mode"
              cp /tmp/train_speed_$mode/tiny-coder/{training_config,train_log}.json "$OUT/train_speed/$mode/"
              python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], {p: {k: d[p][k] \
                for k in ('steps', 'first_step_s', 'tokens_per_s', 'tokens_per_s_after_first_step')} for p in ('pretrain', 'sft')})" \
                "$OUT/train_speed/$mode/training_config.json" $mode | tee -a "$log"
            done ;;
    bench-exact) timeout ${BENCH_S:-300} python3 -m experiments.bench_speed --contexts 2048 512 --kernels \
              --configs graph_auto graph_auto_exact --skip hf-compile hf-generate eagle overhead zoo \
              --out "$OUT/speed_exact.json" 2>&1 | grep -v Warning | tail -30 | tee -a "$log" ;;
    bench-tree) timeout ${BENCH_S:-300} python3 -m experiments.bench_tree --compile default --out "$OUT/bench_tree.json" \
              2>&1 | grep -v Warning | tail -30 | tee -a "$log" ;;
    real8b) D=/tmp/l31; rm -rf $D; export HF_HUB_OFFLINE=1
            python3 -m experiments.make_checkpoint --out $D >> "$OUT/real8b.log" 2>&1
            python3 -c "import json;open('$D/mt_bench.jsonl','w').write(''.join(json.dumps({'question_id':i,'turns':[t]})+'\n' for i,t in enumerate(['Write a haiku about rain.','Explain TCP slow start.','Write a Python function that sorts a list.'])))"
            A="--model-dir $D/target --dataset-name mt-bench --dataset-path $D --device cuda --output-len 96"
            for m in none ngram eagle3 ngram-eagle3; do
              H=; [[ $m == *eagle3 ]] && H="--eagle-dir $D/eagle3"  # a method without a head ignores --eagle-dir, with a note
              timeout 120 python3 -m experiments.spec_bench $A $H --method $m --num-speculative-tokens-per-method \
                '{"ngram": 5, "eagle3": 3}' --output "$OUT/l31__$m.jsonl" >> "$OUT/real8b.log" 2>&1
            done
            timeout 150 python3 -m experiments.spec_bench $A --method replay --num-spec-tokens 3 --num-prompts 3 \
              --output-len 512 --output "$OUT/l31__replay.jsonl" >> "$OUT/real8b.log" 2>&1
            timeout 150 python3 -m experiments.spec_bench $A --eagle-dir $D/eagle3 --method ngram-eagle3 \
              --num-speculative-tokens-per-method '{"ngram": 5, "eagle3": 3}' --compile auto --num-prompts 1 --output-len 32 \
              --output "$OUT/l31__compile_auto.jsonl" >> "$OUT/real8b.log" 2>&1
            grep -a "spec_bench:\|wrote\|Error\|error" "$OUT/real8b.log" | tail -20 | tee -a "$log" ;;
    *) echo "unknown stage $stage" | tee -a "$log" ;;
  esac
done
