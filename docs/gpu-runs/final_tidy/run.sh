#!/usr/bin/env bash
# The record call after the review tidy (ec32d7e, the last backend/cuda change): the module compiled once (ptxas's
# notes), validate --suite all --require-situ on both chains, kimimoe bench --profile (20 rounds) and the Triton peer
# (peer_moe.py) in the same call, kimimoe compare; then, in the time left, two stream_probe.py modes on the
# refactored probe (43c5684), against the logs of docs/gpu-runs/experiments/probe_mma_call/.
source scripts/device-prelude.sh
compile_all kimimoe || exit 1
for chain in mxfp8 flashinfer; do
  timeout 40 .gpu/kimimoe validate --backend cuda --suite all --require-situ --chain $chain --json "$OUT/validate_situ_$chain.json" 2>&1 |
    grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/$chain: /"
done
echo "== bench --profile (t=$(el) s)"
timeout 60 .gpu/kimimoe bench --backend cuda --profile --rounds 20 --json "$OUT/bench.json" 2>&1
echo "== peer (t=$(el) s)"
mkdir -p /tmp/peer
OUT=/tmp/peer PEER_MS=1,2,4,8,16,32,128,256,512,1024,2048,8192 PEER_BUDGET_S=80 PYTHONUNBUFFERED=1 timeout 100 python3 .gpu/peer_moe.py > /tmp/peer/stdout.txt 2>&1
cp /tmp/peer/peer_triton.json "$OUT/" 2>/dev/null
.gpu/kimimoe compare --bench "$OUT/bench.json" --peers "$OUT/peer_triton.json" --markdown 2>&1
for mode in wg-producer mma; do
  echo "== probe $mode (t=$(el) s)"
  PYTHONUNBUFFERED=1 timeout 40 python3 scripts/stream_probe.py $mode 2>&1
done
echo "t=$(el) s"; date -u
