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
#   bash scripts/gpu-check.sh run      (or verify: no benches, peer or floors; verify.log)
# which writes at most 8 files under $OUT: run.log, cuda_test.log, the
# validate JSON of both chains (default paths: wgmma-fp4 at every M on
# sm_90) and of the whole matrix without the wgmma-fp4 path (decode,
# mma.sync and wgmma GEMMs), bench.json (default paths), bench_nofp4.json
# (the paths before wgmma-fp4) and peer_triton.json; compute-sanitizer
# memcheck and racecheck on the smoke suite go to run.log.
# A call's own script (A/B of two binaries, variants) starts with
# `source scripts/device-prelude.sh` and compiles with its compile_all:
# it says why a bare `wait` or a timeout shorter than a compile loses the
# whole call.
# On nvidia-h200-x2 (two GPUs, NCCL), with carry [".gpu"]:
#   bash scripts/gpu-check.sh multi
# runs the group tests, validate over 2 devices in both modes from one
# process and from two processes (one per GPU, the id through a file),
# and bench --devices 2; files: multi.log, group_test.log, the validate
# JSONs and bench_devices.json.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-build}" = build ]; then
  set -e
  bash scripts/kernel-syntax.sh # the kernels' C++ before any device time goes to NVRTC
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
if [ "$1" = multi ]; then
  log="$OUT/multi.log"
  export KIMIMOE_LIBNCCL="${KIMIMOE_LIBNCCL:-$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)}"
  { date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m; echo "NCCL: $KIMIMOE_LIBNCCL"; } 2>&1 | tee "$log"
  (cd backend/cuda && timeout 240 ../../.gpu/cuda.test -test.v -test.run 'Group|NCCL' -test.timeout 230s 2>&1) > "$OUT/group_test.log"
  grep -E "^(--- |ok|FAIL|PASS)|bitwise|rror|panic" "$OUT/group_test.log" | head -60 | tee -a "$log"
  for mode in ${MODES:-replicated dispatch}; do
    timeout 120 .gpu/kimimoe validate --backend cuda --devices 2 --mode $mode --suite all --require-situ --json "$OUT/validate_2dev_$mode.json" 2>&1 | tee -a "$log" | tail -1
    rm -f /tmp/nccl.id
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 timeout 120 .gpu/kimimoe validate --backend cuda --mode $mode --suite all --require-situ --nccl-id-file /tmp/nccl.id \
        --json "$OUT/validate_2proc_${mode}_rank$r.json" > /tmp/rank$r.txt 2>&1 &
    done
    wait
    for r in 0 1; do echo "two processes, $mode, rank $r: $(tail -1 /tmp/rank$r.txt)" | tee -a "$log"; done
    grep -h -E "FAIL|ERROR|rror" /tmp/rank0.txt /tmp/rank1.txt | head -5 | tee -a "$log"
  done
  [ -n "${SKIP_BENCH:-}" ] || timeout 200 .gpu/kimimoe bench --backend cuda --devices 2 --rounds 20 --json "$OUT/bench_devices.json" 2>&1 | tee -a "$log"
  exit 0
fi
if [ "$1" != run ] && [ "$1" != verify ]; then
  echo "usage: $0 build | run | verify | multi" >&2; exit 2
fi
log="$OUT/$1.log"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$log"
(cd backend/cuda && timeout 200 ../../.gpu/cuda.test -test.v -test.timeout 190s 2>&1) > "$OUT/cuda_test.log"
grep -E "^(--- |ok|FAIL|PASS)|cubin|rror|panic" "$OUT/cuda_test.log" | head -40 | tee -a "$log"
for chain in mxfp8 flashinfer; do
  timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain "$chain" --json "$OUT/validate_situ_$chain.json" 2>&1 | tee -a "$log" | tail -1
