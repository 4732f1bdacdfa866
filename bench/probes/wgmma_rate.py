# Question: what rate do the BF16 wgmma shapes the wgmma-fp4 path issues deliver per SM, A from registers or shared memory?
# What the H200's tensor cores deliver per SM for the BF16 warpgroup MMA
# the wgmma-fp4 path issues (m64nNk16, float32 accumulators), with A from
# registers (RS, as the path does: the widened weights) and with A from
# shared memory (SS, as a design that widens into shared memory would),
# at every N the path uses (8 .. 64, its tiles' tokens) and at 128 and 256,
# with 1, 2 or 4 warpgroups an SM. Nothing else runs in the loop: each
# warpgroup issues a 64-k chunk's four wgmmas, commits them and waits for
# the group before (the path's own pipeline), so the figures are what the
# MMAs alone can reach, the bound that docs/PERF.md compares the GEMMs
# with. Run on the GPU machine (torch for the context and the events;
# NVRTC and the driver through ctypes, sm_90a cubins):
#   python3 bench/probes/wgmma_rate.py [N,N,...]
# Output: a line per (A source, N, warpgroups an SM): cycles a wgmma an
# SM (clock64 in the kernel, the slowest warpgroup of each CTA, median
# over the CTAs), FLOP a cycle an SM and its share of the dense BF16
# rate (1024 multiply-adds a cycle an SM: 989.4 TFLOP/s at 1.83 GHz on
# 132 SMs, NVIDIA's H100/H200 SXM figure), and TFLOP/s over the whole
# grid from CUDA events (at the clock the card runs under this load).
import ctypes, ctypes.util, glob, os, statistics, sys
import torch

def find_lib(names, env):
    if os.environ.get(env):
        return ctypes.CDLL(os.environ[env])
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    for pat in ["/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
                os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu*", "lib", "libnvrtc.so*"),
                os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")]:
        for p in sorted(glob.glob(pat)):
            if "builtins" in p:
                continue
            try:
                return ctypes.CDLL(p)
            except OSError:
                pass
    sys.exit(f"no {names[0]} (set {env})")

nvrtc = find_lib(["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"], "KIMIMOE_NVRTC")
cuda = ctypes.CDLL("libcuda.so.1")

def check_cu(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(r, ctypes.byref(s))
        sys.exit(f"{what}: CUDA error {r} {s.value}")

def wgmma(n, rs):
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    if rs:
        a = ", ".join(f"%{n // 2 + i}" for i in range(4))
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(dbq)'
        return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n'
                f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, {{{a}}}, %{n // 2 + 4}, p, 1, 1, 0;\\n}}\\n"'
                f' : {outs} : {ins});')
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, %{n // 2}, %{n // 2 + 1}, p, 1, 1, 0, 0;\\n}}\\n"'
            f' : {outs} : "l"(daq), "l"(dbq));')

def source(n, rs, wgs, after=""):
    """The loop's kernel; after: a statement run after each wgmma (q the
    k16 step, it the iteration), for probes that add work to the loop."""
    return kernel_head(128 * wgs) + f"""
    for (int i = threadIdx.x; i < ({n} * 128 + {wgs} * 8192) / 4; i += blockDim.x) ((u32*)(smem + pad))[i] = 0x3F803F80u ^ (u32)(i & 0x00070007);
    __syncthreads();
    int wg = threadIdx.x / 128;
    u64 db = desc(base);                       // N token rows of a 64-k chunk, 128-byte swizzled, shared by the warpgroups
    u64 da = desc(base + {n} * 128 + wg * 8192); // this warpgroup's 64 rows (SS)
    u32 a[4] = {{0x3F803F80u, 0x3F803F80u ^ threadIdx.x, 0x3F803F80u, 0x3F803F80u}};
    float d[{n // 2}];
    for (int i = 0; i < {n // 2}; i++) d[i] = 0.0f;
    asm volatile("bar.sync 0;" ::: "memory");
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {{
        asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
        #pragma unroll
        for (int q = 0; q < 4; q++) {{
            u64 dbq = db + 2 * q, daq = da + 2 * q; // the k16 step: 32 bytes further in each row
            (void)daq;
            {wgmma(n, rs)}
            {after}
        }}
        asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\\n" ::: "memory");
    }}
    asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
    long long t1 = clock64();
""" + kernel_tail(n, wgs)

def compile_cubin(src, tag=None):
    """An sm_90a cubin of src; with a tag, ptxas's register, spill and
    wgmma-serialization notes are printed under it."""
    prog = ctypes.c_void_p()
    r = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"rate.cu", 0, None, None)
    assert r == 0, r
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17"] + ([b"--ptxas-options=-v"] if tag else [])
    arr = (ctypes.c_char_p * len(opts))(*opts)
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if r != 0:
        sys.exit("nvrtc: " + text[:3000])
    for line in text.splitlines() if tag else []:
        if any(w in line for w in ("registers", "spill", "wgmma", "Performance")):
            print(f"  ptxas [{tag}]: {line.strip()}")
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetCUBIN(prog, buf)
    return buf

# The kernels' common start: the shared-memory descriptor of a K-major
# tile in the 128-byte swizzle (8 rows of 128 bytes an atom, atoms 1024
# bytes apart).
# Then the kernel rate(out, cyc, iters) up to base (its shared memory's
# first 1024-byte aligned byte: a swizzle atom's alignment) and pad (base's
# offset in smem); kernel_tail ends it: the accumulators' sum stored so the
# MMAs are not dead code, and each warpgroup's cycles t1 - t0.
PROLOGUE = """
typedef unsigned long long u64; typedef unsigned int u32;
__device__ __forceinline__ u64 desc(u32 a) { return ((u64)(a & 0x3FFFF) >> 4) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62); }
"""

def kernel_head(threads):
    return PROLOGUE + f"""
extern "C" __global__ void __launch_bounds__({threads}) rate(float* out, long long* cyc, int iters) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    u32 base = (u32)__cvta_generic_to_shared(smem);
    base = (base + 1023u) & ~1023u;
    u32 pad = base - (u32)__cvta_generic_to_shared(smem);
"""

def kernel_tail(n, wgs):
    return f"""
    float s = 0.0f;
    for (int i = 0; i < {n // 2}; i++) s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x % 128 == 0) cyc[blockIdx.x * {wgs} + threadIdx.x / 128] = t1 - t0;
}}
"""

class Loop:
    """The loop's kernel for (N, A source, warpgroups an SM), loaded, one
    CTA an SM; src replaces this probe's kernel by another of the same
    signature, rate(out, cyc, iters), and tag prints its ptxas notes."""

    def __init__(self, n, rs, wgs, sms, src=None, tag=None):
        self.n, self.wgs, self.sms = n, wgs, sms
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        src = src if src is not None else source(n, rs, wgs)
        check_cu(cuda.cuModuleLoadData(ctypes.byref(self.mod), compile_cubin(src, tag)), "cuModuleLoadData")
        check_cu(cuda.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"rate"), "cuModuleGetFunction")
        self.smem = 160 * 1024  # one CTA an SM
        check_cu(cuda.cuFuncSetAttribute(self.fn, 8, self.smem), "cuFuncSetAttribute")
        self.threads = 128 * wgs
        self.out = torch.empty(sms * self.threads, device="cuda")
        self.cyc = torch.zeros(sms * wgs, dtype=torch.int64, device="cuda")

    def launch(self, iters):
        it = ctypes.c_int(iters)
        p_out, p_cyc = ctypes.c_void_p(self.out.data_ptr()), ctypes.c_void_p(self.cyc.data_ptr())
        args = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.byref(p_out), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(p_cyc), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(it), ctypes.c_void_p))
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        check_cu(cuda.cuLaunchKernel(self.fn, self.sms, 1, 1, self.threads, 1, 1, self.smem, stream, args, None), "cuLaunchKernel")

    def flop(self, iters):
        return self.sms * self.wgs * iters * 4 * (64 * self.n * 16 * 2)

    def run(self, iters, launches):
        """launches back to back: each one's ms (CUDA events), and the last
        one's cycles (the slowest warpgroup of each CTA, median over the CTAs)."""
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(launches + 1)]
        ev[0].record()
        for i in range(launches):
            self.launch(iters)
            ev[i + 1].record()
        torch.cuda.synchronize()
        ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(launches)]
        return ms, statistics.median(self.cyc.view(self.sms, self.wgs).max(dim=1).values.double().tolist())

    def close(self):
        cuda.cuModuleUnload(self.mod)


