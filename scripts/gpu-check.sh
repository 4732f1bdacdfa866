#!/usr/bin/env bash
# Build what the GPU machine runs, here (it has no Go toolchain):
#   .gpu/cuda.test  the backend/cuda tests (conformance on the GPU, NVRTC
#                   compiles of the sm_90 and sm_120a bodies)
#   .gpu/kimimoe    the command (validate, bench)
# Then, through the device tool, with carry [".gpu"], run for example:
#   bash scripts/gpu-check.sh run
# which writes logs and JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-build}" = build ]; then
  set -e
  mkdir -p .gpu
  go test -c -o .gpu/cuda.test ./backend/cuda
  go build -o .gpu/kimimoe ./cmd/kimimoe
  ls -la .gpu
  exit 0
fi
# run (on the GPU machine). At most 8 files come back from $OUT: one log,
# the test log, and the JSON results.
: "${OUT:=/tmp/kimimoe-out}"
mkdir -p "$OUT"
export KIMIMOE_CACHE=/tmp/kimimoe-cubin
log="$OUT/run.log"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
} 2>&1 | tee "$log"
(cd backend/cuda && ../../.gpu/cuda.test -test.v -test.timeout 300s 2>&1) > "$OUT/cuda_test.log"
grep -E "^(--- |ok|FAIL|PASS)|cubin|Error|error" "$OUT/cuda_test.log" | head -60 | tee -a "$log"
for chain in mxfp8 flashinfer; do
  .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain "$chain" --json "$OUT/validate_situ_$chain.json" 2>&1 | tee -a "$log"
done
.gpu/kimimoe validate --backend cuda --suite smoke --activation swiglu_oai --recipe floor --json "$OUT/validate_oai_floor.json" 2>&1 | tee -a "$log"
.gpu/kimimoe bench --backend cuda --profile --json "$OUT/bench.json" 2>&1 | tee -a "$log"
.gpu/kimimoe chains --m 1,128 2>&1 | tee -a "$log"
