#!/usr/bin/env bash
# The f49b code (commit 20d6337) in the timing methods the f49b call left out: bench with the L2 flushed by a
# rewrite (do_bench's) and with no flush, the forward's fixed costs (the same routing on a 256 x 256 layer), and
# the plain-read floors of M = 1..16's bytes (scripts/graph_floor.py). About 250 s with the compile.
source scripts/device-prelude.sh
compile_all kimimoe
for f in write 0; do
  echo "bench with KIMIMOE_BENCH_FLUSH=$f (t=$(el) s):"
  KIMIMOE_BENCH_FLUSH=$f timeout 40 .gpu/kimimoe bench --backend cuda --rounds 10 2>&1 | grep -a -E "^ +[0-9]|floor ="
done
echo "bench --k 256 --n 256 (fixed costs) (t=$(el) s):"
timeout 30 .gpu/kimimoe bench --backend cuda --k 256 --n 256 --m 1,2,8,32 --rounds 15 --copy-mb 256 2>&1 | grep -a -E "^ +[0-9]"
echo "graph_floor.py (t=$(el) s):"
timeout 100 python3 scripts/graph_floor.py 140.4,263.3,386.2,474.0,491.8 2>&1 | tail -8
echo "t=$(el) s"; date -u
