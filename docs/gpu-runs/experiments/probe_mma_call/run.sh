#!/usr/bin/env bash
# The floor of the 8- and 16-token loops' work (scripts/stream_probe.py mma: the 28 experts' weights streamed in the
# forward's order, GEMM2 waiting for all of GEMM1, each word widened as the path widens it and multiplied by the
# loops' mma.sync from a token window staged once), and the review's kernel tidy (f4s_stage_pieces holds its kdim
# guard; the 16-token tile no longer declares pieces it never finds) against the previous commit's binary: the same
# bits (validate with each small tile forced) and the same time (A/B).
source scripts/device-prelude.sh
compile_all kimimoe kimimoe_old
for tile in 16 8; do
  for b in kimimoe kimimoe_old; do
    KIMIMOE_FP4_TOKENS=$tile timeout 40 .gpu/$b validate --backend cuda --suite all --require-situ --json /tmp/v${tile}_$b.json 2>&1 |
      grep -a -E 'validate:|FAIL|rror' | tail -2 | sed "s/^/tile $tile, $b: /"
  done
  echo "tile $tile, tidy against the previous commit: $(same_validate /tmp/v${tile}_kimimoe.json /tmp/v${tile}_kimimoe_old.json)"
done
echo "== probe (t=$(el) s)"
PYTHONUNBUFFERED=1 timeout 200 python3 scripts/stream_probe.py mma 2>&1
echo "== A/B (t=$(el) s)"
ab_passes 2 1,8,16,32 old="BIN=kimimoe_old" new=
echo "t=$(el) s"; date -u
