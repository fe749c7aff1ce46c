#!/usr/bin/env bash
# Reproduce vLLM PR #24344's hybrid n-gram/EAGLE study with hybridsd: every configuration of the PR on Blazedit
# (edit norm 0.01-0.25, 90 prompts, 2048 output tokens), MT-Bench (80) and InstructCoder (1000 prompts), data
# parallel over the GPUs present, then the PR-style table and the notebooks on the results folder.
#
#   experiments/reproduce_hybrid_pr.sh [OUT_DIR]          # default OUT_DIR: experiments/results/llama31
#
# Environment (defaults: the PR's): MODEL, EAGLE1, EAGLE3 (Hub ids or folders), BLAZEDIT, MTBENCH, INSTRUCTCODER
# (Hub ids or local copies), NUM_PROMPTS_IC (1000; a cap for a shorter run), NGPUS (default: all visible),
# PYTHON (python3), DEVICE (cuda), EXTRA (more spec_bench flags, last so they win, e.g. "--compile auto" or
# "--num-prompts 4 --hf-output-len 64 --output-len 64" for a quick check). Reruns skip rows already written.
# A model or dataset that cannot be reached stops the script before any decoding, naming it (exit 2).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-experiments/results/llama31}
MODEL=${MODEL:-meta-llama/Llama-3.1-8B-Instruct}
EAGLE1=${EAGLE1:-yuhuili/EAGLE-LLaMA3.1-Instruct-8B}
EAGLE3=${EAGLE3:-yuhuili/EAGLE3-LLaMA3.1-Instruct-8B}
BLAZEDIT=${BLAZEDIT:-vdaita/edit_5k_char}
MTBENCH=${MTBENCH:-philschmid/mt-bench}
INSTRUCTCODER=${INSTRUCTCODER:-likaixin/InstructCoder}
NUM_PROMPTS_IC=${NUM_PROMPTS_IC:-1000}
PYTHON=${PYTHON:-python3}
EXTRA=${EXTRA:-}
DEVICE=${DEVICE:-cuda}
if [[ -z "${NGPUS:-}" ]]; then
  NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l || true)
fi
NGPUS=${NGPUS:-0}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# ---- preflight: every model and dataset reachable (configs and datasets fetched, no target weights) -----------
MODEL="$MODEL" EAGLE1="$EAGLE1" EAGLE3="$EAGLE3" BLAZEDIT="$BLAZEDIT" MTBENCH="$MTBENCH" \
INSTRUCTCODER="$INSTRUCTCODER" "$PYTHON" - <<'EOF'
import os, sys
from hybridsd import checkpoint, data
from hybridsd.eagle import loader

checks = [("model", os.environ["MODEL"], checkpoint.resolve)]
checks += [(f"EAGLE head {k}", os.environ[k], loader.resolve) for k in ("EAGLE1", "EAGLE3")]
checks += [(f"dataset {k}", os.environ[k], data.load_hf_table) for k in ("BLAZEDIT", "MTBENCH", "INSTRUCTCODER")]
for what, name, check in checks:
    try:
        check(name)
    except (ValueError, OSError) as e:
        print(f"reproduce_hybrid_pr: cannot use {what} {name!r}: {e}", file=sys.stderr)
        sys.exit(2)
print("preflight: model, heads and datasets reachable", file=sys.stderr)
EOF

if (( NGPUS > 1 )); then
  LAUNCH=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NGPUS")
else
  LAUNCH=("$PYTHON")
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the notebook runs in notebooks/
LOOKUP=(--prompt_lookup_max 5 --prompt_lookup_min 2)
declare -A CONFIGS=(
  [vanilla]="--method none"
  [ngram]="--method ngram --num_spec_tokens 5 ${LOOKUP[*]}"
  [eagle]="--method eagle --num_spec_tokens 3 --eagle-dir $EAGLE1"
  [eagle3]="--method eagle3 --num_spec_tokens 3 --eagle-dir $EAGLE3"
  [ngram-eagle]="--method ngram-eagle --num-speculative-tokens-per-method {\"ngram\":5,\"eagle\":3} ${LOOKUP[*]} --eagle-dir $EAGLE1"
  [ngram-eagle3]="--method ngram-eagle3 --num-speculative-tokens-per-method {\"ngram\":5,\"eagle3\":3} ${LOOKUP[*]} --eagle-dir $EAGLE3"
  [ngram-eagle-tree]="--method ngram-eagle --hybrid-policy tree --num-speculative-tokens-per-method {\"ngram\":5,\"eagle\":3} ${LOOKUP[*]} --eagle-dir $EAGLE1"
)
declare -A DATASETS=(
  [blazedit]="--dataset-path $BLAZEDIT --num-prompts 90 --hf-output-len 2048 --blazedit-min-distance 0.01 --blazedit-max-distance 0.25 --no-oversample"
  [mt-bench]="--dataset-path $MTBENCH --num-prompts 80 --output-len 256"
  [instructcoder]="--dataset-path $INSTRUCTCODER --num-prompts $NUM_PROMPTS_IC --output-len 256 --no-oversample"
)
for ds in blazedit mt-bench instructcoder; do
  for cfg in vanilla ngram eagle eagle3 ngram-eagle ngram-eagle3 ngram-eagle-tree; do
    echo "== $ds $cfg" >&2
    # shellcheck disable=SC2086  # the config strings are word lists by design
    "${LAUNCH[@]}" -m experiments.spec_bench --model-dir "$MODEL" --tp 1 --dataset-name hf ${DATASETS[$ds]} \
      ${CONFIGS[$cfg]} --device "$DEVICE" $EXTRA --output "$OUT/${ds}__${cfg}.jsonl"
  done
done

"$PYTHON" -m experiments.summarize_runs "$OUT/*.jsonl" --table pr | tee "$OUT/pr_table.txt"
RESULTS_DIR="$OUT" MODEL="$MODEL" "$PYTHON" - <<'EOF'
import os
from pathlib import Path

import nbclient
import nbformat

out = Path(os.environ["RESULTS_DIR"])
path = Path("notebooks/hybrid_al.ipynb")
nb = nbformat.read(path, as_version=4)
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                        resources={"metadata": {"path": str(path.parent)}}).execute()
nbformat.write(nb, out / "hybrid_al.ipynb")
print(f"rendered {path} on {out} into {out / 'hybrid_al.ipynb'}")
EOF
