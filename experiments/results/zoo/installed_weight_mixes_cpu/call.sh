# Mixes of the installed target's weights, without training. Stage 8's weight of the installed recipe, on the line
# through the base target B (hybridsd/models/tiny-coder at aae0484, stage 8's first parent) and the installed
# target I = 0.25 x B + 0.75 x R (R: stage 7's product, not kept):
# M(t) = (1 - t) x B + t x I for t = 1/3, 2/3, 4/3 (R's weights up to bf16 rounding: the average 0.0 x B + 1.0 x R)
# and 5/3 (past R; weight_average --extrapolate), i.e. stage 8 with R's weight 0.25, 0.5, 1.0 and 1.25 instead of
# 0.75. Each gated on the 160 validation prompts (the selector), then the validation's best and the installed target
# on the 96 evaluation prompts, and the best on all 274 evaluation edits the gate admits (the installed target's is
# margin_recipe_h200/seed0/gate_eval274_cpu.json.gz). CPU, fp32, 2 cores; the commands as they ran:
#   bash experiments/results/zoo/installed_weight_mixes_cpu/call.sh OUT   # OUT: where the models and records go
cd "$(git rev-parse --show-toplevel)" || exit 1
export PYTHONPATH=$PWD HYBRIDSD_DATA=${HYBRIDSD_DATA:-../shared/data}
OUT=${1:?usage: call.sh OUT}; B=$OUT/base/tiny-coder
mkdir -p $B
for f in $(git ls-tree --name-only aae0484 hybridsd/models/tiny-coder/); do  # the base target's files (no heads)
  [ "$(git cat-file -t aae0484:$f)" = blob ] && git show aae0484:$f > $B/$(basename $f)
done
(cd $B && sha256sum -c --quiet "$OLDPWD/experiments/results/zoo/margin_recipe_h200/base_sha256.txt") || exit 1
gate() {  # gate MODEL ROWS PROMPTS OUT
  python -m experiments.train_zoo gate --model $1 --rows $2 --prompts $3 --out $4 > $4.log 2>&1
}
gate hybridsd/models/tiny-coder validation 160 $OUT/installed_gate_val160_cpu.json
for wt in "0.6666666666666666 t0.667" "1.3333333333333333 t1.333" "0.3333333333333333 t0.333" \
          "1.6666666666666667 t1.667"; do
  set -- $wt  # t (I's weight; past 1: --extrapolate) and the folder
  python -m experiments.weight_average $B hybridsd/models/tiny-coder --weight $1 \
    $(python -c "print('--extrapolate' if $1 > 1 else '')") --out $OUT/$2/tiny-coder
  gate $OUT/$2/tiny-coder validation 160 $OUT/$2/gate_val160_cpu.json
done
gate hybridsd/models/tiny-coder eval 96 $OUT/installed_gate_eval96_cpu.json
gate $OUT/t0.667/tiny-coder eval 96 $OUT/t0.667/gate_eval96_cpu.json
gate $OUT/t0.667/tiny-coder eval 274 $OUT/t0.667/gate_eval274_cpu.json
# A soup of the installed target and the weight-average target (hybridsd/models/tiny-coder at a0b3f75, the recipe
# without the hinge; both average the same base target): 0.5 x each, gated on the 160 validation prompts.
A=$OUT/weight_average_target/tiny-coder
mkdir -p $A
for f in $(git ls-tree --name-only a0b3f75 hybridsd/models/tiny-coder/); do
  [ "$(git cat-file -t a0b3f75:$f)" = blob ] && git show a0b3f75:$f > $A/$(basename $f)
done
python -m experiments.weight_average hybridsd/models/tiny-coder $A --weight 0.5 --out $OUT/soup_h50/tiny-coder
gate $OUT/soup_h50/tiny-coder validation 160 $OUT/soup_h50/gate_val160_cpu.json
