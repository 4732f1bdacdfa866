#!/usr/bin/env bash
# f49's call, and the same-call run HEAD owed since f48: binary kimimoe (f49: the 16-token mma.sync loop's token
# pieces found once a tile, docs/gpu-runs/experiments/f49_window_pieces_unmeasured.log) against kimimoe_old (commit
# 202b670, f48's kernels), built here: the f48 code's binary as .gpu/kimimoe_old, then the diff in that log applied and
# `bash scripts/gpu-check.sh build`. About 480 s: both modules compiled once in
# parallel (ptxas's notes), a third plain compile into a cache of its own (ptxas -v must leave the cubin as it is:
# the cache key of 9f17c6c), an A/B at M = 1..8192 (three passes), validate with the 16- and 8-token tiles at every M
# on both binaries (the JSONs compared), both chains and no wgmma-fp4 by default, bench --profile and the Triton peer
# in the same call, the tests of the paths that search tiles and stage tokens, memcheck and racecheck.
source scripts/device-prelude.sh
KIMIMOE_CACHE=/tmp/kc_plain timeout 240 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/plain.txt 2>&1 &
plain=$!
PTXAS_KERNELS='kmoe_f4s_gemm[a-z0-9_]*' compile_all kimimoe kimimoe_old
wait_own $plain
echo "plain compile: exit $? (t=$(el) s)"
for f in /tmp/kc_plain/*; do
  cmp -s "$f" "/tmp/kc/$(basename "$f")" && echo "ptxas -v: the same file as without it ($(basename "$f"))" || echo "ptxas -v: a DIFFERENT file, or none, for $(basename "$f")"
done
for p in 1 2 3; do
  for b in kimimoe_old kimimoe; do
    echo "== $b pass $p (t=$(el) s)"
    timeout 60 .gpu/$b bench --backend cuda --m 1,8,16,24,25,28,32,36,48,128,512,2048,8192 --rounds 10 --copy-mb 256 > /tmp/ab.txt 2>&1 || tail -3 /tmp/ab.txt
    grep -a -E "^ +[0-9]" /tmp/ab.txt
  done
done
for tile in 16 8; do
  for b in kimimoe kimimoe_old; do
    KIMIMOE_FP4_TOKENS=$tile timeout 40 .gpu/$b validate --backend cuda --suite all --require-situ --json /tmp/v${tile}_$b.json 2>&1 |
      grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/tile $tile, $b: /"
  done
  python3 - /tmp/v${tile}_kimimoe.json /tmp/v${tile}_kimimoe_old.json <<'PY'
import json, sys
a, b = ([(r["name"], r["status"], json.dumps(r.get("metrics"), sort_keys=True)) for r in json.load(open(p))["results"]] for p in sys.argv[1:])
print("new against old:", "identical, times aside" if a == b else f"{sum(x != y for x, y in zip(a, b))} cases differ")
PY
done
for chain in mxfp8 flashinfer; do
  timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain $chain --json "$OUT/validate_situ_$chain.json" 2>&1 |
    grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/default $chain: /"
done
echo "no wgmma-fp4: $(KIMIMOE_FP4_MAX_M=0 timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ 2>&1 | grep -a -E 'validate:|FAIL|rror' | tail -2) (t=$(el) s)"
echo "== bench --profile, old then new (t=$(el) s)"
timeout 40 .gpu/kimimoe_old bench --backend cuda --rounds 20 --json "$OUT/bench_old.json" 2>&1 | grep -a -E "^ +[0-9]"
timeout 60 .gpu/kimimoe bench --backend cuda --profile --rounds 20 --json "$OUT/bench.json" 2>&1
echo "== peer (t=$(el) s)"
mkdir -p /tmp/peer
OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PEER_BUDGET_S=110 PYTHONUNBUFFERED=1 timeout 130 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
cp /tmp/peer/peer_triton.json "$OUT/" 2>/dev/null
.gpu/kimimoe compare --bench "$OUT/bench.json" --peers "$OUT/peer_triton.json" 2>&1
.gpu/kimimoe compare --bench "$OUT/bench_old.json" --peers "$OUT/peer_triton.json" 2>&1 | tail -13
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 80 ../../.gpu/cuda.test -test.v -test.timeout 75s \
  -test.run 'TestConformance|TestF4Path|TestF4SyncLoop|TestF4TileReady|TestF4sAddressable|TestF4LargeTiles|TestRouteXMany|TestF4ActKernel|TestWGMMAPath|TestF4FitN' 2>&1) > "$OUT/cuda_test.log"
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" "$OUT/cuda_test.log" | grep -a -v SKIP | head -20
for tool in memcheck racecheck; do
  KIMIMOE_FP4_TOKENS=16 timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool, smoke, 16-token tile at every M: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
done
echo "t=$(el) s"; date -u
