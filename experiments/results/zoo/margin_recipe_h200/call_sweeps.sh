# The GPU sweeps of the hinge recipe's seed-0 product installed as hybridsd/models/tiny-coder (92aaf34's folder):
# the validation repository's sweep, every held-out edit in the bins with five methods and plain decoding, and the
# plain fp32 twin of the latter; 16 ranks on one H200 under MPS (the README's commands, one call):
#   bash experiments/results/zoo/margin_recipe_h200/call_sweeps.sh     # -> $OUT/sweeps.tgz
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
(cd hybridsd/models/tiny-coder && sha256sum model-*.safetensors eagle1/model.safetensors eagle3/model.safetensors)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p /tmp/mps /tmp/mps_log && { nvidia-cuda-mps-control -d 2>/dev/null || true; }
S=$OUT/sweeps; mkdir -p $S
finish() { echo quit | nvidia-cuda-mps-control 2>/dev/null; tar -czf $OUT/sweeps.tgz -C $OUT sweeps && rm -r $S; ls -la $OUT; }
trap finish EXIT
run() { local dir=$1; shift
  timeout $(( 570 - ($(date +%s) - T0) )) torchrun --standalone --nproc_per_node=16 -m experiments.sweep \
    --preset edit-norm --out-dir $S/$dir "$@" > $S/$dir.log 2>&1
  echo "$dir rc=$? at $(( $(date +%s) - T0 )) s"; grep -v "it/s\]" $S/$dir.log | tail -2; }
run edit_norm_validation_h200_bf16 --split validation --methods ngram eagle ngram-eagle
run edit_norm_all_heldout_h200_bf16 --per-bin 0 --methods none ngram eagle eagle3 ngram-eagle ngram-eagle3
run edit_norm_all_heldout_h200_fp32 --per-bin 0 --methods none --dtype fp32
