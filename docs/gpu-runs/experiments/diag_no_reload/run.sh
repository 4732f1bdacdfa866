#!/usr/bin/env bash
# The compute alone of the f49b code's GEMM loops: a timing-only variant (KMOE_DIAG_NO_RELOAD, the diff beside this
# script, not landed; outputs wrong) in which every weight and scale load after each thread's first steps is
# replaced by the same registers made opaque, so the loops widen, multiply, stage tokens and meet at barriers
# as always but read no more weights. Against the code as it is, two interleaved passes, M = 1..512.
source scripts/device-prelude.sh
declare -A DEF=([base]="" [noreload]="KMOE_DIAG_NO_RELOAD=1")
pids=()
for v in base noreload; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" timeout 150 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$v.txt 2>&1 &
  pids+=($!)
done
wait_own "${pids[@]}"; echo "compiled: exit $? (t=$(el) s)"
for p in 1 2; do
  for v in base noreload; do
    echo "== $v pass $p (t=$(el) s)"
    KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" timeout 30 .gpu/kimimoe bench --backend cuda --m 1,8,16,32,128,256,512 --rounds 10 --copy-mb 256 --profile 2>&1 | grep -a -E "^ +[0-9]|^  M="
  done
done
echo "t=$(el) s"; date -u
