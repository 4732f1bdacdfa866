#!/usr/bin/env bash
# f46's one call: the 128-token tile with A double-buffered above M=1024 and the 256-token tile from M=4096
# (binaries kimimoe, cuda.test); kimimoe_a / cuda_a.test are the same without the 256-token tile, run only if
# the first does not compile or fails the smoke suite. Compiles first (in parallel), then validations (default
# and each large tile forced at every M), the bench with its profile and the Triton peer in the same call, the
# tiles forced at M = 2048, 4096, 8192, the backend/cuda tests, and memcheck and racecheck on the smoke suite.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kimimoe-cubin NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/run.log) 2>&1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem --format=csv,noheader; git log --oneline -1 2>/dev/null
timeout 250 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/cB.txt 2>&1 & pB=$!
timeout 250 .gpu/kimimoe_a validate --backend cuda --suite smoke --runs 1 > /tmp/cA.txt 2>&1 & pA=$!
KIMIMOE_NVRTC_VERBOSE=1 timeout 250 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/cV.txt 2>&1 & pV=$!
(cd backend/cuda && timeout 250 ../../.gpu/cuda.test -test.run TestCompileBothBodies > /tmp/tB.txt 2>&1) & pT=$!
wait $pB; rcB=$?
echo "B (256-token tile) smoke: rc $rcB: $(grep -a 'validate:' /tmp/cB.txt | tail -1) (t=$(el) s)"
grep -a -i -E "error" /tmp/cB.txt | head -12
K=.gpu/kimimoe; T=.gpu/cuda.test; TILES="128 256"
if [ $rcB -ne 0 ] || ! grep -a -q "validate:.*passed" /tmp/cB.txt; then
  wait $pA; echo "A (no 256-token tile) smoke: rc $?: $(grep -a 'validate:' /tmp/cA.txt | tail -1) (t=$(el) s)"
  K=.gpu/kimimoe_a; T=.gpu/cuda_a.test; TILES="128"
fi
echo "running with $K"
for chain in mxfp8 flashinfer; do
  echo "validate $chain: $(timeout 90 $K validate --backend cuda --suite all --require-situ --chain $chain --json $OUT/validate_situ_$chain.json 2>&1 | grep -a 'validate:' | tail -1) (t=$(el) s)"
done
for tile in $TILES; do
  echo "validate tokens=$tile: $(KIMIMOE_FP4_TOKENS=$tile timeout 90 $K validate --backend cuda --suite all --require-situ --json $OUT/validate_t$tile.json 2>&1 | grep -a 'validate:' | tail -1) (t=$(el) s)"
done
echo "== bench --profile (t=$(el) s)"
timeout 120 $K bench --backend cuda --profile --rounds 20 --json $OUT/bench.json 2>&1
echo "== peer (t=$(el) s)"
mkdir -p /tmp/peer
OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PYTHONUNBUFFERED=1 timeout 200 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
cp /tmp/peer/peer_triton.json $OUT/ 2>/dev/null
grep -a -A14 "triton_ms" /tmp/peer/stdout.txt
$K compare --bench $OUT/bench.json --peers $OUT/peer_triton.json 2>&1
for tok in 64 $TILES; do
  echo "== tokens=$tok (t=$(el) s)"
  KIMIMOE_FP4_TOKENS=$tok timeout 60 $K bench --backend cuda --m 2048,4096,8192 --rounds 10 --copy-mb 256 2>&1 | grep -a -E "^ +[0-9]"
done
wait $pV $pT
grep -a -A3 -E "entry function 'kmoe_f4_gemm(1_act|2)_t(64|128|256)'" /tmp/cV.txt | grep -a -o -E "kmoe_f4_gemm[0-9a-z_]*t(64|128|256)|[0-9]+ bytes spill stores|Used [0-9]+ registers" | tr '\n' ' '; echo
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 150 ../../$T -test.v -test.timeout 145s 2>&1) > $OUT/cuda_test.log
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" $OUT/cuda_test.log | grep -a -v SKIP | head -60
big=${TILES##* }
for v in "" $big; do
  for tool in memcheck racecheck; do
    [ $(el) -gt 540 ] && { echo "skipped $tool tokens=$v (t=$(el) s)"; continue; }
    KIMIMOE_FP4_TOKENS=${v:-0} timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $K validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
    echo "compute-sanitizer $tool smoke tokens=${v:-default}: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
  done
done
echo "t=$(el) s"; date -u