def run(n, rs, wgs, sms, iters=4000, src=None):
    loop = Loop(n, rs, wgs, sms, src=src)
    times = []
    for rep in range(4):  # the first launch is a warm-up
        ms, cycles = loop.run(iters, 1)
        if rep:
            times.append(ms[0])
    per = cycles / (iters * 4)  # cycles a wgmma of every warpgroup of the SM
    flop = 64 * n * 16 * 2
    per_sm = wgs * flop / per
    tf = loop.flop(iters) / (statistics.median(times) * 1e-3) / 1e12
    loop.close()
    return per / wgs, per_sm, tf

def start(default_ns, rate):
    """The context made, the SMs counted, the N list from argv[1] (else
    default_ns), and the device's line printed with rate, the dense rate
    the shares are of."""
    torch.zeros(1, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ns = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else default_ns).split(",")]
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs; {rate}")
    return sms, ns

def main():
    sms, ns = start("8,16,24,32,40,48,56,64,128,256", "dense BF16 rate 4096 FLOP a cycle an SM")
    print(f"{'A':>3} {'N':>4} {'WG/SM':>5} {'cyc/wgmma/SM':>13} {'FLOP/cyc/SM':>12} {'% dense':>8} {'TFLOP/s':>8}")
    for rs in (True, False):
        for n in ns:
            for wgs in (1, 2, 4):
                if n * wgs > 512 and n >= 256:
                    continue  # registers
                per, per_sm, tf = run(n, rs, wgs, sms)
                print(f"{'RS' if rs else 'SS':>3} {n:>4} {wgs:>5} {per:>13.2f} {per_sm:>12.0f} {100 * per_sm / 4096:>7.1f}% {tf:>8.1f}", flush=True)

if __name__ == "__main__":
    main()
