# Question: how fast can FP8 wgmma run when each 32-k block's result is promoted into float32 with MXFP8's per-32 scales?
# The `fast` precision's main loop keeps MXFP8's 32-element scales: an
# FP8 wgmma (m64nNk32, E4M3, A from registers as the widened weights
# would be) covers exactly one scale block, so its float32 result must be
# scaled by each token's block scale and added into the accumulators
# before the next block: one FFMA an accumulator a block (and one FMUL
# more when the weight's block scale is applied there too instead of
# being folded into the E4M3 weights). This probe times that loop with
# nothing else in it, against the BF16 wgmma loop the exact path runs
# (two m64nNk16 a 32-k block) and the FP8 wgmma accumulating in place
# (no promotion: DeepGEMM's loop between its per-128 promotions):
#   bf16      BF16 RS m64nNk16 x2 a block, accumulating (the exact path's MMAs)
#   fp8       FP8 RS m64nNk32 a block, accumulating (no scales: not MXFP8)
#   fp8-p1    FP8 into a partial (scale-d 0), wait, d = fma(p, s[token], d)
#   fp8-p2    the same with two partials: block j+1's wgmma in flight while block j is promoted
#   fp8-p2w   fp8-p2 with the weight's scale too: d = fma(p, s[token] * w[row], d)
#   fp8-g2/g4 two or four blocks' wgmmas into their own partials in one group, one wait, then each promoted
#   fp8-k128  four blocks accumulated in one partial, then promoted: DeepGEMM's per-128 promotion, a
#             reference point only (MXFP8 has a scale every 32)
# The token scales are read from shared memory (float2 for a thread's
# two adjacent tokens), as a kernel's staged scales would be. Run on the
# GPU machine (wgmma_rate.py's harness: torch for the context and the
# events; NVRTC and the driver through ctypes, sm_90a cubins):
#   python3 bench/probes/fp8_promote.py [N,N,...]
# Output: a line per (mode, N, warpgroups an SM): cycles a 32-k block an
# SM (clock64, the slowest warpgroup of each CTA, median over the CTAs),
# TFLOP/s over the grid from CUDA events, and the share of the dense FP8
# rate (8192 FLOP a cycle an SM: 1979 TFLOP/s at 1.83 GHz on 132 SMs,
# NVIDIA's H100/H200 SXM figure).
import os, statistics, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wgmma_rate import Loop, kernel_head, kernel_tail, start

MODES = ["bf16", "fp8", "fp8-k128", "fp8-p1", "fp8-p2", "fp8-p2w", "fp8-g2", "fp8-g4"]

def regs(lo, n):
    return ", ".join(f"%{lo + i}" for i in range(n))

def outs(arr, n):
    return ", ".join(f'"+f"({arr}[{i}])' for i in range(n))

def mma_fp8(n, arr, accumulate):
    # d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b
    h = n // 2
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, {1 if accumulate else 0}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs(0, h)}}}, {{{regs(h, 4)}}}, %{h + 4}, p, 1, 1;\\n}}\\n"'
            f' : {outs(arr, h)} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(dbq));')

def mma_bf16(n, arr):
    h = n // 2
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs(0, h)}}}, {{{regs(h, 4)}}}, %{h + 4}, p, 1, 1, 0;\\n}}\\n"'
            f' : {outs(arr, h)} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(dbq));')

FENCE = 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");'
COMMIT = 'asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");'
def WAIT(k):
    return f'asm volatile("wgmma.wait_group.sync.aligned {k};\\n" ::: "memory");'

