#!/usr/bin/env bash
# Reproduces every figure of the README and docs/PERF.md on one GPU
# machine, in one run (bench/README.md):
#
#   TRITON_KERNELS_SRC=/path/to/triton/python/triton_kernels \
#   [MARLIN_OPS=LIB[:LIB]] [HUMMING_SRC=DIR] bash bench/run.sh [OUTDIR]
#
# OUTDIR (default bench/results) gets validate_mxfp8.json,
# validate_flashinfer.json and validate_bf16.json (validate --suite all
# --require-situ on the GPU backend), bench.json and bench_bf16.json
# (kimimoe bench on the mxfp8 and bf16 chains, 20 interleaved rounds), the
# peers' JSONs peer_triton_kernels.json (first), peer_marlin.json,
# peer_humming_w4a16.json and peer_humming_w4a8.json (each where the peer
# is given) and peer_moe.json,
# compare.md (kimimoe compare: per M, each peer / kimimoe),
# compare_bf16.md (the W4A16 peers / the bf16 chain) and bench.svg (kimimoe
# plot), and run.log. SHAPE=gpt-oss-120b or gpt-oss-20b benches that layer
# instead (and validates --suite gpt-oss on the mxfp8 and bf16 chains too),
# with OUTDIR bench/results/SHAPE by default; the Triton MX MoE then does
# not run. The kimimoe command is built with go when go is on PATH, else taken
# from $KIMIMOE or PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
shape=${SHAPE:-kimi}
final=${1:-bench/results}
[ "$shape" = kimi ] || final=${1:-bench/results/$shape}
mkdir -p "$final" || exit 1
# The call writes into a folder of its own and replaces OUTDIR's record
# only once it is complete: a failed call leaves the old record whole.
out=$(mktemp -d) || exit 1
exec > >(tee "$out/run.log") 2>&1
export NCCL_NVLS_ENABLE=0 KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kimimoe-cubin}"
. bench/kimimoe.sh # km: the command
# SHAPE: the benched layer (kimimoe bench --shape); the Triton MX MoE runs
# the Kimi shape only.
case $shape in
kimi | gpt-oss-120b | gpt-oss-20b) ;;
*) echo "SHAPE=$shape: want kimi, gpt-oss-120b or gpt-oss-20b" >&2; exit 2 ;;
esac
t0=$(date +%s)
step() { echo "== $* (t=$(($(date +%s) - t0)) s)"; }
date -u
"$km" --version
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
# The validations run side by side (they time nothing), before any bench.
step "validate --suite all, the three chains at once"
pids=()
for chain in mxfp8 flashinfer bf16; do
  "$km" validate --backend cuda --suite all --require-situ --chain "$chain" --json "$out/validate_$chain.json" > "$out/validate_$chain.txt" 2>&1 &
  pids+=($!)
done
if [ "$shape" != kimi ]; then
  for chain in mxfp8 bf16; do
    "$km" validate --backend cuda --suite gpt-oss --chain "$chain" --json "$out/validate_gpt-oss_$chain.json" > "$out/validate_gpt-oss_$chain.txt" 2>&1 &
    pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait "$p"; done
for f in "$out"/validate_*.txt; do echo "$(basename "$f" .txt): $(tail -1 "$f")"; done
rm -f "$out"/validate_*.txt
ms=1,2,4,8,16,32,128,256,512,1024,2048,8192
step "kimimoe bench"
"$km" bench --backend cuda --shape "$shape" --m "$ms" --rounds 20 --json "$out/bench.json" ||
  { echo "kimimoe bench failed: $final is unchanged; this call's files are in $out"; exit 1; }
step "kimimoe bench, bf16 chain (W4A16)"
# Not fatal: the bf16 chain needs one of the two wgmma paths (an sm_90
# device).
"$km" bench --backend cuda --shape "$shape" --m "$ms" --rounds 20 --chain bf16 --json "$out/bench_bf16.json" ||
  echo "the bf16 chain was not benched"
