#!/usr/bin/env bash
# Build what the GPU machine runs, here (it has no Go toolchain):
#   bash scripts/gpu-check.sh build
# puts into .gpu/ (ignored by git): cuda.test (the backend/cuda tests:
# conformance on the GPU, the lifecycle and widening tests, NVRTC compiles
# of the sm_90 and sm_120a bodies), kimimoe (the command), and the
# examples. Copy the peer script there too (peer_moe.py, the Triton MoE
# measured beside kimimoe in the same call); docs/PERF.md says the two
# one-line changes made to the copy so that it measures M = 2..32 as well.
# Then, through the device tool, with carry [".gpu"]:
#   bash scripts/gpu-check.sh run
# which writes at most 8 files under $OUT: run.log, cuda_test.log, the
# validate JSON of both chains and of GPT-OSS SwiGLU, bench.json and
# peer_triton.json; compute-sanitizer memcheck and racecheck on the smoke
# suite go to run.log.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-build}" = build ]; then
  set -e
  mkdir -p .gpu
  go test -c -o .gpu/cuda.test ./backend/cuda
  go build -o .gpu/kimimoe ./cmd/kimimoe
  go build -o .gpu/decode ./examples/decode
  go build -o .gpu/prefill ./examples/prefill
  ls -la .gpu
  exit 0
fi
: "${OUT:=/tmp/kimimoe-out}"
mkdir -p "$OUT"
export KIMIMOE_CACHE=/tmp/kimimoe-cubin NCCL_NVLS_ENABLE=0
log="$OUT/run.log"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$log"
(cd backend/cuda && timeout 200 ../../.gpu/cuda.test -test.v -test.timeout 190s 2>&1) > "$OUT/cuda_test.log"
grep -E "^(--- |ok|FAIL|PASS)|cubin|rror|panic" "$OUT/cuda_test.log" | head -40 | tee -a "$log"
for chain in mxfp8 flashinfer; do
  timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain "$chain" --json "$OUT/validate_situ_$chain.json" 2>&1 | tee -a "$log" | tail -1
done
timeout 60 .gpu/kimimoe validate --backend cuda --suite smoke --activation swiglu_oai --recipe floor --json "$OUT/validate_oai_floor.json" 2>&1 | tee -a "$log" | tail -1
timeout 120 .gpu/kimimoe bench --backend cuda --profile --rounds 20 --json "$OUT/bench.json" 2>&1 | tee -a "$log"
if [ -f .gpu/peer_moe.py ]; then
  mkdir -p /tmp/peer
  OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,512,2048,8192 PYTHONUNBUFFERED=1 timeout 200 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
  cp /tmp/peer/peer_triton.json "$OUT/" 2>/dev/null
  grep -A12 "triton_ms" /tmp/peer/stdout.txt | tee -a "$log"
fi
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool on validate --suite smoke: exit $?" | tee -a "$log"; tail -2 /tmp/san.txt | tee -a "$log"
done
