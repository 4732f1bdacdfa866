# Question: how fast can any exact BF16 scheme run the layer's prefill GEMMs on this card (cuBLAS and the bare wgmma loop)?
# The ceiling an exact BF16 scheme meets on this card at the prefill sizes
# of issue 11 (M = 128, 512, 2048, 8192 tokens of the Kimi EP32 rank-7
# layer: 8 local (token, slot) pairs a token, K = 3584, N = 3072), measured
# two ways in one call on the GPU machine:
#
# 1. The vendor library's GEMMs of the layer's FLOPs (torch: cuBLAS and
#    CUTLASS), with the weights already BF16 (no widening, no scales, no
#    routing, no activation): GEMM1 [P, K] x [K, 2N] then GEMM2 [P, N] x
#    [N, K] for P = 8 M pairs, as one dense pair (one weight matrix each,
#    the easiest shape there is) and grouped over the 28 experts
#    (torch._grouped_mm, the pairs split evenly), in a CUDA graph, each
#    replay after a 256 MB read (cold L2, as kimimoe bench times), median
#    of 20. FP8 (torch._scaled_mm, tensor-wise scales) beside them: the
#    rate an inexact scheme would get (FP8 wgmma's 32-product sums are not
#    exact, docs/PERF.md step 1b).
# 2. The bare BF16 wgmma loop of bench/probes/wgmma_rate.py (m64n256k16 and
#    m64n128k16, A from registers or shared memory, two warpgroups an SM,
#    nothing else in the loop) run for about as long as each target,
#    launched back to back 30 times (and 200 times at 5 ms: a second of
#    it) so the card's power and clock settle: TFLOP/s of the first, the
#    median and the last launch, and the SM clock the loop ran at (the
#    kernel's clock64 cycles over the launch's event time).
#
# Usage on the GPU machine: python3 bench/probes/gemm_ceiling.py
import os, statistics, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_capture
import wgmma_rate as wr

K, N, E, LOCAL = 3584, 3072, 28, 8
TARGET_MS = {128: 0.175, 512: 0.290, 2048: 1.25, 8192: 5.0}
FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def flush():
    FLUSH.view(torch.int32).sum()  # a read of 256 MB: the L2 cold


def time_graph(fn, rounds=20):
    g = graph_capture.capture(fn, 3)
    for _ in range(3):
        g.replay()
    ev = []
    for _ in range(rounds):
        flush()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        ev.append((e0, e1))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


def split(p):
    counts = [p // E + (1 if e < p % E else 0) for e in range(E)]
    offs, acc = [], 0
    for c in counts:
        acc += c
        offs.append(acc)
    return torch.tensor(offs, dtype=torch.int32, device="cuda")


def gemms(M):
    P = LOCAL * M
    flop = 2.0 * P * K * (2 * N) + 2.0 * P * N * K
    rows = []
    a1 = torch.randn(P, K, device="cuda").to(torch.bfloat16)
    a2 = torch.randn(P, N, device="cuda").to(torch.bfloat16)
    w1 = torch.randn(2 * N, K, device="cuda").to(torch.bfloat16)  # [out, in], as checkpoints store them
    w2 = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    ms = time_graph(lambda: (a1 @ w1.t(), a2 @ w2.t()))
    rows.append(("BF16 dense (torch.mm)", ms))
    try:
        g1 = torch.randn(E, 2 * N, K, device="cuda").to(torch.bfloat16)
        g2 = torch.randn(E, K, N, device="cuda").to(torch.bfloat16)
        offs = split(P)
        ms = time_graph(lambda: (torch._grouped_mm(a1, g1.transpose(-2, -1), offs=offs),
                                 torch._grouped_mm(a2, g2.transpose(-2, -1), offs=offs)))
        rows.append(("BF16 grouped, 28 experts (torch._grouped_mm)", ms))
        del g1, g2
    except Exception as e:  # report, do not hide: the dense row stands alone
        rows.append((f"BF16 grouped unavailable: {type(e).__name__}: {str(e)[:120]}", float("nan")))
    try:
        one = torch.ones((), device="cuda")
        f = torch.float8_e4m3fn
        b1, b2, q1, q2 = a1.to(f), a2.to(f), w1.to(f), w2.to(f)
        for fast in (False, True):
            ms = time_graph(lambda: (torch._scaled_mm(b1, q1.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast),
                                     torch._scaled_mm(b2, q2.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)))
            rows.append((f"FP8 dense (torch._scaled_mm, fast accum {fast}; inexact sums)", ms))
    except Exception as e:
        rows.append((f"FP8 unavailable: {type(e).__name__}: {str(e)[:120]}", float("nan")))
    del a1, a2, w1, w2
    torch.cuda.empty_cache()
    return P, flop, rows


def main():
    torch.zeros(1, device="cuda")
    prop = torch.cuda.get_device_properties(0)
    sms = prop.multi_processor_count
    print(f"{prop.name}, {sms} SMs, torch {torch.__version__}")
    print("1. The layer's two GEMMs through torch, weights already BF16 (graph, L2 cold, median of 20):")
    print(f"{'M':>6} {'pairs':>7} {'GFLOP':>8} {'target ms':>9} {'needs TFLOP/s':>13}  {'ms':>8} {'TFLOP/s':>8} {'x target':>8}  what")
    for M in (128, 512, 2048, 8192):
        P, flop, rows = gemms(M)
        need = flop / (TARGET_MS[M] * 1e-3) / 1e12
        for what, ms in rows:
            tf = flop / (ms * 1e-3) / 1e12 if ms == ms else float("nan")
            print(f"{M:>6} {P:>7} {flop / 1e9:>8.1f} {TARGET_MS[M]:>9.3f} {need:>13.0f}  {ms:>8.4f} {tf:>8.1f} {ms / TARGET_MS[M]:>8.2f}  {what}", flush=True)
    print("2. The bare BF16 wgmma loop (wgmma_rate.py's kernel), two warpgroups an SM, launched back to back:")
    print(f"{'A':>3} {'N':>4} {'launch ms':>9} {'launches':>8} {'first TF/s':>10} {'median':>8} {'last':>8} {'min':>8} {'SM GHz (last)':>13}")
    for n, rs in ((256, True), (256, False), (128, True)):
        loop = wr.Loop(n, rs, 2, sms)
        loop.run(200, 3)  # warm
        ms, _ = loop.run(2000, 3)
        per_iter = statistics.median(ms) / 2000
        plan = [(0.3, 30), (1.25, 30), (5.0, 30), (5.0, 200)]
        for dur, launches in plan:
            iters = max(1, int(dur / per_iter))
            ms, cycles = loop.run(iters, launches)
            tf = [loop.flop(iters) / (m * 1e-3) / 1e12 for m in ms]
            ghz = cycles / (ms[-1] * 1e-3) / 1e9  # the last launch's cycles over its time
            print(f"{'RS' if rs else 'SS':>3} {n:>4} {statistics.median(ms):>9.3f} {launches:>8} {tf[0]:>10.1f} {statistics.median(tf):>8.1f} {tf[-1]:>8.1f} {min(tf):>8.1f} {ghz:>13.3f}", flush=True)
        loop.close()


if __name__ == "__main__":
    main()
