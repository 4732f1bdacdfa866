#!/usr/bin/env bash
# The GPU backend's full check, for a machine with an NVIDIA GPU but no Go
# toolchain. On a machine with Go:
#   bash scripts/gpu-check.sh build
# puts into .gpu/ (ignored by git): cuda.test (the backend/cuda tests:
# conformance on the GPU, the lifecycle and widening tests, NVRTC compiles
# of the sm_90 and sm_120a bodies), kimimoe (the command) and the examples.
# Copy the repository with .gpu/ to the GPU machine and run there:
#   bash scripts/gpu-check.sh verify
# the tests, validate over the matrix on every path (all three chains; without
# the wgmma-fp4 path; with the small tiles, the activation kernel and
# both GEMMs in three warpgroups at every M), GPT-OSS SwiGLU, and
# compute-sanitizer's memcheck and racecheck on the smoke suite (by
# default and with the GEMMs in three warpgroups); everything goes to $OUT
# (default /tmp/kimimoe-out): verify.log,
# cuda_test.log and the validate JSONs. The published figures come from
# bench/run.sh. On a machine with two GPUs (NCCL):
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
  go build -buildvcs=true -o .gpu/kimimoe ./cmd/kimimoe # --version names the commit
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
if [ "$1" != verify ]; then
  echo "usage: $0 build | verify | multi" >&2; exit 2
fi
log="$OUT/$1.log"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$log"
(cd backend/cuda && timeout 420 ../../.gpu/cuda.test -test.v -test.timeout 400s 2>&1) > "$OUT/cuda_test.log"
grep -E "^(--- |ok|FAIL|PASS)|cubin|rror|panic" "$OUT/cuda_test.log" | head -40 | tee -a "$log"
for chain in mxfp8 flashinfer bf16; do
  timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain "$chain" --json "$OUT/validate_situ_$chain.json" 2>&1 | tee -a "$log" | tail -1
done
# GPT-OSS's activation (with the smoke suite's bias cases) on every chain.
for chain in mxfp8 flashinfer bf16; do
  timeout 60 .gpu/kimimoe validate --backend cuda --suite smoke --activation swiglu_oai --chain "$chain" 2>&1 | tee -a "$log" | tail -1
done
# The small tiles on the wgmma loop, launched without programmatic
# dependence (its summary line in the log).
timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --tune fp4-sync=off,pdl=off 2>&1 | tee -a "$log" | tail -1
# GEMM1's activation as a kernel of its own at every M (kmoe_act_requant;
# by default from 97 to 2048 tokens), non-finite inputs included.
timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --tune fp4-act-min-m=1,fp4-act-max-m=100000 2>&1 | tee -a "$log" | tail -1
# Both GEMMs in three warpgroups over the whole matrix: the 128-token
# tile and the activation kernel forced at every M (each GEMM where its
# grid leaves few warpgroups spare: f4W3Spare).
timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --tune fp4-tile=128,fp4-act-min-m=1 2>&1 | tee -a "$log" | tail -1
# The whole matrix without the wgmma-fp4 path: the decode path at small M,
# then the mma.sync GEMMs, the wgmma GEMMs from every grouped M.
timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --tune fp4-max-m=-1 --json "$OUT/validate_situ_mxfp8_nofp4.json" 2>&1 | tee -a "$log" | tail -1
timeout 150 .gpu/kimimoe validate --backend cuda --suite all --require-situ --tune fp4-max-m=-1,decode-max-m=-1,wgmma-min-m=1 2>&1 | tee -a "$log" | tail -1
timeout 60 .gpu/kimimoe validate --backend cuda --suite smoke --activation swiglu_oai --recipe floor 2>&1 | tee -a "$log" | tail -1
for tool in memcheck racecheck; do
  for chain in mxfp8 bf16; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --chain $chain --runs 1 > /tmp/san.txt 2>&1
    echo "compute-sanitizer $tool on validate --suite smoke --chain $chain (default paths: wgmma-fp4 on sm_90): exit $? (9: errors found)" | tee -a "$log"; tail -2 /tmp/san.txt | tee -a "$log"
  done
done
# The GEMMs in three warpgroups (their token staging is shared by 384 threads).
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 --tune fp4-tile=128,fp4-act-min-m=1 > /tmp/san.txt 2>&1
  echo "compute-sanitizer $tool on validate --suite smoke with --tune fp4-tile=128,fp4-act-min-m=1: exit $?" | tee -a "$log"; tail -2 /tmp/san.txt | tee -a "$log"
done
# GEMM1's activation kernel at every M (it and GEMM1's store for it use no
# shared memory, so memcheck).
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/kimimoe validate --backend cuda --suite smoke --runs 1 --tune fp4-act-min-m=1 > /tmp/san.txt 2>&1
echo "compute-sanitizer memcheck on validate --suite smoke with --tune fp4-act-min-m=1: exit $?" | tee -a "$log"; tail -2 /tmp/san.txt | tee -a "$log"
