# Other shapes of the zoo target against the installed one, each trained from scratch as stage 1 of
# experiments/retrain_zoo.sh (pretraining 2,236 steps, edit tuning 1,024), one after the other on one H200, then
# where each leaves the copy, teacher-forced on the gate's 96 evaluation and 160 validation prompts
# (experiments.edit_places, GPU, bf16). The shapes: installed (8 layers, 6 query and 2 key/value heads of 64
# dimensions, MLP width 1,024); heads12 (12 and 4 heads of 32: the same parameters); deep12 (12 layers of MLP width
# 512: 5% fewer parameters). The calls, each followed by the seed and the shapes it trains:
#   bash call.sh 0 installed heads12
#   bash call.sh 0 deep12
set -u
SEED=${1:?usage: call.sh SEED SHAPE...}; shift
SHAPES="$*"
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records_seed${SEED}_${SHAPES// /_}.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
declare -A OPTS=([installed]="" [heads12]="--num-heads 12 --num-kv-heads 4" \
  [deep12]="--num-layers 12 --intermediate-size 512")
for label in $SHAPES; do
  # stage 1 of experiments/retrain_zoo.sh, with the seed
  timeout 300 python3 -m experiments.train_zoo target --out /tmp/hc_$label/tiny-coder --decision-weight 4 \
    --compile-layers --data-cache /tmp/zoo_data_cache --no-gate --sft-max-len 2048 --span-share 0 \
    --pretrain-steps 2236 --pretrain-time-s 140 --sft-steps 1024 --deadline-s 500 --seed $SEED ${OPTS[$label]} \
    > $R/stage1_${label}_seed$SEED.log 2>&1
  echo "$label done at $(( $(date +%s) - T0 )) s"
  cp /tmp/hc_$label/tiny-coder/training_config.json $R/stage1_${label}_seed${SEED}_training_config.json || exit 1
done
for rows in "eval 96" "validation 160"; do set -- $rows
  timeout $(( 590 - ($(date +%s) - T0) )) python3 -m experiments.edit_places \
    --model $(for l in $SHAPES; do echo /tmp/hc_$l/tiny-coder; done) --labels $SHAPES --rows $1 --prompts $2 \
    --out $R/edit_places_$1$2_seed${SEED}_${SHAPES// /_}.json 2>&1 | grep -v "Loading weights"
done
gzip $R/*.log
echo "all done at $(( $(date +%s) - T0 )) s"