peer=$(mktemp -d)
peers=
# The production peer first, while the device is as the bench left it.
if [ -n "${TRITON_KERNELS_SRC:-}" ]; then
  step "peer: triton_kernels matmul_ogs (bench/peer_triton_kernels.py)"
  OUT="$peer" PEER_M="$ms" PEER_SHAPE="$shape" PEER_BUDGET_S="${PEER_BUDGET_S:-150}" PYTHONUNBUFFERED=1 python3 bench/peer_triton_kernels.py > "$peer/tk.txt" 2>&1
  tail -16 "$peer/tk.txt"
  cp "$peer/peer_triton_kernels.json" "$out/peer_triton_kernels.json" && peers="$out/peer_triton_kernels.json"
else
  echo "TRITON_KERNELS_SRC is not set: triton_kernels is not measured"
fi
# The W4A16 kernels Kimi-K3 and GPT-OSS run on Hopper: Marlin (vLLM's ops,
# or libraries built from its sources named in MARLIN_OPS) and Humming
# (installed, or HUMMING_SRC) in its W4A16 and W4A8 settings.
w4a16=${peers:+$out/peer_triton_kernels.json}
if [ -n "${MARLIN_OPS:-}" ] || python3 -c 'import vllm._moe_C' 2>/dev/null; then
  step "peer: Marlin (bench/peer_marlin.py)"
  OUT="$peer" PEER_M="$ms" PEER_SHAPE="$shape" PEER_BUDGET_S="${PEER_BUDGET_S:-150}" PYTHONUNBUFFERED=1 python3 bench/peer_marlin.py > "$peer/marlin.txt" 2>&1
  tail -16 "$peer/marlin.txt"
  cp "$peer/peer_marlin.json" "$out/peer_marlin.json" && peers="${peers:+$peers,}$out/peer_marlin.json" && w4a16="${w4a16:+$w4a16,}$out/peer_marlin.json"
else
  echo "neither MARLIN_OPS nor vLLM: Marlin is not measured"
fi
if [ -n "${HUMMING_SRC:-}" ] || python3 -c 'import humming' 2>/dev/null; then
  for a in bf16 fp8; do
    tag=w4a16; [ $a = fp8 ] && tag=w4a8
    step "peer: Humming $tag (bench/peer_humming.py)"
    OUT="$peer" PEER_M="$ms" PEER_SHAPE="$shape" PEER_HUMMING_A=$a PEER_BUDGET_S="${PEER_BUDGET_S:-150}" PYTHONUNBUFFERED=1 python3 bench/peer_humming.py > "$peer/humming_$tag.txt" 2>&1
    tail -16 "$peer/humming_$tag.txt"
    cp "$peer/peer_humming_$tag.json" "$out/peer_humming_$tag.json" && peers="${peers:+$peers,}$out/peer_humming_$tag.json"
    [ $tag = w4a16 ] && [ -s "$out/peer_humming_$tag.json" ] && w4a16="${w4a16:+$w4a16,}$out/peer_humming_$tag.json"
  done
else
  echo "neither HUMMING_SRC nor humming: Humming is not measured"
fi
if [ "$shape" = kimi ]; then
  step "peer: the Triton MX MoE (bench/peer_moe.py)"
  OUT="$peer" PEER_MS="$ms" PEER_BUDGET_S="${PEER_BUDGET_S:-150}" PYTHONUNBUFFERED=1 python3 bench/peer_moe.py > "$peer/moe.txt" 2>&1
  tail -16 "$peer/moe.txt"
  cp "$peer/peer_triton.json" "$out/peer_moe.json" && peers="${peers:+$peers,}$out/peer_moe.json"
fi
step "compare and plot"
"$km" compare --bench "$out/bench.json" --peers "$peers" --markdown | tee "$out/compare.md"
"$km" plot --bench "$out/bench.json" --peers "$peers" --out "$out/bench.svg"
# The W4A16 peers run BF16 activations: the bf16 chain is their like.
if [ -s "$out/bench_bf16.json" ] && [ -n "$w4a16" ]; then
  "$km" compare --bench "$out/bench_bf16.json" --peers "$w4a16" --markdown | tee "$out/compare_bf16.md"
fi
rm -rf "$peer"
step done
echo "the record: $final"
rm -f "$final"/validate_*.json "$final"/bench.json "$final"/bench_bf16.json "$final"/peer_*.json "$final"/compare*.md "$final"/bench.svg
cp "$out"/* "$final"/ && rm -rf "$out"
