#!/usr/bin/env bash
# f47's second call: the persistent grid without the L2 prefetch (binary kimimoe, cuda.test) against the code
# before f47 (kimimoe_old, cuda_old.test: commit 3b8f587), both compiled first, in parallel; an A/B of three arms at
# M = 1024..8192 (OLD; NEW, persistent; NEW with KIMIMOE_FP4_PERSIST=0, the plain grid), three passes; then the full
# record on the faster binary: validate (both chains, the 128- and 256-token tiles forced), the bench with its profile
# and the Triton peer in the same call, the no-wgmma-fp4 bench, the backend/cuda tests, sanitizers on the smoke suite.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/run.log) 2>&1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem --format=csv,noheader
for b in kimimoe kimimoe_old; do
  KIMIMOE_NVRTC_VERBOSE=1 timeout 250 .gpu/$b bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$b.txt 2>&1 &
  PIDS="${PIDS:-} $!"
done
wait $PIDS; echo "compiled (t=$(el) s)"
for b in kimimoe kimimoe_old; do
  echo "$b: $(grep -a -A3 -E "entry function 'kmoe_f4_gemm(1_act|2)_t(128|256)'" /tmp/c_$b.txt | grep -a -o -E "kmoe_f4_gemm[0-9a-z_]*t(128|256)|[0-9]+ bytes spill stores|Used [0-9]+ registers" | tr '\n' ' ')"
  grep -a -i "error" /tmp/c_$b.txt | head -5
done
declare -A BIN=( [OLD]=kimimoe_old [NEW]=kimimoe [PLAIN]=kimimoe )
declare -A ENVS=( [OLD]="" [NEW]="" [PLAIN]="KIMIMOE_FP4_PERSIST=0" )
declare -A SUM=( [OLD]=0 [NEW]=0 [PLAIN]=0 )
for p in 1 2 3; do
  for v in OLD NEW PLAIN; do
    echo "== $v [${BIN[$v]} ${ENVS[$v]}] pass $p (t=$(el) s)"
    env ${ENVS[$v]} timeout 100 .gpu/${BIN[$v]} bench --backend cuda --m 1024,2048,4096,8192 --rounds 10 --copy-mb 256 > /tmp/b.txt 2>&1
    grep -a -E "^ +[0-9]" /tmp/b.txt
    [ $p -gt 1 ] && SUM[$v]=$(grep -a -E "^ +(2048|4096|8192) " /tmp/b.txt | awk -v s0=${SUM[$v]} '{s += $4} END {printf "%.4f", s0 + s}')
  done
done
W=NEW; awk -v a=${SUM[OLD]} -v b=${SUM[NEW]} 'BEGIN {exit !(a < b)}' && W=OLD
K=.gpu/${BIN[$W]}; T=.gpu/cuda.test; [ $W = OLD ] && T=.gpu/cuda_old.test
echo "passes 2-3, sums of M = 2048, 4096, 8192: OLD ${SUM[OLD]} NEW ${SUM[NEW]} PLAIN ${SUM[PLAIN]}; the record on $W ($K, $T) (t=$(el) s)"
for chain in mxfp8 flashinfer; do
  echo "validate $chain: $(timeout 90 $K validate --backend cuda --suite all --require-situ --chain $chain --json $OUT/validate_situ_$chain.json 2>&1 | grep -a -E 'validate:|FAIL|rror' | tail -3) (t=$(el) s)"
done
for tile in 128 256; do
  echo "validate tokens=$tile: $(KIMIMOE_FP4_TOKENS=$tile timeout 90 $K validate --backend cuda --suite all --require-situ --json /tmp/validate_t$tile.json 2>&1 | grep -a -E 'validate:|FAIL|rror' | tail -3) (t=$(el) s)"
done
echo "== bench --profile, $W (t=$(el) s)"
timeout 120 $K bench --backend cuda --profile --rounds 20 --json $OUT/bench.json 2>&1
echo "== peer (t=$(el) s)"
mkdir -p /tmp/peer
OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PYTHONUNBUFFERED=1 timeout 200 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
cp /tmp/peer/peer_triton.json $OUT/ 2>/dev/null
grep -a -A14 "triton_ms" /tmp/peer/stdout.txt
$K compare --bench $OUT/bench.json --peers $OUT/peer_triton.json 2>&1
echo "== bench --fp4-max-m 0 (t=$(el) s)"
timeout 120 $K bench --backend cuda --rounds 10 --fp4-max-m 0 --json $OUT/bench_nofp4.json 2>&1 | grep -a -E "^ +[0-9]"
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 150 ../../$T -test.v -test.timeout 145s 2>&1) > $OUT/cuda_test.log
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" $OUT/cuda_test.log | grep -a -v SKIP | grep -a -v -E "^--- PASS: Test(ABI|Kernel|Max|Cubin|Parse|Device|Decode|Home|Plan|Unique|Rank|Check|Group|CompileOptions|Wrong|Path|WG|F4Tile|F4Sync|F4Act|F4Bits|F4Arrange|F4Avail|XPast)" | head -40
for v in "" 128; do
  for tool in memcheck racecheck; do
    [ $(el) -gt 560 ] && { echo "skipped $tool tokens=$v (t=$(el) s)"; continue; }
    KIMIMOE_FP4_TOKENS=${v:-0} timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $K validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
    echo "compute-sanitizer $tool smoke tokens=${v:-default}: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
  done
done
echo "t=$(el) s"; date -u
