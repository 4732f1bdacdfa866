#!/usr/bin/env bash
# f48's call: every GEMM CTA's tile search by a warp (warp_find_tile: one round of loads and a vote) instead of thread
# 0's binary search (five dependent loads at 28 experts); binary kimimoe (this commit) against kimimoe_old (3b8f587,
# the same kernels as 563ba6a). Compiles both in parallel, the smoke suite (with many_local_experts_e70, new), an A/B
# at M = 1..8192 (three passes), validate on both chains, the tests whose kernels search tiles, sanitizers, and, if
# the device time allows, the bench with its profile and the Triton peer in the same call.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/run.log) 2>&1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem --format=csv,noheader
PIDS=""
for b in kimimoe kimimoe_old; do
  timeout 200 .gpu/$b validate --backend cuda --suite smoke --runs 1 > /tmp/s_$b.txt 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS; echo "compiled (t=$(el) s)"
for b in kimimoe kimimoe_old; do echo "$b smoke: $(grep -a -E 'validate:' /tmp/s_$b.txt | tail -1)"; grep -a -E 'FAIL|rror|e70' /tmp/s_$b.txt | head -5; done
K=.gpu/kimimoe
MS=1,8,32,128,512,2048,8192
for p in 1 2 3; do
  for b in kimimoe_old kimimoe; do
    echo "== $b pass $p (t=$(el) s)"
    timeout 100 .gpu/$b bench --backend cuda --m $MS --rounds 10 --copy-mb 256 2>&1 | grep -a -E "^ +[0-9]"
  done
done
for chain in mxfp8 flashinfer; do
  echo "validate $chain: $(timeout 90 $K validate --backend cuda --suite all --require-situ --chain $chain --json $OUT/validate_situ_$chain.json 2>&1 | grep -a -E 'validate:|FAIL|rror' | tail -3) (t=$(el) s)"
done
echo "validate no wgmma-fp4: $(KIMIMOE_FP4_MAX_M=0 timeout 90 $K validate --backend cuda --suite all --require-situ 2>&1 | grep -a -E 'validate:|FAIL|rror' | tail -3) (t=$(el) s)"
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 120 ../../.gpu/cuda.test -test.v -test.timeout 115s -test.run 'TestConformance|TestF4Path|TestF4TileReady|TestF4LargeTiles|TestRouteXMany|TestF4ActKernel|TestF4SyncLoop|TestWGMMAPath|TestF4FitN' 2>&1) > $OUT/cuda_test.log
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" $OUT/cuda_test.log | grep -a -v SKIP | head -30
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $K validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool smoke: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
done
if [ $(el) -lt 240 ]; then
  echo "== bench --profile (t=$(el) s)"
  timeout 60 $K bench --backend cuda --profile --rounds 20 --json $OUT/bench.json 2>&1
  echo "== peer (t=$(el) s)"
  mkdir -p /tmp/peer
  OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PYTHONUNBUFFERED=1 timeout 120 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
  cp /tmp/peer/peer_triton.json $OUT/ 2>/dev/null
  $K compare --bench $OUT/bench.json --peers $OUT/peer_triton.json 2>&1
fi
echo "t=$(el) s"; date -u
