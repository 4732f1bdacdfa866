#!/usr/bin/env bash
# One mode of scripts/stream_probe.py (PROBE, default wg), its log named by LOG. The calls of 2026-12-02 (one H200):
#   PROBE=wg               run_wg.log               02:46 UTC  16 tokens on wgmma m64n16k16 beside mma.sync, GEMM2 waiting
#   PROBE=wg-nowait        run_wg_nowait.log        02:50 UTC  the same, GEMM2 waiting and not
#   PROBE=wg-window        run_wg_window.log        02:52 UTC  wgmma with its tokens staged in 2-step windows
#   PROBE=wg-windows       run_wg_windows.log       02:53 UTC  2-, 4- and 8-step windows
#   PROBE=l1               run_l1.log               02:56 UTC  CTAs pinned by shared memory (small L1) or by registers
#   PROBE=l1-m1            run_l1_m1.log            02:57 UTC  the same for M=1's bytes
#   PROBE=wg-window-parts  run_wg_window_parts.log  02:59 UTC  a window's copies apart from its waits and barriers
#   PROBE=wg-mbar          run_wg_mbar.log          03:02 UTC  windows filled by one thread onto mbarriers, no CTA barrier
#   PROBE=wg-producer      run_wg_producer.log      03:04 UTC  the windows filled by a ninth warp of their own
#   PROBE=wg-producer-quarter run_wg_producer_quarter.log  that warp copying a quarter of each window (timing only)
source scripts/device-prelude.sh
PYTHONUNBUFFERED=1 timeout 300 python3 scripts/stream_probe.py "${PROBE:-wg}" 2>&1
echo "t=$(el) s"; date -u
