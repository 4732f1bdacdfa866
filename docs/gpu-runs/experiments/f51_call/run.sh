#!/usr/bin/env bash
# f51's first call: the small tiles' mma.sync loop without token windows (f4s_k_loop_direct: each lane loads its B
# registers from token rows stored with each 32-block transposed as 4 x 4 BF16 pairs, f4sDirectPos). One binary;
# the loop chosen at run time (KIMIMOE_F4S_DIRECT: 0 the windowed loop, 16 the default, 8,16 both tiles), the
# direct kernels' settings through KIMIMOE_NVRTC_DEFINES (pf0: no L1 prefetch; pf4: 4 steps ahead; b3a4: the
# 16-token direct tile at three CTAs an SM and 4 steps in flight). Compiles (ptxas notes), the bitwise tests, validate
# with each tile forced on both loops (JSONs compared), sanitizers, then three interleaved A/B passes.
source scripts/device-prelude.sh
declare -A DEF=([base]="" [pf0]="KMOE_F4SD_PF=0" [pf4]="KMOE_F4SD_PF=4" [b3a4]="KMOE_F4SD_BLOCKS_T16=3 KMOE_F4SD_AHEAD_T16=4")
pids=()
for v in base pf0 pf4 b3a4; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_NVRTC_VERBOSE=1 timeout 260 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 \
    --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$v.txt 2>&1 &
  pids+=($!)
done
i=0
for v in base pf0 pf4 b3a4; do
  wait "${pids[$i]}"; rc=$?; i=$((i + 1))
  echo "compiled $v: exit $rc (t=$(el) s)"
  grep -a -A3 -E "entry function 'kmoe_f4sd?_gemm[a-z0-9_]*'" /tmp/c_$v.txt | grep -a -o -E "entry function '[a-z0-9_]*'|[0-9]+ bytes spill stores|Used [0-9]+ registers" |
    sed -E "s/entry function '([a-z0-9_]*)'/\n  \1:/" | tr '\n' ' '; echo
  if [ $rc != 0 ]; then grep -a -i -E "error" /tmp/c_$v.txt | head -8; tail -3 /tmp/c_$v.txt; [ $v = base ] && exit 1; fi
done
echo "== tests (t=$(el) s)"
(cd backend/cuda && timeout 90 ../../.gpu/cuda.test -test.v -test.timeout 85s -test.run 'TestF4sDirect|TestF4SyncLoop|TestF4Path|TestF4TileReady|TestConformance' 2>&1) > "$OUT/cuda_test.log"
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic|bitwise" "$OUT/cuda_test.log" | grep -a -v SKIP | head -30
for tile in 16 8; do
  for d in 0 "8,16"; do
    KIMIMOE_F4S_DIRECT=$d KIMIMOE_FP4_TOKENS=$tile timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json /tmp/v${tile}_$d.json 2>&1 |
      grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/tile $tile, direct $d: /"
  done
  echo "tile $tile, direct against windowed: $(same_validate /tmp/v${tile}_8,16.json /tmp/v${tile}_0.json)"
done
for chain in mxfp8 flashinfer; do
  timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain $chain --json "$OUT/validate_situ_$chain.json" 2>&1 |
    grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/default $chain: /"
done
for tile in 16 8; do
  for tool in memcheck racecheck; do
    KIMIMOE_F4S_DIRECT=8,16 KIMIMOE_FP4_TOKENS=$tile timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
    echo "compute-sanitizer $tool, smoke, direct $tile-token tile at every M: exit $? (t=$(el) s)"; tail -1 /tmp/san.txt
  done
done
ab_passes 3 1,8,16,24,25,28,32,36 windowed="KIMIMOE_F4S_DIRECT=0" direct16= direct8_16="KIMIMOE_F4S_DIRECT=8,16" \
  pf0="KIMIMOE_NVRTC_DEFINES=${DEF[pf0]};KIMIMOE_F4S_DIRECT=8,16" pf4="KIMIMOE_NVRTC_DEFINES=${DEF[pf4]};KIMIMOE_F4S_DIRECT=8,16" \
  b3a4="KIMIMOE_NVRTC_DEFINES=${DEF[b3a4]}"
echo "t=$(el) s"; date -u
