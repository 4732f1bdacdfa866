#!/usr/bin/env bash
# ncu (--clock-control none) on the mma.sync loop's GEMMs as f45 runs them: M=32 (16-token tile, four CTAs an SM)
# and M=16 (8-token tile, three): duration, DRAM, issue, warps, pipes, stall reasons.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/ncu_f45.log) 2>&1
date -u
timeout 100 .gpu/kimimoe bench --backend cuda --m 16,32 --rounds 5 2>&1 | grep -a -E "^ +[0-9]"
MET="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for m in 32 16; do
  echo "######## M=$m"
  timeout 150 ncu --clock-control none --kernel-name regex:kmoe_f4s_gemm --launch-count 2 --metrics "$MET" \
    .gpu/kimimoe bench --backend cuda --m $m --rounds 1 --graph=false 2>&1 | grep -a -v -E "^ +-+|_stalled_.*(0\.0[0-9]|  0)$"
done
date -u
