# The decisions repair (train_zoo repair --repair-mode decisions: the model's own whole greedy answers to training
# prompts; at the first wrong copy decision of each, a departure from the copy where the reference copies or a copy
# through a place the reference changes, what the reference does from there is taught) of the installed target at
# the GPU's batch: 96 answers a step (the CPU record's 16), learning rate 1e-4 and decision weight 16, two draws
# (--seed 0 and 1) side by side on one GPU for 240 s each; then each draw's 0.5 average with the installed target,
# and the four products' gates on the installed target's 96 evaluation and 160 validation prompts (the averages'
# first), compared with the installed target's GPU gates. One device call (carry .whl and .cache):
#   HYBRIDSD_COMMIT=<commit> bash experiments/results/zoo/decision_repair_h200/call.sh   # -> $OUT/records.tgz
set -u
T0=$(date +%s)
source experiments/device_env.sh || exit 1
R=$OUT/r; mkdir -p $R
finish() { tar -czf $OUT/records.tgz -C $OUT r && rm -r $R; ls -la $OUT; }
trap finish EXIT
left() { echo $(( 585 - ($(date +%s) - T0) )); }
for s in 0 1; do
  python3 -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out /tmp/seed$s/tiny-coder \
    --repair-mode decisions --repair-batch 96 --repair-steps 12 --repair-lr 1e-4 --decision-weight 16 \
    --repair-time-s 240 --gate-prompts 8 --seed $s > $R/repair_seed$s.log 2>&1 &
done
wait
echo "repairs done at $(( $(date +%s) - T0 )) s"
for s in 0 1; do
  cp /tmp/seed$s/tiny-coder/repair_config.json $R/repair_config_seed$s.json || continue
  python3 -m experiments.weight_average hybridsd/models/tiny-coder /tmp/seed$s/tiny-coder --weight 0.5 \
    --out /tmp/seed${s}_avg0.5/tiny-coder > $R/average_seed$s.log 2>&1
done
gates() {  # gates V...: each product's two gates, all at once
  for v in "$@"; do [ -f /tmp/$v/tiny-coder/config.json ] || continue
    for g in "eval 96" "validation 160"; do set -- $g
      timeout $(left) python3 -m experiments.train_zoo gate --model /tmp/$v/tiny-coder --rows $1 --prompts $2 \
        --out $R/gate_$1$2_$v.json > $R/gate_$1$2_$v.log 2>&1 &
    done
  done
  wait
  echo "gates of $* done at $(( $(date +%s) - T0 )) s"
}
gates seed0_avg0.5 seed1_avg0.5
gates seed0 seed1
grep -h "repair\]" $R/repair_*.log | tail -12
for v in seed0_avg0.5 seed1_avg0.5 seed0 seed1; do for p in eval96 validation160; do
  [ -f $R/gate_${p}_$v.json ] && python3 -m experiments.train_zoo compare-gates \
    experiments/results/zoo/weight_average_h200/installed_gate_${p/validation/val}_h200.json.gz \
    $R/gate_${p}_$v.json 2>&1 | tail -1 | sed "s/^/$v $p: /"
done; done
