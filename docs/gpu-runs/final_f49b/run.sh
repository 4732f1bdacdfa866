#!/usr/bin/env bash
# f49b's call: binary kimimoe (f49b: the token pieces found once a tile for the 8-token mma.sync tile only, the
# 16-token tile back to finding each row's source every window; f49's call, docs/gpu-runs/final_f49/, found f49 1-2%
# faster at M = 1..24 and 1% slower at 25..36) against kimimoe_old (commit 202b670, f48's kernels). About 560 s: both
# modules compiled once in parallel, a third plain compile into a cache of its own and its cubin compared with the
# verbose compile's in detail (bytes, SASS; f49's call found them not the same file), an A/B at M = 1..2048 (three
# passes), validate with the 16- and 8-token tiles at every M on both binaries (the JSONs compared), both chains and
# no wgmma-fp4 by default, bench --profile and the Triton peer in the same call, memcheck and racecheck with the
# 8-token tile at every M, then the whole backend/cuda test binary in the time left.
source scripts/device-prelude.sh
KIMIMOE_CACHE=/tmp/kc_plain timeout 240 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/plain.txt 2>&1 &
plain=$!
PTXAS_KERNELS='kmoe_f4s_gemm[a-z0-9_]*' compile_all kimimoe kimimoe_old
wait_own $plain
echo "plain compile: exit $? (t=$(el) s)"
for f in /tmp/kc_plain/*.cubin; do
  g="/tmp/kc/$(basename "$f")"
  if [ ! -f "$g" ]; then echo "ptxas -v: no verbose entry under the plain key $(basename "$f")"; ls -la /tmp/kc; continue; fi
  echo "plain $(stat -c %s "$f") bytes, verbose $(stat -c %s "$g") bytes, $(cmp -l "$f" "$g" 2>/dev/null | wc -l) bytes differ"
  tail -c +33 "$f" > /tmp/plain.cubin; tail -c +33 "$g" > /tmp/verbose.cubin
  cuobjdump -sass /tmp/plain.cubin > /tmp/plain.sass 2>&1; cuobjdump -sass /tmp/verbose.cubin > /tmp/verbose.sass 2>&1
  echo "SASS: $(wc -l < /tmp/plain.sass) lines plain, $(wc -l < /tmp/verbose.sass) verbose, $(diff /tmp/plain.sass /tmp/verbose.sass | grep -c '^[<>]') lines differ"
  for c in plain verbose; do readelf -S -W /tmp/$c.cubin 2>/dev/null | awk '{print $2, $6}' | grep -v "^ *$" > /tmp/$c.sec; done
  diff /tmp/plain.sec /tmp/verbose.sec | head -10
  cmp -l "$f" "$g" | head -5
done
for p in 1 2 3; do
  for b in kimimoe_old kimimoe; do
    echo "== $b pass $p (t=$(el) s)"
    timeout 60 .gpu/$b bench --backend cuda --m 1,2,4,8,16,24,25,32,36,128,2048 --rounds 10 --copy-mb 256 > /tmp/ab.txt 2>&1 || tail -3 /tmp/ab.txt
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
for tool in memcheck racecheck; do
  KIMIMOE_FP4_TOKENS=8 timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool, smoke, 8-token tile at every M: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
done
left=$((585 - $(el)))
echo "== the whole backend/cuda test binary, ${left} s (t=$(el) s)"
(cd backend/cuda && timeout $left ../../.gpu/cuda.test -test.v -test.timeout $((left - 5))s 2>&1) > "$OUT/cuda_test.log"
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" "$OUT/cuda_test.log" | grep -a -v "^--- SKIP" | grep -a -v "^--- PASS" | head -20
echo "passed $(grep -a -c '^--- PASS' "$OUT/cuda_test.log"), skipped $(grep -a -c '^--- SKIP' "$OUT/cuda_test.log"), failed $(grep -a -c '^--- FAIL' "$OUT/cuda_test.log")"
grep -a "^--- SKIP" "$OUT/cuda_test.log" | head -5
echo "t=$(el) s"; date -u
