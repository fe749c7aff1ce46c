# The installed target tuned 900 more steps (the recipe's stage-6 data and decision weight 16, learning rate 2e-4)
# three ways: without the copy-margin hinge (the control), and with it at weight 4 and 16 (margin 2); each
# product's gates on the installed target's 96 evaluation and 160 validation prompts, started in the background as
# soon as it is saved, and its teacher-forced copy departures (experiments/edit_places.py) on the 96.
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 585 - ($(date +%s) - T0) )); }
COMMON="--init hybridsd/models/tiny-coder --no-gate --compile-layers --data-cache /tmp/zoo_data_cache \
  --sft-max-len 4096 --real-epochs 1 --synthetic-examples 20000 --span-share 0.5 --pretrain-chars 30000000 \
  --decision-weight 16 --sft-lr 2e-4 --sft-steps 900 --sft-time-s 150 --deadline-s 400 --unlikelihood-weight 1 \
  --repeat-share 0.3"
for v in "control 0" "margin4 4" "margin16 16"; do set -- $v
  python3 -m experiments.train_zoo target $COMMON --copy-margin-weight $2 --out /tmp/$1/tiny-coder \
    > $R/target_$1.log 2>&1 || { tail -5 $R/target_$1.log; exit 1; }
  cp /tmp/$1/tiny-coder/training_config.json $R/training_config_$1.json
  echo "$1 trained at $(( $(date +%s) - T0 )) s"
  for g in "eval 96" "validation 160"; do set -- $v $g
    timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/$1/tiny-coder --rows $3 --prompts $4 \
      --out $R/gate_$3$4_$1.json > $R/gate_$3$4_$1.log 2>&1 &
  done
done
set -- control margin4 margin16
timeout $(left) python3 -m experiments.edit_places --model /tmp/control/tiny-coder /tmp/margin4/tiny-coder \
  /tmp/margin16/tiny-coder hybridsd/models/tiny-coder --labels control margin4 margin16 installed --rows eval \
  --prompts 96 --out $R/edit_places_eval96.json > $R/edit_places.log 2>&1
wait
echo "gates done at $(( $(date +%s) - T0 )) s"
tail -3 $R/edit_places.log
python3 - <<'PY'
import json, os
R = os.environ["OUT"] + "/r"
for v in ("control", "margin4", "margin16"):
    for p in ("eval96", "validation160"):
        try:
            g = json.load(open(f"{R}/gate_{p}_{v}.json"))["quality_gate"]
            print(v, p, g["eos_share"], g["spearman_ref_out"])
        except (OSError, KeyError) as e:
            print(v, p, "no gate:", e)
PY
