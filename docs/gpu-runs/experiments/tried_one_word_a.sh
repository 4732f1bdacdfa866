#!/usr/bin/env bash
# The mma.sync loop widening one A word at a time (KMOE_F4S_WORDS_T*=1) against two, and the steps in
# flight / CTAs an SM it may afford; one binary, variants through KIMIMOE_NVRTC_DEFINES.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/exp_a4.log) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
T0=$(date +%s)
declare -A DEF=(
  [base]=""
  [w1]="KMOE_F4S_WORDS_T16=1"
  [w1_a4b3]="KMOE_F4S_WORDS_T16=1 KMOE_F4S_AHEAD_T16=4 KMOE_F4S_BLOCKS_T16=3"
  [a4b3]="KMOE_F4S_AHEAD_T16=4 KMOE_F4S_BLOCKS_T16=3"
  [t8w1_b4]="KMOE_F4S_WORDS_T8=1 KMOE_F4S_BLOCKS_T8=4"
  [t8w1]="KMOE_F4S_WORDS_T8=1"
)
MS16=16,25,28,32,36
MS8=1,2,4,8,16,24
run() { # name pass ms [verbose]
  echo "== $1 [${DEF[$1]}] pass $2 m=$3 (t=$(( $(date +%s) - T0 )) s)"
  KIMIMOE_NVRTC_DEFINES="${DEF[$1]}" KIMIMOE_NVRTC_VERBOSE=${4:-0} timeout 150 .gpu/kimimoe bench --backend cuda --m $3 --rounds 20 > /tmp/b.txt 2>&1
  grep -a -E "^ +[0-9]" /tmp/b.txt
  grep -a -o -E "Compiling entry function 'kmoe_f4s_[a-z0-9_]*' for 'sm_90a'|[0-9]+ bytes spill stores|Used [0-9]+ registers" /tmp/b.txt | paste -d' ' - - - | head -8
}
for v in base w1 w1_a4b3 a4b3; do run $v 1 $MS16 1; done
for v in t8w1_b4 t8w1; do run $v 1 $MS8 1; done
run base 1 $MS8
for v in base w1 w1_a4b3 a4b3; do run $v 2 $MS16; done
for v in base t8w1_b4 t8w1; do run $v 2 $MS8; done
for v in w1 w1_a4b3; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_FP4_TOKENS=16 timeout 60 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/validate_t16_$v.json 2>&1 | grep -a "validate:" | tail -1
done
for v in t8w1 t8w1_b4; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" timeout 60 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/validate_$v.json 2>&1 | grep -a "validate:" | tail -1
done
echo "t=$(( $(date +%s) - T0 )) s"; date -u
