#!/usr/bin/env bash
# After the probe (run_wg.log: the 16 tokens on wgmma m64n16k16 at 145.4 us, on mma.sync 160.0): the path's own wgmma
# loop on the 16-token tile (KIMIMOE_FP4_SYNC=0: f4_k_loop, a barrier a step, six token stages) against the mma.sync
# loop at M = 16..36, with 2 steps in flight (its setting) and 4 (F4_AHEAD_T16=4, the probe's best feed), on the
# binary of this commit.
source scripts/device-prelude.sh
pids=()
for v in base ah4; do
  d=""; [ $v = ah4 ] && d="KMOE_F4_AHEAD_T16=4"
  KIMIMOE_NVRTC_DEFINES="$d" KIMIMOE_NVRTC_VERBOSE=1 timeout 260 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1 \
    --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$v.txt 2>&1 &
  pids+=($!)
done
i=0
for v in base ah4; do
  wait "${pids[$i]}"; rc=$?; i=$((i + 1))
  echo "compiled $v: exit $rc (t=$(el) s)"
  grep -a -A3 -E "entry function 'kmoe_f4s?_gemm[a-z0-9_]*t16'" /tmp/c_$v.txt | grep -a -o -E "entry function '[a-z0-9_]*'|[0-9]+ bytes spill stores|Used [0-9]+ registers" |
    sed -E "s/entry function '([a-z0-9_]*)'/\n  \1:/" | tr '\n' ' '; echo
done
ab_passes 2 16,25,28,32,36 sync= wgmma="KIMIMOE_FP4_SYNC=0;KIMIMOE_FP4_TOKENS=16" wgmma_ah4="KIMIMOE_FP4_SYNC=0;KIMIMOE_FP4_TOKENS=16;KIMIMOE_NVRTC_DEFINES=KMOE_F4_AHEAD_T16=4"
echo "t=$(el) s"; date -u
