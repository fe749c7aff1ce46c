# The soup of call.sh's two draws (run first, with SEED 0 and 1, into the same OUT): 0.5 x the installed target +
# 0.25 x each draw's repaired weights (python -m experiments.weight_average --weights), gated on the installed
# target's 160 validation and 96 evaluation prompts as the other products, on the same CPU in fp32:
#   bash experiments/results/zoo/decision_repair_cpu/call_soup.sh OUT
cd "$(git rev-parse --show-toplevel)" || exit 1
export PYTHONPATH=$PWD HYBRIDSD_DATA=${HYBRIDSD_DATA:-../shared/data}
OUT=${1:?usage: call_soup.sh OUT}; S=$OUT/decisions_soup
mkdir -p $S
python -m experiments.weight_average hybridsd/models/tiny-coder $OUT/decisions_seed0/tiny-coder $OUT/decisions_seed1/tiny-coder \
  --weights 0.5 0.25 0.25 --out $S/tiny-coder > $S/average.log 2>&1
python -m experiments.train_zoo gate --model $S/tiny-coder --rows validation --prompts 160 --out $S/gate_val160_cpu.json > $S/gate_val.log 2>&1
python -m experiments.train_zoo gate --model $S/tiny-coder --rows eval --prompts 96 --out $S/gate_eval96_cpu.json > $S/gate_eval.log 2>&1
