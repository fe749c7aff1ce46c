#!/usr/bin/env bash
# Draft trees on the zoo, on the CPU (fp32; about 12 minutes on 2 cores): EAGLE-3 as a chain (k 3 and 6) against the
# same head's EAGLE-2 dynamic tree (depth 6, top-k 10, 60 nodes) and the hybrid tree (n-gram k 5 as one more
# branch), on 12 held-out code edits and 12 MT-Bench prompts (256 tokens) -> experiments/results/trees/zoo_cpu_fp32/.
# The trees per edit-norm bin are in the GPU sweep (``python -m experiments.sweep --preset edit-norm``).
# Read by notebooks/hybrid_al.ipynb. Rows already in a file are kept (a rerun resumes).
set -euo pipefail
R=experiments/results/trees
O=$R/zoo_cpu_fp32
K='{"ngram":5,"eagle3":3}'
mkdir -p "$O"
for ds in code-edits mt-bench; do
  A=(--dataset-name "$ds" --num-prompts 12 --output-len 256 --device cpu)
  python -m experiments.spec_bench "${A[@]}" --num-speculative-tokens-per-method "$K" --method eagle3 --output "$O/${ds}__eagle3.jsonl"
  python -m experiments.spec_bench "${A[@]}" --method eagle3 --num-spec-tokens 6 --output "$O/${ds}__eagle3-k6.jsonl"
  python -m experiments.spec_bench "${A[@]}" --num-speculative-tokens-per-method "$K" --method eagle3 --tree dynamic \
    --output "$O/${ds}__eagle3-dynamic-tree.jsonl"
  python -m experiments.spec_bench "${A[@]}" --num-speculative-tokens-per-method "$K" --method ngram-eagle3 \
    --hybrid-policy tree --tree dynamic --output "$O/${ds}__ngram-eagle3-dynamic-tree.jsonl"
  python -m experiments.spec_bench "${A[@]}" --num-speculative-tokens-per-method "$K" --method ngram --output "$O/${ds}__ngram.jsonl"
done
