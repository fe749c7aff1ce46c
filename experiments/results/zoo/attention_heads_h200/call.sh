# Twice as many attention heads of half the size (12 query and 4 key/value heads of 32 dimensions against the
# installed shape's 6 and 2 of 64: the same parameters), trained from scratch as stage 1 of
# experiments/retrain_zoo.sh (pretraining 2,236 steps, edit tuning 1,024), one after the other on one H200; then
# where each leaves the copy, teacher-forced on the gate's 96 evaluation and 160 validation prompts
# (experiments.edit_places, GPU, bf16). One call a seed:
#   bash call.sh 0
#   bash call.sh 1
set -u
SEED=${1:?usage: call.sh SEED}
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records_seed$SEED.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
for v in "installed" "heads12 --num-heads 12 --num-kv-heads 4"; do set -- $v; label=$1; shift
  # stage 1 of experiments/retrain_zoo.sh, with the seed
  timeout 300 python3 -m experiments.train_zoo target --out /tmp/hc_$label/tiny-coder --decision-weight 4 \
    --compile-layers --data-cache /tmp/zoo_data_cache --no-gate --sft-max-len 2048 --span-share 0 \
    --pretrain-steps 2236 --pretrain-time-s 140 --sft-steps 1024 --deadline-s 500 --seed $SEED "$@" \
    > $R/stage1_${label}_seed$SEED.log 2>&1
  echo "$label done at $(( $(date +%s) - T0 )) s"
  cp /tmp/hc_$label/tiny-coder/training_config.json $R/stage1_${label}_seed${SEED}_training_config.json || exit 1
done
for rows in "eval 96" "validation 160"; do set -- $rows
  timeout $(( 590 - ($(date +%s) - T0) )) python3 -m experiments.edit_places --model /tmp/hc_installed/tiny-coder \
    /tmp/hc_heads12/tiny-coder --labels installed heads12 --rows $1 --prompts $2 \
    --out $R/edit_places_$1$2_seed$SEED.json 2>&1 | grep -v "Loading weights"
done
gzip $R/*.log
echo "all done at $(( $(date +%s) - T0 )) s"
