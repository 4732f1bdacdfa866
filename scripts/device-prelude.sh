# Helpers for a script run on a GPU machine from a checkout with .gpu/
# built (scripts/gpu-check.sh build), for comparing binaries:
#
#   source scripts/device-prelude.sh        # LOG=name.log to name the log
#   compile_all kimimoe kimimoe_old         # each binary's kernel module, in parallel
#   same_validate a.json b.json             # two validate JSONs equal, times aside?
#   ab_passes 3 1,8,32 old=BIN=kimimoe_old new=   # interleaved bench passes
#
# Two things it guards against: a bare `wait` also waits for the tee that
# copies the output into $OUT, which ends only with the script (wait on
# your own PIDs: wait_own); and every binary built from another kernel
# source compiles its module on first use (about 100 s with NVRTC 13.0 on
# an H200): a command timed out before that is killed before its cubin is
# cached, and the next one compiles again, so compile_all compiles each
# once under a timeout that fits. (Register counts and spills:
# .gpu/cuda.test -test.run TestPtxasNotes -ptxas -test.v.)
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

# compile_all BIN...: compile, in parallel, the kernel module of each
# binary .gpu/BIN with a one-token bench on a tiny layer, and print, for
# one that failed, its log's end. COMPILE_TIMEOUT (default 240 s) bounds
# each. Returns nonzero if any failed.
compile_all() {
	local item items=("$@") pids=()
	for item in "${items[@]}"; do
		timeout "${COMPILE_TIMEOUT:-240}" ".gpu/$item" bench --backend cuda \
			--k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 >"/tmp/compile_$item.txt" 2>&1 &
		pids+=($!)
	done
	local i rc fail=0 log
	for i in "${!pids[@]}"; do
		item=${items[$i]} log="/tmp/compile_${items[$i]%%=*}.txt"
		wait "${pids[$i]}"
		rc=$?
		echo "compiled ${item%%=*}: exit $rc (t=$(el) s)"
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
