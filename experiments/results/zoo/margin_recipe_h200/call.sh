# The copy-margin hinge inside the installed recipe: stages 6-8 of experiments/retrain_zoo.sh from the base target
# with stage 6's TARGET_OPTIONS='--copy-margin-weight 4', two draws (train_zoo.py target --seed 0 and 1) side by
# side on one H200 under MPS; then each draw's stage 7 (the weak loop repair, its 64-prompt validation gates
# choosing the step), its stage-8 average (0.25 x base + 0.75 x draw) and the gates of both averages on the
# installed target's 96 evaluation and 160 validation prompts. Two calls back to back on one machine (/tmp is kept
# between them):
#   bash call.sh train     # stage 6 of both draws
#   bash call.sh finish    # their stage 7, the averages and the gates; an average whose gates beat the installed
#                          # target's on both prompt sets (with >= 90% of the outputs ending on their own) is
#                          # returned in parts
# The base target (aae0484's hybridsd/models/tiny-coder, SHA-256 of its shards in the installed target's
# average_config.json under "a") stands in the copied tree's hybridsd/models/tiny-coder; the call checks its hashes.
set -u
PHASE=${1:?usage: call.sh train|finish}
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records_$PHASE.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 570 - ($(date +%s) - T0) )); }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p /tmp/mps /tmp/mps_log && { nvidia-cuda-mps-control -d 2>/dev/null || true; }
BASE=/tmp/base/tiny-coder
SEEDS="0 1"
if [ "$PHASE" = train ]; then
  rm -rf /tmp/base && mkdir -p /tmp/base && cp -r hybridsd/models/tiny-coder $BASE || exit 1
  (cd $BASE && sha256sum model-*.safetensors) | tee $R/base_sha256.txt
  (cd $BASE && sha256sum -c --quiet) <<'SUMS' || { echo "not the base target"; exit 1; }
0fac7ae17f1bb32cad5300ee600f87a2d8db7230166400fa9f01591f8333c1ae  model-00001-of-00003.safetensors
8726d61a62142e3267c75fb39a5855091d7aa1546fb51bdf0df1550f4bc6659a  model-00002-of-00003.safetensors
bd0fd0f602e3fb14433a2869387bbf6a3ca02b1b4d8dd55f4515ef4204e21807  model-00003-of-00003.safetensors
SUMS
  for s in $SEEDS; do  # stage 6 of experiments/retrain_zoo.sh with the hinge, the seed, and time limits for two draws
    python3 -m experiments.train_zoo target --init $BASE --out /tmp/s6_$s/tiny-coder --no-gate --compile-layers \
      --sft-max-len 4096 --real-epochs 1 --synthetic-examples 20000 --span-share 0.5 --pretrain-chars 30000000 \
      --decision-weight 16 --sft-lr 3e-4 --sft-steps 1862 --sft-time-s 380 --deadline-s 440 \
      --unlikelihood-weight 1 --repeat-share 0.3 --copy-margin-weight 4 --seed $s > $R/stage6_seed$s.log 2>&1 &
  done
  wait
  echo "stage 6 done at $(( $(date +%s) - T0 )) s"
  for s in $SEEDS; do
    cp /tmp/s6_$s/tiny-coder/training_config.json $R/stage6_seed${s}_training_config.json || exit 1
  done
  grep -h "stopped\|steps" $R/stage6*.log | tail -8
else
  for s in $SEEDS; do  # stage 7 of experiments/retrain_zoo.sh
    timeout $(left) python3 -m experiments.train_zoo repair --init /tmp/s6_$s/tiny-coder --out /tmp/s7_$s/tiny-coder \
      --repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 \
      --repair-fp32 --gate-every 12 --gate-after 0 > $R/stage7_seed$s.log 2>&1 &
  done
  wait
  echo "stage 7 done at $(( $(date +%s) - T0 )) s"
  for s in $SEEDS; do  # stage 8's average of each draw with the base
    cp /tmp/s7_$s/tiny-coder/repair_config.json $R/stage7_seed${s}_repair_config.json || exit 1
    python3 -m experiments.weight_average $BASE /tmp/s7_$s/tiny-coder --weight 0.75 --out /tmp/avg_$s \
      > $R/average_seed$s.log 2>&1 && cp /tmp/avg_$s/average_config.json $R/average_seed${s}_config.json || exit 1
    for g in "eval 96" "validation 160"; do set -- $g
      timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/avg_$s --rows $1 --prompts $2 \
        --out $R/gate_$1$2_seed$s.json > $R/gate_$1$2_seed$s.log 2>&1 &
    done
  done
  wait
  echo "gates done at $(( $(date +%s) - T0 )) s"
  grep -h "quality gate" $R/gate*.log
  python3 - <<'PY'
import json, os, subprocess
R = os.environ["OUT"] + "/r"
for s in (0, 1):
    try:
        g = {p: json.load(open(f"{R}/gate_{p}_seed{s}.json"))["quality_gate"] for p in ("validation160", "eval96")}
    except (OSError, KeyError) as e:
        print(s, "no gates:", e); continue
    print(f"seed{s}", {p: (v["eos_share"], v["spearman_ref_out"], v["loops"]) for p, v in g.items()})
    if all(v["eos_share"] >= 0.9 for v in g.values()) and g["validation160"]["spearman_ref_out"] > 0.6469 \
            and g["eval96"]["spearman_ref_out"] > 0.5774:  # the installed target's GPU gates
        subprocess.run(f"tar -cf - -C /tmp avg_{s} | split -b 15M - $OUT/product_seed{s}.tar.part-", shell=True,
                       check=True)
PY
fi
echo quit | nvidia-cuda-mps-control 2>/dev/null || true
