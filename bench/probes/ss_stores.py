# Question: can a producer that widens the weights into shared memory feed SS wgmmas at the register-fed loop's rate?
# The design docs/PERF.md weighed for prefill: a producer warpgroup widens
# each 64-row group's MXFP4 weights to BF16 into shared memory and the MMA
# warpgroups issue SS wgmmas (both operands from shared memory), where the
# path today widens into registers and issues RS wgmmas (only the tokens
# from shared memory). Per m64nNk16 wgmma the SS form reads the 2 KB A
# tile as well as the N x 32-byte token tile, and the producer writes the
# same 2 KB: this probe times the bare loop three ways, nothing else in
# it (wgmma_rate.py's harness and loop: a 64-k chunk's four wgmmas, commit,
# wait for the group before), one CTA an SM:
#   RS     A from registers (the path's MMAs)
#   SS     A from shared memory
#   SS+st  SS, and each thread stores 16 bytes a wgmma elsewhere in shared
#          memory: the producer's 2 KB a warpgroup a wgmma, written here by
#          the MMA warps themselves (the same shared-memory traffic)
# Run on the GPU machine: python3 bench/probes/ss_stores.py [N,N,...]
# Output: a line per (mode, N, warpgroups an SM): cycles a wgmma an SM
# and the share of the dense BF16 rate, as wgmma_rate.py prints them.
import os, statistics, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wgmma_rate import Loop, kernel_head, kernel_tail, start, wgmma

def source(n, mode, wgs):
    rs = mode == "RS"
    store = mode == "SS+st"
    st = ('asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(sst + q * 2048), '
          '"r"(a[0] + it), "r"(a[1]), "r"(a[2]), "r"(a[3]) : "memory");') if store else ""
    return kernel_head(128 * wgs) + f"""
    for (int i = threadIdx.x; i < ({n} * 128 + {wgs} * 8192) / 4; i += blockDim.x) ((u32*)(smem + pad))[i] = 0x3F803F80u ^ (u32)(i & 0x00070007);
    __syncthreads();
    int wg = threadIdx.x / 128;
    u64 db = desc(base);
    u64 da = desc(base + {n} * 128 + wg * 8192);
    u32 sst = base + {n} * 128 + {wgs} * 8192 + wg * 8192 + (threadIdx.x % 128) * 16; // the producer's writes
    u32 a[4] = {{0x3F803F80u, 0x3F803F80u ^ threadIdx.x, 0x3F803F80u, 0x3F803F80u}};
    float d[{n // 2}];
    for (int i = 0; i < {n // 2}; i++) d[i] = 0.0f;
    asm volatile("bar.sync 0;" ::: "memory");
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {{
        asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
        #pragma unroll
        for (int q = 0; q < 4; q++) {{
            u64 dbq = db + 2 * q, daq = da + 2 * q;
            (void)daq; (void)sst;
            {wgmma(n, rs)}
            {st}
        }}
        asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\\n" ::: "memory");
    }}
    asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
    long long t1 = clock64();
""" + kernel_tail(n, wgs)

def main():
    sms, ns = start("128,256", "dense BF16 rate 4096 FLOP a cycle an SM")
    iters = 4000
    print(f"{'mode':>6} {'N':>4} {'WG/SM':>5} {'cyc/wgmma/SM':>13} {'% dense':>8} {'TFLOP/s':>8}")
    for n in ns:
        for wgs in (2, 3):
            if n == 256 and wgs == 3:
                continue  # registers
            for mode in ("RS", "SS", "SS+st"):
                loop = Loop(n, mode == "RS", wgs, sms, src=source(n, mode, wgs))
                times = []
                for rep in range(4):  # the first launch is a warm-up
                    ms, cycles = loop.run(iters, 1)
                    if rep:
                        times.append(ms[0])
                loop.close()
                per = cycles / (iters * 4) / wgs
                share = 64 * n * 16 * 2 / per / 4096
                tf = loop.flop(iters) / (statistics.median(times) * 1e-3) / 1e12
                print(f"{mode:>6} {n:>4} {wgs:>5} {per:>13.2f} {100 * share:>7.1f}% {tf:>8.1f}", flush=True)

if __name__ == "__main__":
    main()
