# The resync repair (train_zoo repair --repair-mode resync: the model's own new lines at one changed place of each
# answer, then the reference's lines after them taught: the way back to copying after writing a change) from the
# installed target, at learning rate 1e-4 and decision weight 16 as the drift repair's, with the places at changed
# lines only (copy0) and with half of them kept lines (copy0.5); both at once, then each product's gates on the
# installed target's 96 evaluation and 160 validation prompts, all four at once.
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 585 - ($(date +%s) - T0) )); }
for v in "copy0 0" "copy0.5 0.5"; do set -- $v
  python3 -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out /tmp/$1/tiny-coder \
    --repair-mode resync --repair-copy-share $2 --repair-batch 96 --repair-steps 16 --repair-lr 1e-4 \
    --repair-time-s 240 --decision-weight 16 --gate-prompts 8 > $R/repair_$1.log 2>&1 &
done
wait
echo "repairs done at $(( $(date +%s) - T0 )) s"
for v in copy0 copy0.5; do
  cp /tmp/$v/tiny-coder/repair_config.json $R/repair_config_$v.json || continue
  for g in "eval 96" "validation 160"; do set -- $g
    timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/$v/tiny-coder --rows $1 --prompts $2 \
      --out $R/gate_$1$2_$v.json > $R/gate_$1$2_$v.log 2>&1 &
  done
done
wait
echo "gates done at $(( $(date +%s) - T0 )) s"
grep -h "repair\]" $R/repair_*.log | tail -12
for v in copy0 copy0.5; do for p in eval96 validation160; do
  python3 -m experiments.train_zoo compare-gates \
    experiments/results/zoo/weight_average_h200/installed_gate_${p/validation/val}_h200.json.gz \
    $R/gate_${p}_$v.json 2>&1 | tail -1 | sed "s/^/$v $p: /"
done; done
