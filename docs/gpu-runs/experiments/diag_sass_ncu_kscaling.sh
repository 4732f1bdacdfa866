#!/usr/bin/env bash
# Session of 2026-12-01 23:15 UTC on, call 1: SASS of the mma.sync 16/8-token loops and the 128-token wgmma loop,
# ptxas register counts, and GEMM1/GEMM2 time against K on the 128-token tile (fill/drain share of a CTA).
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/diag1.log) 2>&1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem --format=csv,noheader
KIMIMOE_NVRTC_VERBOSE=1 timeout 250 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/cV.txt 2>&1
echo "compiled rc $? (t=$(el) s)"
grep -a -A3 -E "entry function 'kmoe_f4s?_gemm(1_act|2)_t(8|16|48|128)'" /tmp/cV.txt | grep -a -o -E "kmoe_f4s?_gemm[0-9a-z_]*t(8|16|48|128)|[0-9]+ bytes spill stores|Used [0-9]+ registers" | tr '\n' ' '; echo
ls -la /tmp/kc
mkdir -p /tmp/sass
for f in /tmp/kc/*.cubin; do
  tail -c +33 "$f" > /tmp/sass/$(basename $f)
  cuobjdump -sass /tmp/sass/$(basename $f) > /tmp/sass/$(basename $f).sass 2>/dev/null
  grep -a -c "Function :" /tmp/sass/$(basename $f).sass
done
for fn in kmoe_f4s_gemm1_act_t16 kmoe_f4s_gemm2_t16 kmoe_f4s_gemm1_act_t8 kmoe_f4_gemm1_act_t128; do
  cat /tmp/sass/*.sass | awk -v fn="$fn" '/Function :/ {on = ($3 == fn)} on' > $OUT/sass_$fn.txt
  echo "$fn: $(wc -l < $OUT/sass_$fn.txt) lines"
done
cat /tmp/sass/*.sass | grep -a -E "Function :" | head -80
echo "== K scaling, 128-token tile, M=2048 (t=$(el) s)"
for k in 1792 3584 7168; do
  echo "-- K=$k N=3072 (t=$(el) s)"
  KIMIMOE_FP4_TOKENS=128 timeout 150 .gpu/kimimoe bench --backend cuda --k $k --n 3072 --m 2048 --profile --rounds 5 --copy-mb 256 2>&1 | grep -a -v -E "^\s*$" | tail -14
done
echo "== ncu source counters, GEMM1 16-token tile at M=32 (t=$(el) s)"
timeout 150 ncu --clock-control none --kernel-name kmoe_f4s_gemm1_act_t16 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --page source --csv --print-source sass .gpu/kimimoe bench --backend cuda --m 32 --rounds 1 --graph=false --copy-mb 64 > $OUT/ncu_src_t16.csv 2>/tmp/ncu_err.txt
echo "ncu rc $?: $(wc -c < $OUT/ncu_src_t16.csv) bytes"; tail -3 /tmp/ncu_err.txt; head -c 600 $OUT/ncu_src_t16.csv; echo
gzip -f $OUT/ncu_src_t16.csv
echo "t=$(el) s"; date -u
