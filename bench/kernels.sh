#!/usr/bin/env bash
# Where a forward's time goes, kernel by kernel (the table of docs/PERF.md,
# "What limits each range"): one eager forward per M under Nsight Compute
# (`ncu --clock-control none`, so the clocks are the bench's), each
# kernel's duration, tensor-pipe activity, issue activity and DRAM
# throughput; then where its warps wait: warp instructions (and those on
# the MUFU unit), cycles a warp between issued instructions and the
# largest stall reasons' shares of them, warps eligible a cycle.
#
# With TRITON_KERNELS_SRC set, triton_kernels' two GEMMs at each M follow
# (bench/peer_triton_kernels.py's first forward), in the same tables.
#
#   [TRITON_KERNELS_SRC=...] bash bench/kernels.sh [MS]
#                                     (default 512,2048,8192; needs ncu)
set -uo pipefail
cd "$(dirname "$0")/.."
ms=${1:-512,2048,8192}
export NCCL_NVLS_ENABLE=0 KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kimimoe-cubin}"
. bench/kimimoe.sh # km: the command
stall=smsp__average_warps_issue_stalled
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,smsp__inst_executed.sum,sm__inst_executed_pipe_xu.sum,smsp__average_warp_latency_per_inst_issued.ratio,smsp__warps_eligible.avg.per_cycle_active
reasons="wait dispatch_stall long_scoreboard gmma barrier math_pipe_throttle not_selected"
for r in $reasons; do metrics+=,${stall}_${r}_per_issue_active.ratio; done
date -u
"$km" --version
csv=$(mktemp) || exit 1
table=$(mktemp) || exit 1
cat >"$table" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
kernels = {}
for r in csv.DictReader(lines):
    k = kernels.setdefault(r["Kernel Name"], {"id": r["ID"]})
    if k["id"] == r["ID"]:  # the kernel's first launch only
        k[r["Metric Name"]] = r["Metric Value"] + (" " + r["Metric Unit"] if r["Metric Name"].startswith("gpu__time") else "")
print(f"{'kernel':<28} {'time':>12} {'tensor %':>9} {'issue %':>8} {'DRAM %':>7}")
for name, v in kernels.items():
    print(f"{name[:28]:<28} {v['gpu__time_duration.sum']:>12} {v['sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active']:>9} "
          f"{v['sm__issue_active.avg.pct_of_peak_sustained_active']:>8} {v['dram__throughput.avg.pct_of_peak_sustained_elapsed']:>7}")
stall, reasons = sys.argv[2] + "_", sys.argv[3].split()
print(f"{'kernel':<28} {'warp inst':>13} {'MUFU':>12} {'cycles/issue':>12} {'eligible':>8}  stalls (cycles of those)")
for name, v in kernels.items():
    top = sorted(((float(v.get(stall + r + "_per_issue_active.ratio", "0").replace(",", "")), r) for r in reasons), reverse=True)
    g = lambda m: v.get(m, "n/a")  # a metric this ncu does not collect
    print(f"{name[:28]:<28} {g('smsp__inst_executed.sum'):>13} {g('sm__inst_executed_pipe_xu.sum'):>12} "
          f"{g('smsp__average_warp_latency_per_inst_issued.ratio'):>12} {g('smsp__warps_eligible.avg.per_cycle_active'):>8}  "
          + ", ".join(f"{r} {x:.2f}" for x, r in top[:4]))
PY
for m in ${ms//,/ }; do
  echo "== M = $m"
  # The bench's own L2 flush (kmoe_l2_flush) is left out; the first
  # forward's kernels are printed, one line each.
  ncu --clock-control none --kernel-name regex:'kmoe_(route|f4|wg|decode|grouped|act|final|quant)' --launch-count 8 \
    --csv --metrics "$metrics" "$km" bench --backend cuda --m "$m" --rounds 1 --warmup 0 --graph=false --copy-mb 64 \
    >"$csv" 2>/dev/null || { echo "ncu failed at M = $m"; exit 1; }
  python3 "$table" "$csv" "$stall" "$reasons"
  if [ -n "${TRITON_KERNELS_SRC:-}" ]; then
    # triton_kernels' FC1 (its SwiGLU fused) and FC2 in its first eager
    # forward at the same M (bench/peer_triton_kernels.py).
    echo "-- triton_kernels, M = $m"
    peer=$(mktemp -d) || exit 1
    OUT="$peer" PEER_M="$m" PEER_ALT_NUM_WARPS=0 PEER_BUDGET_S=60 ncu --clock-control none --target-processes all \
      --kernel-name regex:matmul --launch-count 2 --csv --metrics "$metrics" python3 bench/peer_triton_kernels.py \
      >"$csv" 2>/dev/null || echo "ncu on triton_kernels failed at M = $m"
    python3 "$table" "$csv" "$stall" "$reasons"
    rm -rf "$peer"
  fi
done
rm -f "$csv" "$table"
