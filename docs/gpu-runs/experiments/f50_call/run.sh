#!/usr/bin/env bash
# f50's call: the 16-token mma.sync tile's token windows staged by bulk copies (one cp.async.bulk a token row onto
# the buffer's mbarrier, issued by warp 0) instead of every thread's 16-byte cp.async pieces. One binary, three
# kernel variants through KIMIMOE_NVRTC_DEFINES: base (KMOE_F4S_BULK_T16=0: the f49b code), bulk16 (the default
# of f50.diff, beside this script, applied to commit 85807f4), bulk8 (the 8-token tile too). About 480 s: the three modules compiled once in parallel (ptxas's
# notes), an A/B at M = 1..36 (three passes), validate with each small tile forced at every M on each variant (the
# JSONs compared with base's), both chains by default, the mma.sync loop's tests, memcheck and racecheck, and the
# bench with its profile and the Triton peer in the same call.
source scripts/device-prelude.sh
declare -A DEF=([base]="KMOE_F4S_BULK_T16=0" [bulk16]="" [bulk8]="KMOE_F4S_BULK_T8=1")
VARS="base bulk16 bulk8"
pids=()
for v in $VARS; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_NVRTC_VERBOSE=1 timeout 240 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 \
    --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$v.txt 2>&1 &
  pids+=($!)
done
i=0
for v in $VARS; do
  wait "${pids[$i]}"; rc=$?; i=$((i + 1))
  echo "compiled $v: exit $rc (t=$(el) s)"
  grep -a -A3 -E "entry function 'kmoe_f4s_gemm[a-z0-9_]*'" /tmp/c_$v.txt | grep -a -o -E "entry function '[a-z0-9_]*'|[0-9]+ bytes spill stores|Used [0-9]+ registers" |
    sed -E "s/entry function '([a-z0-9_]*)'/\n  \1:/" | tr '\n' ' '; echo
  if [ $rc != 0 ]; then grep -a -i -E "error|rror" /tmp/c_$v.txt | head -8; tail -3 /tmp/c_$v.txt; [ $v = bulk16 ] && exit 1; fi
done
for p in 1 2 3; do
  for v in $VARS; do
    echo "== $v pass $p (t=$(el) s)"
    KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" timeout 60 .gpu/kimimoe bench --backend cuda --m 1,8,16,25,28,32,36 --rounds 10 --copy-mb 256 > /tmp/ab.txt 2>&1 || tail -3 /tmp/ab.txt
    grep -a -E "^ +[0-9]" /tmp/ab.txt
  done
done
for tile in 16 8; do
  for v in $VARS; do
    KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_FP4_TOKENS=$tile timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json /tmp/v${tile}_$v.json 2>&1 |
      grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/tile $tile, $v: /"
  done
  for v in bulk16 bulk8; do
    python3 - /tmp/v${tile}_$v.json /tmp/v${tile}_base.json <<'PY' | sed "s/^/tile $tile, $v against base: /"
import json, sys
a, b = ([(r["name"], r["status"], json.dumps(r.get("metrics"), sort_keys=True)) for r in json.load(open(p))["results"]] for p in sys.argv[1:])
print("identical, times aside" if a == b else f"{sum(x != y for x, y in zip(a, b))} cases differ")
PY
  done
done
for chain in mxfp8 flashinfer; do
  timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain $chain --json "$OUT/validate_situ_$chain.json" 2>&1 |
    grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/default $chain: /"
done
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 60 ../../.gpu/cuda.test -test.v -test.timeout 55s -test.run 'TestConformance|TestF4SyncLoop|TestF4Path|TestF4TileReady' 2>&1) > "$OUT/cuda_test.log"
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" "$OUT/cuda_test.log" | grep -a -v SKIP | head -12
for tool in memcheck racecheck; do
  KIMIMOE_FP4_TOKENS=16 timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool, smoke, bulk16, 16-token tile at every M: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
done
KIMIMOE_NVRTC_DEFINES="${DEF[bulk8]}" KIMIMOE_FP4_TOKENS=8 timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
echo "compute-sanitizer memcheck, smoke, bulk8, 8-token tile at every M: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
echo "== bench --profile (t=$(el) s)"
timeout 40 .gpu/kimimoe bench --backend cuda --profile --rounds 20 --json "$OUT/bench.json" 2>&1
echo "== peer (t=$(el) s)"
mkdir -p /tmp/peer
OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PEER_BUDGET_S=100 PYTHONUNBUFFERED=1 timeout 115 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
cp /tmp/peer/peer_triton.json "$OUT/" 2>/dev/null
.gpu/kimimoe compare --bench "$OUT/bench.json" --peers "$OUT/peer_triton.json" 2>&1
echo "t=$(el) s"; date -u
