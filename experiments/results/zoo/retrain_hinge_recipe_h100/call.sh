# The whole recipe of experiments/retrain_zoo.sh, stage 6 with the copy-margin hinge, from scratch: three calls back
# to back on one newly started H100 (each within the machine's idle window of the one before; /tmp is kept between
# them), then the product's gate on the installed target's 96 evaluation prompts in the third call. Each call's
# seconds (runs.json's call_wall_s) are bash's $SECONDS around retrain_zoo.sh.
export HYBRIDSD_COMMIT=55730c8
s=$SECONDS; bash experiments/retrain_zoo.sh 1,2 $OUT > $OUT/retrain_12.log 2>&1; echo "call_wall_s=$((SECONDS-s))"
gzip $OUT/retrain_12.log
s=$SECONDS; bash experiments/retrain_zoo.sh 3,4,5 $OUT > $OUT/retrain_345.log 2>&1; echo "call_wall_s=$((SECONDS-s))"
gzip $OUT/retrain_345.log
s=$SECONDS; bash experiments/retrain_zoo.sh 6,7,8 $OUT > $OUT/retrain_678.log 2>&1; echo "call_wall_s=$((SECONDS-s))"
gzip $OUT/retrain_678.log
source experiments/device_env.sh && python -m experiments.train_zoo gate --model /tmp/zoo_stage8/tiny-coder \
  --rows eval --prompts 96 --out $OUT/gate_eval96_h100.json && gzip -9 $OUT/gate_eval96_h100.json
