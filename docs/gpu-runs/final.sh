#!/usr/bin/env bash
# The full run of f45 (gpu-check.sh run: tests, validations, sanitizers, benches, the peer, floors), then the
# 16-token tile forced at every M: validate (its JSON against the f44 call's) and both sanitizers on the smoke suite.
set -uo pipefail
bash scripts/gpu-check.sh run
export KIMIMOE_CACHE=/tmp/kimimoe-cubin NCCL_NVLS_ENABLE=0
KIMIMOE_FP4_TOKENS=16 timeout 100 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/validate_t16.json 2>&1 | tail -1 | tee -a $OUT/run.log
for tool in racecheck memcheck; do
  KIMIMOE_FP4_TOKENS=16 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "$tool smoke, 16-token tile at every M: exit $?" | tee -a $OUT/run.log; tail -1 /tmp/san.txt | tee -a $OUT/run.log
done
date -u | tee -a $OUT/run.log
