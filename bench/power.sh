#!/usr/bin/env bash
# The board's power and SM clock during a sustained forward (docs/PERF.md,
# "What limits each range"): nvidia-smi samples every 20 ms while
# `kimimoe bench` replays one M many times and, where TRITON_KERNELS_SRC
# is set, while triton_kernels replays the same M as often
# (bench/peer_triton_kernels.py, PEER_SUSTAIN_ROUNDS). For each it prints
# the median forward over those rounds and, over its samples drawing more
# than 250 W, the SM clock's and the instant power's median and range and
# the clock-event reasons seen (0x4: the software power cap).
#
#   [TRITON_KERNELS_SRC=...] bash bench/power.sh [M] [ROUNDS]
#                                           (default 8192 150; needs nvidia-smi)
set -uo pipefail
cd "$(dirname "$0")/.."
m=${1:-8192}
rounds=${2:-150}
export NCCL_NVLS_ENABLE=0 KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kimimoe-cubin}"
. bench/kimimoe.sh # km: the command
date -u
"$km" --version
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
# The program compiled (and cached) before sampling starts.
"$km" bench --backend cuda --m 1 --rounds 1 --warmup 0 >/dev/null || { echo "kimimoe bench failed" >&2; exit 1; }
# Older drivers name the reasons clocks_throttle_reasons and have no
# instant power.
q=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv,noheader >/dev/null 2>&1 || q=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
work=$(mktemp -d) || exit 1
nvidia-smi --query-gpu=$q --format=csv,noheader -lms 20 >"$work/samples" 2>&1 &
sampler=$!
sleep 0.5
t0=$(date +%s.%N)
"$km" bench --backend cuda --m "$m" --rounds "$rounds" | grep -E "^ +M |^ +$m "
t1=$(date +%s.%N)
echo "kimimoe $t0 $t1" >"$work/windows"
if [ -n "${TRITON_KERNELS_SRC:-}" ]; then
  OUT="$work/peer" PEER_M="$m" PEER_ALT_NUM_WARPS=0 PEER_SUSTAIN_ROUNDS="$rounds" PEER_BUDGET_S="${PEER_BUDGET_S:-120}" \
    python3 bench/peer_triton_kernels.py >"$work/peer.txt" 2>&1 || { tail -5 "$work/peer.txt"; echo "the peer failed" >&2; }
  python3 - "$work/peer/peer_triton_kernels.json" >>"$work/windows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
if "sustained_window" in r:
    print("triton_kernels", *r["sustained_window"], r["sustained_ms"])
PY
fi
kill "$sampler"
echo "nvidia-smi: $q"
python3 - "$work/samples" "$work/windows" <<'PY'
import datetime, statistics, sys
def when(ts):  # nvidia-smi's local time, as time.time() counts it
    return datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp()
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l.count(",") >= 4]
for w in open(sys.argv[2]):
    name, t0, t1, *ms = w.split()
    inside = [r for r in rows if float(t0) <= when(r[0]) <= float(t1)]
    load = [r for r in inside if r[2].split()[0].replace(".", "").isdigit() and float(r[2].split()[0]) > 250]
    head = f"{name}: {float(t1) - float(t0):.1f} s" + (f", sustained median {float(ms[0]):.4f} ms" if ms else "")
    if not load:
        print(f"{head}; no sample above 250 W among its {len(inside)}")
        continue
    sm = [int(r[1].split()[0]) for r in load]
    p = [float(r[2].split()[0]) for r in load]
    print(f"{head}; {len(load)} of {len(inside)} samples above 250 W: SM clock median {statistics.median(sm):.0f} MHz "
          f"({min(sm)}-{max(sm)}), power median {statistics.median(p):.0f} W ({min(p):.0f}-{max(p):.0f}); "
          f"reasons {' '.join(sorted(set(r[4] for r in load)))}")
PY
rm -rf "$work"
