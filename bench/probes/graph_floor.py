# Question: what does kimimoe bench's timing method measure for graphs that do no more than a forward must?
# What kimimoe bench's method (CUDA events around ONE graph replay, the
# median; a 256 MB buffer read on the stream just before each start
# event, so L2 is cold and the device busy while the host launches the
# graph) measures for kernels that do no more than a forward must: a
# graph of
# one trivial kernel, of four, and a plain read of the bytes each M
# touches (bench's "MB" column) by the fastest of twelve Triton read
# kernels (grid-stride, ".cg" loads, an xor a program), so that a target
# below it is shown out of reach on the device, measured. Run on the GPU
# machine (torch and triton), by scripts/gpu-check.sh run:
#   python3 bench/probes/graph_floor.py [MB,MB,...]
# FLUSH=write rewrites the buffer instead (triton.testing.do_bench's
# flush, which leaves L2 full of dirty lines), and FLUSH=write-sync also
# synchronizes between the rewrite and the start event, so the host's
# launch latency is inside the events: this script's method before
# 2026-12-01 (a trivial graph 8.9 to 18.7 us on the H200).
import os, torch, statistics, sys
import triton, triton.language as tl
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_capture
dev = torch.device("cuda")

@triton.jit
def read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(pid * BLOCK, n, step):
        offs = i + tl.arange(0, BLOCK)
        acc ^= tl.load(x_ptr + offs, mask=offs < n, other=0, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))

flush = torch.zeros(64 << 20, dtype=torch.int32, device=dev)  # 256 MB
mode = os.environ.get("FLUSH", "read")
assert mode in ("read", "write", "write-sync"), mode
def capture(fn):
    return graph_capture.capture(fn, 2)
gflush = capture((lambda: flush.sum()) if mode == "read" else (lambda: flush.add_(1)))
def event_time(g, reps=60):
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        gflush.replay()
        if mode == "write-sync": torch.cuda.synchronize()
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)

t = torch.zeros(1, device=dev)
print(f"graph of 1 trivial kernel (t.add_(1)): {event_time(capture(lambda: t.add_(1))):.1f} us")
g4 = capture(lambda: [t.add_(1) for _ in range(4)])
print(f"graph of 4 trivial dependent kernels: {event_time(g4):.1f} us")
sms = torch.cuda.get_device_properties(0).multi_processor_count
out = torch.empty(sms * 16, dtype=torch.int32, device=dev)
for mb in [float(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "140.4,263.3,386.2,474.0,491.8").split(",")]:
    n = int(mb * 1e6) // 4
    x = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device=dev)
    best = None
    for mult in (2, 4, 8, 16):
        for block, warps in ((2048, 4), (4096, 8), (8192, 8)):
            grid = (sms * mult,)
            g = capture(lambda: read_kernel[grid](x, out, n, BLOCK=block, num_warps=warps))
            us = event_time(g, reps=30)
            if best is None or us < best[0]: best = (us, mult, block, warps)
    g = capture(lambda: read_kernel[(sms * best[1],)](x, out, n, BLOCK=best[2], num_warps=best[3]))
    us = event_time(g, reps=100)
    print(f"read {mb:6.1f} MB, one graph, L2 cold: {us:6.1f} us ({mb / us:.2f} TB/s; {best[1]} programs an SM, BLOCK {best[2]}, {best[3]} warps)")
    del x
