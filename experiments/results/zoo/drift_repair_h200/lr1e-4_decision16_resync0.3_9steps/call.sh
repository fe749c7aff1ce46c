# The drift repair (decision weight 16, drift term 0.3; its recorded 9 steps) followed by (a) the installed recipe's
# stages 7 and 8 (weak loop repair, 0.25 x installed + 0.75 x repaired) and (b) 0.5 x installed + 0.5 x the drift
# product directly; gates of the products; an average returned in parts when it beats the installed target's gates.
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 575 - ($(date +%s) - T0) )); }
python3 -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out /tmp/drift/tiny-coder \
  --repair-mode drift --repair-batch 96 --repair-steps 9 --repair-lr 1e-4 --repair-time-s 270 \
  --decision-weight 16 --resync-weight 0.3 --gate-prompts 8 > $R/repair_drift.log 2>&1 || exit 1
cp /tmp/drift/tiny-coder/repair_config.json $R/repair_config_drift.json
echo "drift done at $(( $(date +%s) - T0 )) s"
python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/drift/tiny-coder --weight 0.5 --out /tmp/half \
  > $R/average_half.log 2>&1 && cp /tmp/half/average_config.json $R/average_config_half.json && {
  timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/half --rows validation --prompts 160 \
    --out $R/gate_val160_half.json > $R/gate_val160_half.log 2>&1 &
  timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/half --rows eval --prompts 96 \
    --out $R/gate_eval96_half.json > $R/gate_eval96_half.log 2>&1 & }
timeout $(left) python3 -m experiments.train_zoo repair --init /tmp/drift/tiny-coder --out /tmp/d7/tiny-coder \
  --repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 --repair-fp32 \
  --gate-every 12 --gate-after 0 > $R/repair_loops.log 2>&1 || exit 1
cp /tmp/d7/tiny-coder/repair_config.json $R/repair_config_loops.json
echo "loops done at $(( $(date +%s) - T0 )) s"
python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/d7/tiny-coder --weight 0.75 --out /tmp/avg \
  > $R/average.log 2>&1 || exit 1
cp /tmp/avg/average_config.json $R/average_config.json
for m in "avg /tmp/avg" "loops /tmp/d7/tiny-coder"; do set -- $m
  timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows validation --prompts 160 \
    --out $R/gate_val160_$1.json > $R/gate_val160_$1.log 2>&1 &
  timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows eval --prompts 96 \
    --out $R/gate_eval96_$1.json > $R/gate_eval96_$1.log 2>&1 &
done
wait
echo "gates done at $(( $(date +%s) - T0 )) s"
grep -h "repair\]\|chose\|kept" $R/repair_*.log | tail -40
grep -h "quality gate" $R/gate*.log
python3 - <<'PY'
import json, os, subprocess
R = os.environ["OUT"] + "/r"
for name, folder in (("avg", "/tmp/avg"), ("half", "/tmp/half")):
    try:
        g = {p: json.load(open(f"{R}/gate_{p}_{name}.json"))["quality_gate"] for p in ("val160", "eval96")}
    except (OSError, KeyError) as e:
        print(name, "no gates:", e); continue
    print(name, {p: (v["eos_share"], v["spearman_ref_out"]) for p, v in g.items()})
    if g["val160"]["spearman_ref_out"] > 0.6469 and g["eval96"]["spearman_ref_out"] >= 0.6:
        subprocess.run(f"tar -cf - -C {os.path.dirname(folder)} {os.path.basename(folder)} | "
                       f"split -b 15M - $OUT/product_{name}.tar.part-", shell=True, check=True)
        break
PY
