#!/usr/bin/env bash
# The same probe with the 16 tokens on the warpgroup's wgmma m64n16k16 (A from registers, single- or double-buffered),
# beside the widening alone and mma.sync's 16 tokens in the same call (scripts/stream_probe.py wg).
source scripts/device-prelude.sh
PYTHONUNBUFFERED=1 timeout 300 python3 scripts/stream_probe.py "${PROBE:-wg}" 2>&1
echo "t=$(el) s"; date -u
