#!/usr/bin/env bash
# The 16-token tile's k loop with its token groups a compile-time count, one instance a tile (KMOE_F4S_NG_SPLIT=1),
# against the run-time check a group a word pair; one binary, variants through KIMIMOE_NVRTC_DEFINES.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/exp_ng.log) 2>&1
date -u; T0=$(date +%s)
run() { echo "== $1 pass $2 (t=$(( $(date +%s) - T0 )) s)"; KIMIMOE_NVRTC_DEFINES="$3" timeout 100 .gpu/kimimoe bench --backend cuda --m 25,28,32,36 --rounds 20 2>&1 | grep -a -E "^ +[0-9]"; }
run base 1 ""
run split 1 "KMOE_F4S_NG_SPLIT=1"
KIMIMOE_NVRTC_DEFINES="KMOE_F4S_NG_SPLIT=1" KIMIMOE_FP4_TOKENS=16 timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/validate_t16_split.json 2>&1 | grep -a "validate:" | tail -1
run base 2 ""
run split 2 "KMOE_F4S_NG_SPLIT=1"
echo "t=$(( $(date +%s) - T0 )) s"; date -u
