#!/usr/bin/env bash
# The board's power and SM clock during a sustained forward (docs/PERF.md,
# "What limits each range"): nvidia-smi samples every 20 ms while
# `kimimoe bench` replays one M many times; prints the bench's line (its
# median and fastest round) and, over the samples drawing more than
# 250 W, the SM clock's and the instant power's median and range and the
# clock-event reasons seen (0x4: the software power cap).
#
#   bash bench/power.sh [M] [ROUNDS]        (default 8192 150; needs nvidia-smi)
set -uo pipefail
cd "$(dirname "$0")/.."
m=${1:-8192}
rounds=${2:-150}
export NCCL_NVLS_ENABLE=0 KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kimimoe-cubin}"
if command -v go >/dev/null; then
  go build -buildvcs=true -o /tmp/kimimoe-bench ./cmd/kimimoe || exit 1
  KIMIMOE=/tmp/kimimoe-bench
fi
km=${KIMIMOE:-kimimoe}
date -u
"$km" --version
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
# The program compiled (and cached) before sampling starts.
"$km" bench --backend cuda --m 1 --rounds 1 --warmup 0 >/dev/null || { echo "kimimoe bench failed" >&2; exit 1; }
# Older drivers name the reasons clocks_throttle_reasons and have no
# instant power.
q=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv,noheader >/dev/null 2>&1 || q=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
samples=$(mktemp) || exit 1
nvidia-smi --query-gpu=$q --format=csv,noheader -lms 20 >"$samples" 2>&1 &
sampler=$!
sleep 0.5
"$km" bench --backend cuda --m "$m" --rounds "$rounds" | grep -E "^ +M |^ +$m "
kill "$sampler"
echo "nvidia-smi: $q"
python3 - "$samples" <<'PY'
import statistics, sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l.count(",") >= 4]
load = [r for r in rows if r[2].split()[0].replace(".", "").isdigit() and float(r[2].split()[0]) > 250]
if not load:
    sys.exit(f"no sample above 250 W among {len(rows)}")
sm = [int(r[1].split()[0]) for r in load]
w = [float(r[2].split()[0]) for r in load]
print(f"{len(load)} of {len(rows)} samples above 250 W: SM clock median {statistics.median(sm):.0f} MHz ({min(sm)}-{max(sm)}), "
      f"power median {statistics.median(w):.0f} W ({min(w):.0f}-{max(w):.0f}); reasons {' '.join(sorted(set(r[4] for r in load)))}")
PY
rm -f "$samples"