def promote(n, p, blk, wscale):
    # this thread's tokens 8j + 2 (lane & 3) + {0, 1}: registers 4j + {0, 1} (row r) and 4j + {2, 3} (row r + 8)
    lines = []
    for j in range(n // 8):
        lines.append(f"{{ float2 s = scp[({blk}) * {n // 2} + {4 * j} + (lane & 3)];")
        if wscale:
            lines.append(f"  d[{4*j}] = fmaf({p}[{4*j}], s.x * w0, d[{4*j}]); d[{4*j+1}] = fmaf({p}[{4*j+1}], s.y * w0, d[{4*j+1}]);"
                         f" d[{4*j+2}] = fmaf({p}[{4*j+2}], s.x * w1, d[{4*j+2}]); d[{4*j+3}] = fmaf({p}[{4*j+3}], s.y * w1, d[{4*j+3}]); }}")
        else:
            lines.append(f"  d[{4*j}] = fmaf({p}[{4*j}], s.x, d[{4*j}]); d[{4*j+1}] = fmaf({p}[{4*j+1}], s.y, d[{4*j+1}]);"
                         f" d[{4*j+2}] = fmaf({p}[{4*j+2}], s.x, d[{4*j+2}]); d[{4*j+3}] = fmaf({p}[{4*j+3}], s.y, d[{4*j+3}]); }}")
    return "\n".join(lines)

def body(mode, n):
    h = n // 2
    if mode == "bf16":
        return f"""
    for (int it = 0; it < iters; it++) {{
        {FENCE}
        #pragma unroll
        for (int q = 0; q < 2; q++) {{ u64 dbq = db + 2 * ((2 * it + q) & 3); {mma_bf16(n, "d")} }}
        {COMMIT} {WAIT(1)}
    }}"""
    if mode == "fp8":
        return f"""
    for (int it = 0; it < iters; it++) {{
        {FENCE}
        {{ u64 dbq = db + 2 * (it & 3); {mma_fp8(n, "d", True)} }}
        {COMMIT} {WAIT(1)}
    }}"""
    if mode == "fp8-k128":
        return f"""
    float p0[{h}];
    for (int i = 0; i < {h}; i++) p0[i] = 0.0f;
    for (int it = 0; it < iters; it += 4) {{
        {FENCE}
        #pragma unroll
        for (int q = 0; q < 4; q++) {{ u64 dbq = db + 2 * q; if (q == 0) {{ {mma_fp8(n, "p0", False)} }} else {{ {mma_fp8(n, "p0", True)} }} }}
        {COMMIT} {WAIT(0)}
        {promote(n, "p0", "(it >> 2) & 3", False)}
    }}"""
    if mode in ("fp8-g2", "fp8-g4"):
        g = 2 if mode == "fp8-g2" else 4
        decl = "\n".join(f"    float q{i}[{h}]; for (int i = 0; i < {h}; i++) q{i}[i] = 0.0f;" for i in range(g))
        mmas = "\n".join(f"        {{ u64 dbq = db + 2 * ((it + {i}) & 3); {mma_fp8(n, f'q{i}', False)} }}" for i in range(g))
        proms = "\n".join(promote(n, f"q{i}", f"(it + {i}) & 3", False) for i in range(g))
        return f"""
{decl}
    for (int it = 0; it < iters; it += {g}) {{
        {FENCE}
{mmas}
        {COMMIT} {WAIT(0)}
{proms}
    }}"""
    if mode == "fp8-p1":
        return f"""
    float p0[{h}];
    for (int i = 0; i < {h}; i++) p0[i] = 0.0f;
    for (int it = 0; it < iters; it++) {{
        {FENCE}
        {{ u64 dbq = db + 2 * (it & 3); {mma_fp8(n, "p0", False)} }}
        {COMMIT} {WAIT(0)}
        {promote(n, "p0", "it & 3", False)}
    }}"""
    ws = mode == "fp8-p2w"
    return f"""
    float p0[{h}], p1[{h}];
    for (int i = 0; i < {h}; i++) p0[i] = p1[i] = 0.0f;
    {FENCE}
    {{ u64 dbq = db; {mma_fp8(n, "p0", False)} }}
    {COMMIT}
    for (int it = 0; it < iters; it += 2) {{
        {FENCE}
        {{ u64 dbq = db + 2 * ((it + 1) & 3); {mma_fp8(n, "p1", False)} }}
        {COMMIT} {WAIT(1)}
        {promote(n, "p0", "it & 3", ws)}
        {FENCE}
        {{ u64 dbq = db + 2 * ((it + 2) & 3); {mma_fp8(n, "p0", False)} }}
        {COMMIT} {WAIT(1)}
        {promote(n, "p1", "(it + 1) & 3", ws)}
    }}
    {WAIT(0)}"""

def source(mode, n, wgs):
    return kernel_head(128 * wgs) + f"""
    // N token rows of 128 bytes (the swizzled chunk), then 4 blocks x N token scales
    for (int i = threadIdx.x; i < {n} * 32; i += blockDim.x) ((u32*)(smem + pad))[i] = 0x38303830u ^ (u32)(i & 0x00030003);
    float2* sc = (float2*)(smem + pad + {n} * 128);
    for (int i = threadIdx.x; i < 4 * {n} / 2; i += blockDim.x) sc[i] = make_float2(1.0f + (i & 7) * 0.125f, 0.5f);
    __syncthreads();
    // token scales: scp[blk * N / 2 + tok / 2] holds tokens tok, tok + 1 (tok even)
    const float2* scp = sc;
    int lane = threadIdx.x & 31;
    (void)lane; (void)scp;
    u64 db = desc(base);
    u32 a[4] = {{0x38383838u, 0x38383838u ^ (threadIdx.x & 3), 0x38383838u, 0x38383838u}};
    float w0 = 1.0f + (threadIdx.x & 1), w1 = 0.5f;
    (void)w0; (void)w1;
    float d[{n // 2}];
    for (int i = 0; i < {n // 2}; i++) d[i] = 0.0f;
    asm volatile("bar.sync 0;" ::: "memory");
    long long t0 = clock64();
    {body(mode, n)}
    asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
    long long t1 = clock64();
""" + kernel_tail(n, wgs)

def run(mode, n, wgs, sms, iters=8000):
    loop = Loop(n, True, wgs, sms, src=source(mode, n, wgs), tag=f"{mode} N={n} WG={wgs}")
    times, cycles = [], 0.0
    for rep in range(4):  # the first launch is a warm-up
        ms, cycles = loop.run(iters, 1)
        if rep:
            times.append(ms[0])
    loop.close()
    flop = sms * wgs * iters * 64 * n * 32 * 2
    per_block_sm = cycles / iters / wgs  # cycles an SM spends a warpgroup's 32-k block
    tf = flop / (statistics.median(times) * 1e-3) / 1e12
    return per_block_sm, tf, 100 * (64 * n * 32 * 2) / per_block_sm / 8192

def main():
    sms, ns = start("64,128", "dense FP8 rate 8192 FLOP a cycle an SM")
    print(f"{'mode':>8} {'N':>4} {'WG/SM':>5} {'cyc/block/SM':>13} {'TFLOP/s':>8} {'% FP8 dense':>11}")
    for mode in MODES:
        for n in ns:
            for wgs in (1, 2, 3):
                if (mode.startswith("fp8-p2") or mode == "fp8-g2") and n > 128 or mode == "fp8-g4" and n > 64:
                    continue  # the partials and the accumulators: registers
                per, tf, pct = run(mode, n, wgs, sms)
                print(f"{mode:>8} {n:>4} {wgs:>5} {per:>13.2f} {tf:>8.1f} {pct:>10.1f}%", flush=True)

if __name__ == "__main__":
    main()
