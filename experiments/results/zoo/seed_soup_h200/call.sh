# A soup of the installed recipe's draws: three more draws of its stages 6 and 7 from the base target (train_zoo.py
# target --seed 1, 2, 3, then the weak loop repair), run side by side on one H200 under MPS; then each draw's stage-8
# average (0.25 x base + 0.75 x draw) and the soup, the mean of the installed target and those three averages
# (0.25 x installed + 0.1875 x base + 0.1875 x each draw, i.e. 0.25 x base + 0.75 x the mean of the four draws), and
# the gates of all four models. Two calls back to back on one machine (/tmp is kept between them):
#   bash call.sh train     # stage 6 of the three draws
#   bash call.sh soup      # their stage 7, the averages, the soup and the gates; the soup's weights returned in parts
#                          # when its gates beat the installed target's on both prompt sets
# The base target (aae0484's tiny-coder, SHA-256 of its shards in hybridsd/models/tiny-coder/average_config.json
# under "a") travels as .probe/base.tar.xz.
set -u
PHASE=${1:?usage: call.sh train|soup}
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records_$PHASE.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 570 - ($(date +%s) - T0) )); }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p /tmp/mps /tmp/mps_log && { nvidia-cuda-mps-control -d 2>/dev/null || true; }
BASE=/tmp/base/tiny-coder
SEEDS="1 2 3"
if [ "$PHASE" = train ]; then
  mkdir -p /tmp/base && xz -dc .probe/base.tar.xz | tar -x -C /tmp/base || exit 1
  sha256sum $BASE/model-*.safetensors | tee $R/base_sha256.txt
  for s in $SEEDS; do  # stage 6 of experiments/retrain_zoo.sh, with the seed and time limits that let the steps stop it
    python3 -m experiments.train_zoo target --init $BASE --out /tmp/s6_$s/tiny-coder --no-gate --compile-layers \
      --sft-max-len 4096 --real-epochs 1 --synthetic-examples 20000 --span-share 0.5 --pretrain-chars 30000000 \
      --decision-weight 16 --sft-lr 3e-4 --sft-steps 1862 --sft-time-s 380 --deadline-s 440 \
      --unlikelihood-weight 1 --repeat-share 0.3 --seed $s > $R/stage6_seed$s.log 2>&1 &
  done
  wait
  echo "stage 6 done at $(( $(date +%s) - T0 )) s"
  for s in $SEEDS; do
    cp /tmp/s6_$s/tiny-coder/training_config.json $R/stage6_seed${s}_training_config.json || exit 1
  done
  grep -h "stopped\|steps" $R/stage6*.log | tail -12
else
  for s in $SEEDS; do  # stage 7 of experiments/retrain_zoo.sh
    timeout $(left) python3 -m experiments.train_zoo repair --init /tmp/s6_$s/tiny-coder --out /tmp/s7_$s/tiny-coder \
      --repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 \
      --repair-fp32 --gate-every 12 --gate-after 0 > $R/stage7_seed$s.log 2>&1 &
  done
  wait
  echo "stage 7 done at $(( $(date +%s) - T0 )) s"
  for s in $SEEDS; do cp /tmp/s7_$s/tiny-coder/repair_config.json $R/stage7_seed${s}_repair_config.json; done
  I=hybridsd/models/tiny-coder
  for s in $SEEDS; do  # stage 8's average of each draw with the base
    python3 -m experiments.weight_average $BASE /tmp/s7_$s/tiny-coder --weight 0.75 --out /tmp/avg_$s \
      > $R/average_seed$s.log 2>&1 && cp /tmp/avg_$s/average_config.json $R/average_seed${s}_config.json || exit 1
  done
  python3 -m experiments.weight_average $I $BASE /tmp/s7_1/tiny-coder /tmp/s7_2/tiny-coder /tmp/s7_3/tiny-coder \
    --weights 0.25 0.1875 0.1875 0.1875 0.1875 --out /tmp/soup > $R/soup.log 2>&1 || exit 1
  cp /tmp/soup/average_config.json $R/soup_average_config.json
  for m in "soup /tmp/soup" "seed1 /tmp/avg_1" "seed2 /tmp/avg_2" "seed3 /tmp/avg_3"; do set -- $m
    timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows validation --prompts 160 \
      --out $R/gate_val160_$1.json > $R/gate_val160_$1.log 2>&1 &
    timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows eval --prompts 96 \
      --out $R/gate_eval96_$1.json > $R/gate_eval96_$1.log 2>&1 &
  done
  wait
  echo "gates done at $(( $(date +%s) - T0 )) s"
  grep -h "quality gate" $R/gate*.log
  python3 - <<'PY'
import json, os, subprocess
R = os.environ["OUT"] + "/r"
g = {p: json.load(open(f"{R}/gate_{p}_soup.json"))["quality_gate"] for p in ("val160", "eval96")}
print("soup", {p: (v["eos_share"], v["spearman_ref_out"]) for p, v in g.items()})
if g["val160"]["spearman_ref_out"] > 0.6469 and g["eval96"]["spearman_ref_out"] > 0.5774:  # the installed target's
    subprocess.run("tar -cf - -C /tmp soup | split -b 15M - $OUT/soup.tar.part-", shell=True, check=True)
PY
fi
echo quit | nvidia-cuda-mps-control 2>/dev/null || true
