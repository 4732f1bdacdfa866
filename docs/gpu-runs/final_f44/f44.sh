#!/usr/bin/env bash
# f44 (the 16-token tile's token window at 512 k): checks, bench, A/B against HEAD's binary, and the peer, in one call.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd backend/cuda && timeout 120 ../../.gpu/cuda.test -test.v -test.run 'TestF4|TestKernel|TestABI|TestRouteXMany|TestLayerLifecycle' -test.timeout 110s 2>&1) > $OUT/f44_test.log
grep -E "^(--- |ok|FAIL|PASS)|rror|panic" $OUT/f44_test.log | grep -v 'PASS: TestF4\(Bits\|Arrange\|Available\|Placement\|TileTokens\|ActKernelRange\)' | head -30
for chain in mxfp8 flashinfer; do
  timeout 100 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain $chain --json $OUT/validate_situ_$chain.json 2>&1 | tail -1
done
KIMIMOE_FP4_TOKENS=16 timeout 100 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json $OUT/f44_validate_t16.json 2>&1 | tail -1
for tool in memcheck racecheck; do
  KIMIMOE_FP4_TOKENS=16 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "$tool smoke, 16-token tile at every M: exit $?"; tail -1 /tmp/san.txt
done
timeout 60 .gpu/kimimoe bench --backend cuda --profile --rounds 20 --json $OUT/bench.json 2>&1 | grep -E "^ +[0-9]|M=(1|32|128) "
for pass in 1 2; do
  for b in kimimoe_base kimimoe; do
    echo "pass $pass $b:"; timeout 40 .gpu/$b bench --backend cuda --m 16,25,28,32,33 --rounds 20 2>&1 | grep -E "^ +[0-9]"
  done
done
mkdir -p /tmp/peer
OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PYTHONUNBUFFERED=1 timeout 150 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
cp /tmp/peer/peer_triton.json $OUT/
.gpu/kimimoe compare --bench $OUT/bench.json --peers $OUT/peer_triton.json 2>&1
date -u