done
# The small tiles on the wgmma loop, launched without programmatic
# dependence (its summary line in run.log).
KIMIMOE_FP4_SYNC=0 KIMIMOE_PDL=0 timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ 2>&1 | tee -a "$log" | tail -1
# GEMM1's activation as a kernel of its own at every M (kmoe_act_requant;
# by default from 97 to 2048 tokens), non-finite inputs included.
KIMIMOE_FP4_ACT_MIN_M=1 KIMIMOE_FP4_ACT_MAX_M=100000 timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ 2>&1 | tee -a "$log" | tail -1
# The whole matrix without the wgmma-fp4 path: the decode path at small M,
# then the mma.sync GEMMs, the wgmma GEMMs from every grouped M.
KIMIMOE_FP4_MAX_M=0 timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --json "$OUT/validate_situ_mxfp8_nofp4.json" 2>&1 | tee -a "$log" | tail -1
KIMIMOE_FP4_MAX_M=0 KIMIMOE_DECODE_MAX_M=-1 KIMIMOE_WGMMA_MIN_M=1 timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ 2>&1 | tee -a "$log" | tail -1
timeout 60 .gpu/kimimoe validate --backend cuda --suite smoke --activation swiglu_oai --recipe floor 2>&1 | tee -a "$log" | tail -1
if [ "$1" = run ]; then # verify: the tests, validations and sanitizers only
timeout 120 .gpu/kimimoe bench --backend cuda --profile --rounds 20 --json "$OUT/bench.json" 2>&1 | tee -a "$log"
timeout 120 .gpu/kimimoe bench --backend cuda --rounds 10 --fp4-max-m 0 --json "$OUT/bench_nofp4.json" 2>&1 | tail -16 | tee -a "$log"
# The other timing methods, for the differences in the same call: the L2
# flushed by a rewrite (do_bench's), and no flush with the events around
# the launch on an idle device (the method before 2026-12-01).
for f in write 0; do
  echo "bench with KIMIMOE_BENCH_FLUSH=$f:" | tee -a "$log"
  KIMIMOE_BENCH_FLUSH=$f timeout 120 .gpu/kimimoe bench --backend cuda --rounds 10 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
done
# The forward's fixed costs: the same routing at a 256 x 256 layer (0.8 MB).
echo "bench --k 256 --n 256 (fixed costs):" | tee -a "$log"
timeout 60 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1,2,8,32 --rounds 15 --copy-mb 256 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
if [ -f .gpu/peer_moe.py ]; then
  mkdir -p /tmp/peer
  OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PYTHONUNBUFFERED=1 timeout 200 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
  cp /tmp/peer/peer_triton.json "$OUT/" 2>/dev/null
  grep -A14 "triton_ms" /tmp/peer/stdout.txt | tee -a "$log"
  # The same-call ratios, per M, from the two files.
  .gpu/kimimoe compare --bench "$OUT/bench.json" --peers "$OUT/peer_triton.json" 2>&1 | tee -a "$log"
fi
# The plain-read floor under bench's method, in the same call (the bytes
# of M = 1, 2, 4, 8, 16).
echo "graph_floor.py (scripts/graph_floor.py):" | tee -a "$log"
timeout 200 python3 scripts/graph_floor.py 140.4,263.3,386.2,474.0,491.8 2>&1 | tail -8 | tee -a "$log"
for f in write write-sync; do
  echo "graph_floor.py with FLUSH=$f:" | tee -a "$log"
  FLUSH=$f timeout 100 python3 scripts/graph_floor.py 140.4 2>&1 | tail -3 | tee -a "$log"
done
fi
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool on validate --suite smoke (default paths: wgmma-fp4 on sm_90): exit $?" | tee -a "$log"; tail -2 /tmp/san.txt | tee -a "$log"
done
# GEMM1's activation kernel at every M (it and GEMM1's store for it use no
# shared memory, so memcheck).
KIMIMOE_FP4_ACT_MIN_M=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 > /tmp/san.txt 2>&1
echo "compute-sanitizer memcheck on validate --suite smoke with KIMIMOE_FP4_ACT_MIN_M=1: exit $?" | tee -a "$log"; tail -2 /tmp/san.txt | tee -a "$log"
