#!/usr/bin/env bash
# Reproduces every figure of the README and docs/PERF.md on one GPU
# machine, in one run (bench/README.md):
#
#   TRITON_KERNELS_SRC=/path/to/triton/python/triton_kernels bash bench/run.sh [OUTDIR]
#
# OUTDIR (default bench/results) gets validate_mxfp8.json,
# validate_flashinfer.json and validate_bf16.json (validate --suite all
# --require-situ on the GPU backend), bench.json and bench_bf16.json
# (kimimoe bench on the mxfp8 and bf16 chains, 20 interleaved rounds), the
# peers' JSONs peer_triton_kernels.json (first) and peer_moe.json, compare.md (kimimoe
# compare: per M, each peer / kimimoe) and bench.svg (kimimoe plot), and
# run.log. The kimimoe command is built with go when go is on PATH, else
# taken from $KIMIMOE or PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
export NCCL_NVLS_ENABLE=0 KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kimimoe-cubin}"
if command -v go >/dev/null; then
  go build -buildvcs=true -o /tmp/kimimoe-bench ./cmd/kimimoe || exit 1
  KIMIMOE=/tmp/kimimoe-bench
fi
km=${KIMIMOE:-kimimoe}
t0=$(date +%s)
step() { echo "== $* (t=$(($(date +%s) - t0)) s)"; }
date -u
"$km" --version
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
for chain in mxfp8 flashinfer bf16; do
  step "validate, $chain chain"
  "$km" validate --backend cuda --suite all --require-situ --chain "$chain" --json "$out/validate_$chain.json" | tail -1
done
ms=1,2,4,8,16,32,128,256,512,1024,2048,8192
step "kimimoe bench"
"$km" bench --backend cuda --m "$ms" --rounds 20 --json "$out/bench.json" || exit 1
step "kimimoe bench, bf16 chain (W4A16)"
"$km" bench --backend cuda --m "$ms" --rounds 20 --chain bf16 --json "$out/bench_bf16.json" || exit 1
peer=$(mktemp -d)
peers=
# The production peer first, while the device is as the bench left it.
if [ -n "${TRITON_KERNELS_SRC:-}" ]; then
  step "peer: triton_kernels matmul_ogs (bench/peer_triton_kernels.py)"
  OUT="$peer" PEER_M="$ms" PEER_BUDGET_S="${PEER_BUDGET_S:-150}" PYTHONUNBUFFERED=1 python3 bench/peer_triton_kernels.py > "$peer/tk.txt" 2>&1
  tail -16 "$peer/tk.txt"
  cp "$peer/peer_triton_kernels.json" "$out/peer_triton_kernels.json" && peers="$out/peer_triton_kernels.json"
else
  echo "TRITON_KERNELS_SRC is not set: triton_kernels is not measured"
fi
step "peer: the Triton MX MoE (bench/peer_moe.py)"
OUT="$peer" PEER_MS="$ms" PEER_BUDGET_S="${PEER_BUDGET_S:-150}" PYTHONUNBUFFERED=1 python3 bench/peer_moe.py > "$peer/moe.txt" 2>&1
tail -16 "$peer/moe.txt"
cp "$peer/peer_triton.json" "$out/peer_moe.json" && peers="${peers:+$peers,}$out/peer_moe.json"
step "compare and plot"
"$km" compare --bench "$out/bench.json" --peers "$peers" --markdown | tee "$out/compare.md"
"$km" plot --bench "$out/bench.json" --peers "$peers" --out "$out/bench.svg"
rm -rf "$peer"
step done
