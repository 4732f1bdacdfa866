#!/usr/bin/env bash
# The call f49 still owes (docs/gpu-runs/experiments/f49_window_pieces_unmeasured.log), written after its session's
# calls were lost, for a session with about 8 minutes of device time. Here, first:
#   sed -n '/^== the diff$/,$p' docs/gpu-runs/experiments/f49_window_pieces_unmeasured.log | tail -n +2 > /tmp/f49.diff
#   git stash -u   (if needed);  go build -o /tmp/kimimoe_old ./cmd/kimimoe
#   git apply /tmp/f49.diff && bash scripts/gpu-check.sh build && cp /tmp/kimimoe_old .gpu/
# then the device tool: command `bash docs/gpu-runs/experiments/f49_next_call.sh`, carry [".gpu"], timeout_s 600.
# About 400 s: both modules compiled once (~100 s, in parallel), an A/B at M = 8..48 (three passes), the mma.sync
# loop's tests, validate with the 16- and 8-token tiles at every M on both binaries with the JSONs compared (the
# same bits expected), both chains by default against f48's JSONs, memcheck and racecheck with the 16-token tile.
source scripts/device-prelude.sh
# Beside them, the same module compiled without ptxas's -v into a cache of its own: since commit 9f17c6c the two
# compiles share a cache key, which is right only if -v leaves the cubin byte for byte as it is.
KIMIMOE_CACHE=/tmp/kc_plain timeout 240 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/plain.txt 2>&1 &
plain=$!
PTXAS_KERNELS='kmoe_f4s_gemm[a-z0-9_]*' compile_all kimimoe kimimoe_old
wait_own $plain
for f in /tmp/kc_plain/*.cubin; do
  cmp -s "$f" "/tmp/kc/$(basename "$f")" && echo "ptxas -v: the same cubin as without it ($(basename "$f" | cut -c1-8))" || echo "ptxas -v: a DIFFERENT cubin, or none, for $(basename "$f")"
done
for p in 1 2 3; do
  for b in kimimoe_old kimimoe; do
    echo "== $b pass $p (t=$(el) s)"
    timeout 60 .gpu/$b bench --backend cuda --m 8,16,24,25,28,32,36,48 --rounds 10 --copy-mb 256 > /tmp/ab.txt 2>&1 || tail -3 /tmp/ab.txt
    grep -a -E "^ +[0-9]" /tmp/ab.txt
  done
done
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 100 ../../.gpu/cuda.test -test.v -test.timeout 95s \
  -test.run 'TestConformance$|TestF4Path|TestF4SyncLoop|TestF4TileReady|TestF4sAddressable' 2>&1) > "$OUT/cuda_test.log"
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" "$OUT/cuda_test.log" | grep -a -v SKIP | head -12
for tile in 16 8; do
  for b in kimimoe kimimoe_old; do
    KIMIMOE_FP4_TOKENS=$tile timeout 60 .gpu/$b validate --backend cuda --suite all --require-situ --json /tmp/v${tile}_$b.json 2>&1 |
      grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/tile $tile, $b: /"
  done
  python3 - /tmp/v${tile}_kimimoe.json /tmp/v${tile}_kimimoe_old.json <<'PY'
import json, sys
a, b = ([(r["name"], r["status"], json.dumps(r.get("metrics"), sort_keys=True)) for r in json.load(open(p))["results"]] for p in sys.argv[1:])
print("new against old:", "identical, times aside" if a == b else f"{sum(x != y for x, y in zip(a, b))} cases differ")
PY
done
for chain in mxfp8 flashinfer; do
  timeout 60 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain $chain --json "$OUT/validate_situ_$chain.json" 2>&1 |
    grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/default $chain: /"
done
for tool in memcheck racecheck; do
  KIMIMOE_FP4_TOKENS=16 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool, smoke, 16-token tile at every M: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
done
echo "t=$(el) s"; date -u
