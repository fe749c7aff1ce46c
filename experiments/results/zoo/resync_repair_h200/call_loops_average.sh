# The resync repair with half its places kept lines (call.sh's copy0.5), rerun, then the recipe's stages 7 and 8 after
# it: the weak loop repair (fp32, 24 steps, the best of its validation gates after 0, 12 and 24 steps kept) and
# 0.25 x the installed target + 0.75 x the repaired weights; the gates of both products, all four at once.
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 585 - ($(date +%s) - T0) )); }
python3 -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out /tmp/resync/tiny-coder \
  --repair-mode resync --repair-copy-share 0.5 --repair-batch 96 --repair-steps 16 --repair-lr 1e-4 \
  --repair-time-s 240 --decision-weight 16 --gate-prompts 8 > $R/repair_resync.log 2>&1 || exit 1
cp /tmp/resync/tiny-coder/repair_config.json $R/repair_config_resync.json
echo "resync done at $(( $(date +%s) - T0 )) s"
timeout $(left) python3 -m experiments.train_zoo repair --init /tmp/resync/tiny-coder --out /tmp/r7/tiny-coder \
  --repair-batch 6 --repair-new-tokens 96 --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 --repair-fp32 \
  --gate-every 12 --gate-after 0 > $R/repair_loops.log 2>&1 || exit 1
cp /tmp/r7/tiny-coder/repair_config.json $R/repair_config_loops.json
echo "loops done at $(( $(date +%s) - T0 )) s"
python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/r7/tiny-coder --weight 0.75 --out /tmp/avg \
  > $R/average.log 2>&1 || exit 1
cp /tmp/avg/average_config.json $R/average_config.json
for m in "avg /tmp/avg" "loops /tmp/r7/tiny-coder"; do set -- $m
  timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows validation --prompts 160 \
    --out $R/gate_val160_$1.json > $R/gate_val160_$1.log 2>&1 &
  timeout $(left) python3 -m experiments.train_zoo gate --model $2 --rows eval --prompts 96 \
    --out $R/gate_eval96_$1.json > $R/gate_eval96_$1.log 2>&1 &
done
wait
echo "gates done at $(( $(date +%s) - T0 )) s"
grep -h "chose\|kept\|selection" $R/repair_loops.log | tail -5
for m in avg loops; do for p in eval96 val160; do
  python3 -m experiments.train_zoo compare-gates \
    experiments/results/zoo/weight_average_h200/installed_gate_${p}_h200.json.gz $R/gate_${p}_$m.json 2>&1 \
    | tail -1 | sed "s/^/$m $p: /"
done; done
