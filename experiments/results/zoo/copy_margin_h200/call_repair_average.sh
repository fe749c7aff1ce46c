# The hinge's weight-4 product (call.sh's margin4: the same command, rerun) then, as the installed recipe's stages 7
# and 8 do for its decision-tuned target, (a) 0.5 x the installed target + 0.5 x it, and (b) its loop repair (stage
# 7's options: unlikelihood of repeats weighted 0.1, fp32, 24 steps, the best of the validation gates after 0, 12
# and 24 steps kept) averaged 0.25 x the installed target + 0.75 x the repaired; the gates of (a) and (b) on the
# installed target's 96 evaluation and 160 validation prompts and their teacher-forced copy departures. A product
# whose correlation beats the installed target's on both gates is returned in parts.
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
gates() {  # $1 label, $2 folder
  for g in "eval 96" "validation 160"; do set -- $1 $2 $g
    timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows $3 --prompts $4 \
      --out $R/gate_$3$4_$1.json > $R/gate_$3$4_$1.log 2>&1 &
  done
}
python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/margin4/tiny-coder --weight 0.5 \
  --out /tmp/half > $R/average_half.log 2>&1 && cp /tmp/half/average_config.json $R/average_config_half.json \
  && gates half /tmp/half
timeout $(left) python3 -m experiments.train_zoo repair --init /tmp/margin4/tiny-coder --out /tmp/m7/tiny-coder \
  --repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 --repair-fp32 \
  --gate-every 12 --gate-after 0 > $R/repair_loops.log 2>&1 || exit 1
cp /tmp/m7/tiny-coder/repair_config.json $R/repair_config_loops.json
echo "loops done at $(( $(date +%s) - T0 )) s"
python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/m7/tiny-coder --weight 0.75 --out /tmp/avg \
  > $R/average.log 2>&1 || exit 1
cp /tmp/avg/average_config.json $R/average_config_avg.json
gates avg /tmp/avg
timeout $(left) python3 -m experiments.edit_places --model /tmp/half /tmp/avg --labels half avg --rows eval \
  --prompts 96 --out $R/edit_places_eval96.json > $R/edit_places.log 2>&1
wait
echo "gates done at $(( $(date +%s) - T0 )) s"
grep -h "places found" $R/edit_places.log
python3 - <<'PY'
import json, os, subprocess
R = os.environ["OUT"] + "/r"
for name, folder in (("avg", "/tmp/avg"), ("half", "/tmp/half")):
    try:
        g = {p: json.load(open(f"{R}/gate_{p}_{name}.json"))["quality_gate"] for p in ("validation160", "eval96")}
    except (OSError, KeyError) as e:
        print(name, "no gates:", e); continue
    print(name, {p: (v["eos_share"], v["spearman_ref_out"], v["loops"]) for p, v in g.items()})
    if g["validation160"]["spearman_ref_out"] > 0.6469 and g["eval96"]["spearman_ref_out"] > 0.5774:
        subprocess.run(f"tar -cf - -C {os.path.dirname(folder)} {os.path.basename(folder)} | "
                       f"split -b 15M - $OUT/product_{name}.tar.part-", shell=True, check=True)
PY
