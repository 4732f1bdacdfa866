#!/usr/bin/env bash
# GEMM2's mma.sync instances with their own steps in flight and CTAs an SM (KMOE_F4S_G2_*), GEMM1's as before;
# one binary, variants through KIMIMOE_NVRTC_DEFINES.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/exp_g2.log) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
T0=$(date +%s)
declare -A DEF=(
  [base]=""
  [g2t16_a4b3]="KMOE_F4S_G2_AHEAD_T16=4 KMOE_F4S_G2_BLOCKS_T16=3"
  [g2t16_a8b2]="KMOE_F4S_G2_AHEAD_T16=8 KMOE_F4S_G2_BLOCKS_T16=2"
  [g2t8_a8b2]="KMOE_F4S_G2_AHEAD_T8=8 KMOE_F4S_G2_BLOCKS_T8=2"
)
MS16=25,28,32,36
MS8=2,4,8,16,24
run() { # name pass ms [verbose]
  echo "== $1 [${DEF[$1]}] pass $2 m=$3 (t=$(( $(date +%s) - T0 )) s)"
  KIMIMOE_NVRTC_DEFINES="${DEF[$1]}" KIMIMOE_NVRTC_VERBOSE=${4:-0} timeout 150 .gpu/kimimoe bench --backend cuda --m $3 --rounds 20 > /tmp/b.txt 2>&1
  grep -a -E "^ +[0-9]" /tmp/b.txt
  grep -a -A3 "entry function 'kmoe_f4s_gemm2_t" /tmp/b.txt | grep -a -o -E "kmoe_f4s_gemm2_t[0-9a-z_]*|[0-9]+ bytes spill stores|Used [0-9]+ registers" | tr '\n' ' '; echo
}
run base 1 $MS16,$MS8 1
for v in g2t16_a4b3 g2t16_a8b2; do run $v 1 $MS16 1; done
run g2t8_a8b2 1 $MS8 1
for v in base g2t16_a4b3 g2t16_a8b2; do run $v 2 $MS16; done
for v in base g2t8_a8b2; do run $v 2 $MS8; done
for v in g2t16_a4b3 g2t16_a8b2; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_FP4_TOKENS=16 timeout 60 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/validate_t16_$v.json 2>&1 | grep -a "validate:" | tail -1
done
KIMIMOE_NVRTC_DEFINES="${DEF[g2t8_a8b2]}" timeout 60 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/validate_g2t8_a8b2.json 2>&1 | grep -a "validate:" | tail -1
echo "t=$(( $(date +%s) - T0 )) s"; date -u
