# Sourced (bash) at the top of a script that a device call runs, after
# `bash scripts/gpu-check.sh build` here put the binaries into .gpu/:
#
#   source scripts/device-prelude.sh        # LOG=name.log to name the log
#   compile_all kimimoe kimimoe_old         # each binary's kernel module, in parallel
#   ... benches, validations, tests ...
#
# It guards against the two ways device calls have been lost:
# - A bare `wait` also waits for the tee that copies this script's output
#   into $OUT, which ends only when the script does: the call hangs until
#   its limit (the sessions of 2026-12-01 22:32 and 2026-12-02 00:56 UTC
#   each lost a 600 s call so). Wait on your own PIDs: wait_own.
# - Every binary built from another kernel source, and every variant
#   (KIMIMOE_NVRTC_DEFINES), compiles its module on first use: about 100 s
#   with NVRTC 13.0 on the H200. A command timed out before that is killed
#   before its cubin is cached, and the next one compiles again.
#   compile_all compiles each binary once, with ptxas's notes, under a
#   timeout that fits, and says which did not finish. (Before commit
#   9f17c6c ptxas's -v was part of the cache key, so a verbose compile's
#   cubin served no plain run: docs/gpu-runs/experiments/f49_*.log.)
#
# Sets KIMIMOE_CACHE (one cubin cache for the call) and NCCL_NVLS_ENABLE=0;
# el prints the seconds since the prelude ran.
set -uo pipefail
export KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kc}" NCCL_NVLS_ENABLE=0
: "${OUT:=/tmp/kimimoe-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/${LOG:-run.log}") 2>&1
PRELUDE_T0=$(date +%s)
el() { echo $(($(date +%s) - PRELUDE_T0)); }
date -u
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem,memory.used --format=csv,noheader 2>&1

# wait_own PID...: wait for these processes only (never a bare wait).
wait_own() {
	local p rc=0
	for p in "$@"; do wait "$p" || rc=$?; done
	return $rc
}

# compile_all BIN...: compile the kernel module of each .gpu/BIN in
# parallel (a one-token bench on a tiny layer, KIMIMOE_NVRTC_VERBOSE=1),
# then print each one's ptxas lines for the kernels matching
# $PTXAS_KERNELS (an extended regex; default the wgmma-fp4 GEMMs) and any
# error. COMPILE_TIMEOUT (default 240 s) bounds each.
compile_all() {
	local b bins=("$@") pids=()
	for b in "${bins[@]}"; do
		KIMIMOE_NVRTC_VERBOSE=1 timeout "${COMPILE_TIMEOUT:-240}" ".gpu/$b" bench --backend cuda --k 256 --n 256 --m 1 \
			--rounds 1 --warmup 0 --copy-mb 64 >"/tmp/compile_$b.txt" 2>&1 &
		pids+=($!)
	done
	local i rc
	for i in "${!pids[@]}"; do
		b=${bins[$i]}
		wait "${pids[$i]}"
		rc=$?
		echo "compiled $b: exit $rc (t=$(el) s)"
		grep -a -A3 -E "entry function '(${PTXAS_KERNELS:-kmoe_f4s?_gemm[a-z0-9_]*})'" "/tmp/compile_$b.txt" |
			grep -a -o -E "entry function '[a-z0-9_]*'|[0-9]+ bytes spill stores|Used [0-9]+ registers" |
			sed -E "s/entry function '([a-z0-9_]*)'/\n  \1:/" | tr '\n' ' ' | sed 's/  \+/ /g'
		echo
		[ "$rc" = 0 ] || tail -5 "/tmp/compile_$b.txt"
	done
}
