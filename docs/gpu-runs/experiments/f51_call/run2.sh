#!/usr/bin/env bash
# f51's second call: why the direct loop lost (run.log: 1.6x slower on the 16-token tile, 2.4x on the 8-token one).
# Suspect: each warp's 16-byte token loads touch eight rows' half lines (eight L1 wavefronts where ldmatrix takes
# four), and every warp's L1 prefetch another 32 lines a step. Variants (KIMIMOE_NVRTC_DEFINES): base (the prefetch
# now by one warp a step), pf0 (no prefetch), contig (timing only: the tokens read as if stored block by block, a
# block's rows side by side, so a warp's load is 512 contiguous bytes; outputs wrong), contig_pf0, contig_b3 (that
# at three CTAs an SM and 4 steps). The direct kernels' test on base, then three interleaved A/B passes.
source scripts/device-prelude.sh
declare -A DEF=([base]="" [pf0]="KMOE_F4SD_PF=0" [contig]="DIAG_F4SD_CONTIG=1" [contig_pf0]="DIAG_F4SD_CONTIG=1 KMOE_F4SD_PF=0"
  [contig_b3]="DIAG_F4SD_CONTIG=1 KMOE_F4SD_BLOCKS_T16=3 KMOE_F4SD_AHEAD_T16=4")
VARS="base pf0 contig contig_pf0 contig_b3"
pids=()
for v in $VARS; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_NVRTC_VERBOSE=1 timeout 260 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 \
    --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$v.txt 2>&1 &
  pids+=($!)
done
i=0
for v in $VARS; do
  wait "${pids[$i]}"; rc=$?; i=$((i + 1))
  echo "compiled $v: exit $rc (t=$(el) s)"
  grep -a -A3 -E "entry function 'kmoe_f4sd_gemm[a-z0-9_]*'" /tmp/c_$v.txt | grep -a -o -E "entry function '[a-z0-9_]*'|[0-9]+ bytes spill stores|Used [0-9]+ registers" |
    sed -E "s/entry function '([a-z0-9_]*)'/\n  \1:/" | tr '\n' ' '; echo
  if [ $rc != 0 ]; then grep -a -i -E "error" /tmp/c_$v.txt | head -8; tail -3 /tmp/c_$v.txt; [ $v = base ] && exit 1; fi
done
(cd backend/cuda && timeout 60 ../../.gpu/cuda.test -test.v -test.timeout 55s -test.run 'TestF4sDirect' 2>&1) > "$OUT/cuda_test2.log"
grep -a -E "^(--- |ok|FAIL|PASS)|rror|panic" "$OUT/cuda_test2.log" | head -5
ab_passes 3 1,8,16,25,32,36 windowed="KIMIMOE_F4S_DIRECT=0" direct16= direct8_16="KIMIMOE_F4S_DIRECT=8,16" \
  pf0="KIMIMOE_NVRTC_DEFINES=${DEF[pf0]};KIMIMOE_F4S_DIRECT=8,16" contig="KIMIMOE_NVRTC_DEFINES=${DEF[contig]};KIMIMOE_F4S_DIRECT=8,16" \
  contig_pf0="KIMIMOE_NVRTC_DEFINES=${DEF[contig_pf0]};KIMIMOE_F4S_DIRECT=8,16" contig_b3="KIMIMOE_NVRTC_DEFINES=${DEF[contig_b3]}"
echo "t=$(el) s"; date -u
