# Helpers for a script run on a GPU machine from a checkout with .gpu/
# built (scripts/gpu-check.sh build), for comparing binaries or kernel
# variants:
#
#   source scripts/device-prelude.sh        # LOG=name.log to name the log
#   compile_all kimimoe kimimoe_old         # each binary's kernel module, in parallel
#   compile_all base= pf0=KMOE_F4SD_PF=0    # or variants of .gpu/kimimoe's (KIMIMOE_NVRTC_DEFINES)
#   same_validate a.json b.json             # two validate JSONs equal, times aside?
#   ab_passes 3 1,8,32 old=BIN=kimimoe_old new=   # interleaved bench passes
#
# Two things it guards against: a bare `wait` also waits for the tee that
# copies the output into $OUT, which ends only with the script (wait on
# your own PIDs: wait_own); and every binary built from another kernel
# source, and every variant, compiles its module on first use (about 100 s
# with NVRTC 13.0 on an H200): a command timed out before that is killed
# before its cubin is cached, and the next one compiles again, so
# compile_all compiles each once, with ptxas's notes, under a timeout that
# fits.
#
# Sets KIMIMOE_CACHE (one cubin cache for the run) and NCCL_NVLS_ENABLE=0;
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

# compile_all ITEM...: compile, in parallel, the kernel module of each
# ITEM, a binary .gpu/BIN (under the caller's KIMIMOE_NVRTC_DEFINES) or a
# variant LABEL=DEFINES of .gpu/kimimoe (DEFINES: KIMIMOE_NVRTC_DEFINES'
# words, space-separated; empty for the plain module), with a one-token
# bench on a tiny layer under KIMIMOE_NVRTC_VERBOSE=1; then print each
# one's ptxas lines for the kernels matching $PTXAS_KERNELS (an extended
# regex; default the wgmma-fp4 GEMMs) and, if it failed, its log's end.
# COMPILE_TIMEOUT (default 240 s) bounds each. Returns nonzero if any
# failed.
compile_all() {
	local item items=("$@") pids=() bin defs
	for item in "${items[@]}"; do
		bin=$item defs=${KIMIMOE_NVRTC_DEFINES:-}
		if [[ $item == *=* ]]; then bin=kimimoe defs=${item#*=}; fi
		KIMIMOE_NVRTC_DEFINES="$defs" KIMIMOE_NVRTC_VERBOSE=1 timeout "${COMPILE_TIMEOUT:-240}" ".gpu/$bin" bench --backend cuda \
			--k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 >"/tmp/compile_${item%%=*}.txt" 2>&1 &
		pids+=($!)
	done
	local i rc fail=0 log
	for i in "${!pids[@]}"; do
		item=${items[$i]} log="/tmp/compile_${items[$i]%%=*}.txt"
		wait "${pids[$i]}"
		rc=$?
		echo "compiled ${item%%=*}: exit $rc (t=$(el) s)"
		grep -a -A3 -E "entry function '(${PTXAS_KERNELS:-kmoe_f4s?_gemm[a-z0-9_]*})'" "$log" |
			grep -a -o -E "entry function '[a-z0-9_]*'|[0-9]+ bytes spill stores|Used [0-9]+ registers" |
			sed -E "s/entry function '([a-z0-9_]*)'/\n  \1:/" | tr '\n' ' ' | sed 's/  \+/ /g'
		echo
		if [ "$rc" != 0 ]; then
			tail -5 "$log"
			fail=1
		fi
	done
	return $fail
}

# same_validate A.json B.json: whether two validate JSONs agree case by
# case on name, status and metrics (times aside), as one line.
same_validate() {
	python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([(r["name"], r["status"], json.dumps(r.get("metrics"), sort_keys=True)) for r in json.load(open(p))["results"]] for p in sys.argv[1:])
print("identical, times aside" if a == b else f"{sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))} cases differ")
PY
}

# ab_passes PASSES MS NAME=ENV... : PASSES interleaved passes of
# `kimimoe bench --m MS --rounds 10 --copy-mb 256`, one a variant each
# pass, each variant run under its environment (NAME=ENV, ENV being
# VAR=VALUE settings separated by ';', or empty; a value may hold
# spaces; BIN=name runs .gpu/name instead of .gpu/kimimoe); prints each
# pass's rows.
ab_passes() {
	local passes=$1 ms=$2 p v name envs kv bin e
	shift 2
	for p in $(seq "$passes"); do
		for v in "$@"; do
			name=${v%%=*} envs=${v#*=} bin=kimimoe
			IFS=';' read -ra kv <<<"$envs"
			for e in "${!kv[@]}"; do
				if [[ ${kv[$e]} == BIN=* ]]; then bin=${kv[$e]#BIN=}; unset "kv[$e]"; fi
			done
			echo "== $name pass $p (t=$(el) s)"
			env "${kv[@]}" timeout 60 ".gpu/$bin" bench --backend cuda --m "$ms" --rounds 10 --copy-mb 256 >/tmp/ab.txt 2>&1 || tail -3 /tmp/ab.txt
			grep -a -E "^ +[0-9]" /tmp/ab.txt
		done
	done
}
