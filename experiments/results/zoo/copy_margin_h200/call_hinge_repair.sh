# The hinge throughout: call.sh's margin4 product (the same command, rerun), then its loop repair with stage 7's
# options and the hinge (weight 4) on the repair's edit-tuning anchors too, averaged 0.25 x the installed target +
# 0.75 x the repaired (stage 8's weights); the product's gates on the installed target's 96 evaluation and 160
# validation prompts and its teacher-forced copy departures. Returned in parts when its correlation beats the
# installed target's on both gates.
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 585 - ($(date +%s) - T0) )); }
python3 -m experiments.train_zoo target --init hybridsd/models/tiny-coder --no-gate --compile-layers \
  --data-cache /tmp/zoo_data_cache --sft-max-len 4096 --real-epochs 1 --synthetic-examples 20000 --span-share 0.5 \
  --pretrain-chars 30000000 --decision-weight 16 --sft-lr 2e-4 --sft-steps 900 --sft-time-s 150 --deadline-s 400 \
  --unlikelihood-weight 1 --repeat-share 0.3 --copy-margin-weight 4 --out /tmp/margin4/tiny-coder \
  > $R/target_margin4.log 2>&1 || { tail -5 $R/target_margin4.log; exit 1; }
cp /tmp/margin4/tiny-coder/training_config.json $R/training_config_margin4.json
echo "margin4 trained at $(( $(date +%s) - T0 )) s"
timeout $(left) python3 -m experiments.train_zoo repair --init /tmp/margin4/tiny-coder --out /tmp/m7/tiny-coder \
  --repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 --repair-fp32 \
  --gate-every 12 --gate-after 0 --copy-margin-weight 4 > $R/repair_loops_hinge.log 2>&1 || exit 1
cp /tmp/m7/tiny-coder/repair_config.json $R/repair_config_loops_hinge.json
echo "loops done at $(( $(date +%s) - T0 )) s"
python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/m7/tiny-coder --weight 0.75 --out /tmp/avg \
  > $R/average.log 2>&1 || exit 1
cp /tmp/avg/average_config.json $R/average_config_avg_hinge.json
for g in "eval 96" "validation 160"; do set -- $g
  timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/avg --rows $1 --prompts $2 \
    --out $R/gate_$1$2_avg_hinge.json > $R/gate_$1$2_avg_hinge.log 2>&1 &
done
timeout $(left) python3 -m experiments.edit_places --model /tmp/avg /tmp/m7/tiny-coder --labels avg_hinge \
  repaired_hinge --rows eval --prompts 96 --out $R/edit_places_eval96_hinge.json > $R/edit_places.log 2>&1
wait
echo "gates done at $(( $(date +%s) - T0 )) s"
grep -h "places found" $R/edit_places.log
python3 - <<'PY'
import json, os, subprocess
R = os.environ["OUT"] + "/r"
g = {p: json.load(open(f"{R}/gate_{p}_avg_hinge.json"))["quality_gate"] for p in ("validation160", "eval96")}
print("avg_hinge", {p: (v["eos_share"], v["spearman_ref_out"], v["loops"]) for p, v in g.items()})
if g["validation160"]["spearman_ref_out"] > 0.6469 and g["eval96"]["spearman_ref_out"] > 0.5774:
    subprocess.run("tar -cf - -C /tmp avg | split -b 15M - $OUT/product_avg_hinge.tar.part-", shell=True, check=True)
PY
