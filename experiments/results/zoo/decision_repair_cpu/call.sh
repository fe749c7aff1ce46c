# The decisions repair (train_zoo repair --repair-mode decisions: the model's own whole greedy answers to 16 training
# prompts a step; at the first wrong copy decision of each, a departure from the copy where the reference copies or a
# copy through a place the reference changes, what the reference does from there is taught) of the installed target,
# 12 steps at learning rate 1e-4 with the repair's edit-tuning batches at decision weight 16; its product's gates;
# then, as the installed recipe follows its decision tuning, its average with the installed target (0.5) and the
# recipe's weak loop repair (stage 7) followed by 0.25 x the installed target + 0.75 x that (stage 8), each gated on
# the installed target's 96 evaluation and 160 validation prompts. On a CPU (2 cores, fp32), so the
# installed target is gated on the same CPU first. The commands as they ran (a draw's steps may have run in another
# order, which runs.json gives):
#   bash experiments/results/zoo/decision_repair_cpu/call.sh OUT SEED      # OUT: where the models and records go
cd "$(git rev-parse --show-toplevel)" || exit 1
export PYTHONPATH=$PWD HYBRIDSD_DATA=${HYBRIDSD_DATA:-../shared/data}
OUT=${1:?usage: call.sh OUT SEED}; SEED=${2:?usage: call.sh OUT SEED}; D=$OUT/decisions_seed$SEED
mkdir -p $D ${D}_avg0.5 ${D}_loops_avg0.75
gates() {  # gates MODEL: the quality gate of MODEL on the 96 evaluation and 160 validation prompts, beside it
  python -m experiments.train_zoo gate --model $1 --rows eval --prompts 96 --out $1/../gate_eval96_cpu.json > $1/../gate_eval.log 2>&1
  python -m experiments.train_zoo gate --model $1 --rows validation --prompts 160 --out $1/../gate_val160_cpu.json > $1/../gate_val.log 2>&1
}
[ -e $OUT/installed_gate_val160_cpu.json ] || {
  python -m experiments.train_zoo gate --model hybridsd/models/tiny-coder --rows eval --prompts 96 --out $OUT/installed_gate_eval96_cpu.json > $OUT/base_eval.log 2>&1
  python -m experiments.train_zoo gate --model hybridsd/models/tiny-coder --rows validation --prompts 160 --out $OUT/installed_gate_val160_cpu.json > $OUT/base_val.log 2>&1
}
python -m experiments.train_zoo repair --init hybridsd/models/tiny-coder --out $D/tiny-coder --repair-mode decisions \
  --repair-batch 16 --repair-steps 12 --repair-lr 1e-4 --decision-weight 16 --repair-time-s 3000 --repair-fp32 \
  --gate-every 6 --gate-after 6 --seed $SEED > $D/repair.log 2>&1
python -m experiments.train_zoo repair --init $D/tiny-coder --out ${D}_loops/tiny-coder --repair-batch 6 --repair-new-tokens 96 \
  --repair-steps 24 --repair-time-s 1500 --repair-weight 0.1 --repair-fp32 --gate-every 12 --gate-after 0 > ${D}_loops.log 2>&1
python -m experiments.weight_average hybridsd/models/tiny-coder ${D}_loops/tiny-coder --weight 0.75 --out ${D}_loops_avg0.75/tiny-coder > ${D}_loops_avg0.75/average.log 2>&1
gates ${D}_loops_avg0.75/tiny-coder
python -m experiments.weight_average hybridsd/models/tiny-coder $D/tiny-coder --weight 0.5 --out ${D}_avg0.5/tiny-coder > ${D}_avg0.5/average.log 2>&1
gates ${D}_avg0.5/tiny-coder
gates $D/tiny-coder
