#!/usr/bin/env bash
# The bf16 chain against the mxfp8 chain in interleaved passes (the
# "bf16 chain (W4A16)" figures of docs/PERF.md): PASSES passes (default
# 3), each `kimimoe bench` of one chain then the other over MS (default
# 1,8,32,128,512), 10 rounds a pass; prints each M's medians averaged
# over the passes. Interleaving puts both chains under the same clocks and
# temperature, which one bench after the other does not.
#
#   bash bench/chains.sh [MS] [PASSES]
set -uo pipefail
cd "$(dirname "$0")/.."
ms=${1:-1,8,32,128,512} passes=${2:-3}
export NCCL_NVLS_ENABLE=0 KIMIMOE_CACHE="${KIMIMOE_CACHE:-/tmp/kimimoe-cubin}"
. bench/kimimoe.sh # km: the command
out=$(mktemp -d) || exit 1
date -u
"$km" --version
for p in $(seq "$passes"); do
  for chain in mxfp8 bf16; do
    "$km" bench --backend cuda --chain "$chain" --m "$ms" --rounds 10 --copy-mb 256 --json "$out/$chain.$p.json" >/dev/null ||
      { echo "bench --chain $chain failed"; exit 1; }
  done
done
python3 - "$out" "$passes" <<'PY'
import glob, json, sys
out, passes = sys.argv[1], int(sys.argv[2])
med = {}
for chain in ("mxfp8", "bf16"):
    for p in range(1, passes + 1):
        for r in json.load(open(f"{out}/{chain}.{p}.json"))["rows"]:
            med.setdefault((chain, r["m"]), []).append(r["median_ms"])
print(f"| M | bf16 chain ms | mxfp8 chain ms | bf16 / mxfp8 |  ({passes} interleaved passes, medians averaged)")
print("| --- | --- | --- | --- |")
for m in sorted({m for _, m in med}):
    b, x = (sum(med[(c, m)]) / len(med[(c, m)]) for c in ("bf16", "mxfp8"))
    print(f"| {m} | {b:.4f} | {x:.4f} | {b / x:.3f} |")
PY
rm -rf "$out"
