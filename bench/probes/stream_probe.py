# Question: how fast can the weight streams (and the small tiles' widening and MMAs) run alone: the floor of M=1 and M=32?
# How fast the H200 streams M=1's MXFP4 weights in the shape the
# wgmma-fp4 path reads them, and what GEMM2's dependence on all of GEMM1
# costs, with nothing else in the kernel but an optional stand-in for
# the widening: the floor, on this card, of the forward's two weight
# streams (docs/PERF.md, "The floor of M=1's dataflow"); and, with the
# loops' own widening and MMAs as the work, the floor of the 16-token
# loops (docs/PERF.md, "The floor of the 16-token loops' work").
#
# Layout (internal/layout/fp4): a 64-row group's chunks of 2 KB, one 16-byte
# word a thread a chunk, a warpgroup a group, two warpgroups a CTA, a
# step = two chunks. GEMM1 at M=1: 8 experts x 6144 rows = 768 groups;
# GEMM2: 8 x 3584 rows = 448 groups. Chunks a group: part 1 the payload
# only (K/64: 56 and 48, 88.1 + 44.0 MB); part 2 the payload and the
# scales (one byte a 32 weights: 1/16 of the payload, read in the same
# stream here), 60 and 50 chunks, 94.4 + 45.9 = 140.3 MB (the forward
# reads 140.4 MB, kimimoe bench's MB column).
#
# Two feeds:
#   regs: each thread holds AH steps of its words in registers and
#         reloads a chunk's word once it is used (F4Weights, the path's
#         feed);
#   ring: one thread a warpgroup copies whole steps (4 KB) into a ring of
#         R shared-memory slots with cp.async.bulk completing on an
#         mbarrier a slot; the threads wait on the slot's mbarrier, read
#         their words with ld.shared, meet at the warpgroup's named
#         barrier, and the copying thread refills the slot R steps ahead
#         (a feed the path has not had: its shared-memory ring, tried once,
#         copied 16 bytes a thread with cp.async).
# work: integer instructions a 32-bit word after it arrives (0: the
# stream alone; 12: about the widening's nine ALU instructions and four
# BF16 multiplies a word, as docs/PERF.md counts them), a dependent chain folded
# into one register so that nothing is dead; or "mma8" / "mma16" (regs
# feed): the path's own widening of each word (f4_widen's nine integer
# instructions and four BF16 multiplies, the multipliers two instructions
# a chunk, as f4_mults) and its mma.sync m16n8k16 per 8 tokens, the
# tokens read with ldmatrix from one 128-k window of 8 or 16 rows
# staged once (never restaged: no window barriers, no staging), the
# accumulators folded at the end. That is the 8- and 16-token loops'
# work a word with nothing around it (docs/PERF.md, "The floor of the
# 16-token loops' work"). "wg16" / "wg16p": the same widening, each chunk's four k16 steps
# then multiplied by the warpgroup's wgmma m64n16k16 (A from registers,
# the 16 tokens from a fixed window in the 128-byte swizzled form, as the
# wgmma-fp4 loop reads them), waiting for the chunk's group before the
# next chunk is widened (wg16), or for the group before it, A in two
# buffers (wg16p: f4_chunk's PIPE); "wg16w": wg16 with the tokens staged
# as a loop must stage them, a window of two steps at a time (8 KB, two
# 16-byte cp.async a thread into the other of two buffers, swizzled), the
# CTA meeting at a barrier once a window (the mma.sync loop's scheme,
# on wgmma), the token rows being the first 16 x K x 2 bytes of the
# role's weights (hot in L2, as x and the intermediate are); "wg16w4",
# "wg16w8": windows of 4 and 8 steps; "wg16wb": the 2-step windows'
# waits and barriers without the copies, "wg16wc": the copies without
# the waits and barriers (timing only: it reads windows as they land);
# "wg16m": no CTA barrier: one thread fills each 2-step window (8 KB, of
# three) with four 2 KB cp.async.bulk copies onto the window's "full"
# mbarrier once both warpgroups have released it on its "empty" one, and
# each warpgroup waits only on "full" (the bytes contiguous, as a tensor
# copy of a tile's rows would move them; a tensor copy would also swizzle
# them, which costs the copy no instruction); "wg16s": the same windows
# filled by a ninth warp of the CTA that does nothing else (288 threads:
# a producer apart, the two warpgroups waiting only for data and each
# releasing a window on "empty" when done with it); "wg16sq": that with
# a quarter of each window's bytes copied (timing only: what the tokens'
# bytes cost, apart from the waits).
#
# One kernel, two roles: CTAs [0, G1/2) stream GEMM1's groups and then
# count themselves (every thread's loads done, a barrier, a fence, one
# atomic add); CTAs [G1/2, G1/2 + G2/2) stream GEMM2's. Modes: GEMM1
# alone, GEMM2 alone, both with no dependence (one stream of both), and
# both with GEMM2 dependent (each GEMM2 CTA issues its first steps, then
# waits until all of GEMM1's CTAs have counted, then goes on: the order
# the forward must keep, with GEMM2's first weights in flight before the
# wait, as kmoe's GEMM2 has them). The GEMM2 CTAs are dispatched
# after the GEMM1 ones (a grid's CTAs start in order), so the wait ends;
# a bound on the spin reports a wait that did not.
# Each configuration runs at C CTAs an SM (set by its dynamic shared
# memory), timed with CUDA events after a 256 MB read (cold L2, as kimimoe
# bench does), the median of 15 launches; a launch while the read runs,
# so its latency is hidden as in bench. GB/s counts the bytes once. With
# work 0 every word's fold is checked against the buffer's ("read ok").
# Run on the GPU machine (torch for memory and events; NVRTC and the
# driver through wgmma_rate.py's ctypes helpers, sm_90a):
#   python3 bench/probes/stream_probe.py            # M=1 and the 28 experts, integer work
#   python3 bench/probes/stream_probe.py MODE       # mma, wg, wg-nowait, wg-window, wg-windows,
#                                              # wg-window-parts, wg-mbar, wg-producer, l1, l1-m1
#                                              # (main() says what each runs)
import ctypes, os, statistics, sys
import numpy as np
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wgmma_rate import cuda, check_cu, compile_cubin

CHUNK = 2048  # bytes a group a chunk (128 threads x 16)
SPIN_LIMIT = 1 << 24


# The mma works' pieces: moe.cu's f4_widen and bf16x2_mul_half (the same
# instructions), ldmatrix and the m16n8k16 MMA.
MMA_FUNCS = r"""
template <int H>
__device__ __forceinline__ u32 mulh(u32 a, u32 m) {
    u32 d;
    if (H == 0)
        asm("{\n.reg .b16 l, h;\n.reg .b32 b;\nmov.b32 {l, h}, %2;\nmov.b32 b, {l, l};\nfma.rn.bf16x2 %0, %1, b, %3;\n}\n"
            : "=r"(d) : "r"(a), "r"(m), "r"(0x80008000u));
    else
        asm("{\n.reg .b16 l, h;\n.reg .b32 b;\nmov.b32 {l, h}, %2;\nmov.b32 b, {h, h};\nfma.rn.bf16x2 %0, %1, b, %3;\n}\n"
            : "=r"(d) : "r"(a), "r"(m), "r"(0x80008000u));
    return d;
}
__device__ __forceinline__ void widen(u32 (&a)[4], u32 q, u32 mm) {
    u32 o0 = q & 0x81C081C0u, o1 = (q << 6) & 0x81C081C0u, o2 = __funnelshift_l(q, q, 12) & 0x81C081C0u;
    u32 o3 = ((q << 2) & 0x80C080C0u) | ((q >> 6) & 0x01000100u);
    a[0] = mulh<0>(o0, mm); a[1] = mulh<1>(o1, mm); a[2] = mulh<0>(o2, mm); a[3] = mulh<1>(o3, mm);
}
__device__ __forceinline__ void ldsm4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma(float* d, const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void wgmma16(float (&d)[8], const u32 (&a)[4], u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// The 128-byte swizzled K-major descriptor (moe.cu sw_desc): 16-byte units,
// leading offset 1, stride 1024 bytes (8 rows), swizzle mode 1.
__device__ __forceinline__ u64 swdesc(const void* p) {
    u64 a = saddr(p);
    return ((a & 0x3FFFFull) >> 4) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
// A chunk's multipliers from its words (BF16 2^-7 .. 2^7 by halves: two
// instructions each, as f4_mults's).
__device__ __forceinline__ void mults(U4 v, u32* m0, u32* m1) {
    *m0 = ((v.x << 7) & 0x03800380u) | 0x3C003C00u;
    *m1 = ((v.y >> 1) & 0x03800380u) | 0x3C003C00u;
}
// A chunk's four words widened into A and multiplied by the warpgroup's
// wgmma m64n16k16 from the 16 token rows at descriptor db (k16 step q at
// + 32 q bytes), the chunk's group committed and waited for with WAIT
// groups left in flight.
template <int WAIT>
__device__ __forceinline__ void wg_chunk(float (&fd)[8], u32 (&A)[4][4], U4 v, u64 db) {
    u32 m0, m1;
    mults(v, &m0, &m1);
    widen(A[0], v.x, m0); widen(A[1], v.y, m0); widen(A[2], v.z, m1); widen(A[3], v.w, m1);
    wg_fence();
    #pragma unroll
    for (int q = 0; q < 4; q++) wgmma16(fd, A[q], db + (u64)(2 * q));
    wg_commit();
    wg_wait<WAIT>();
}
// The mbarrier-fed windows (wg16m, wg16s): three 8 KB windows of 2 steps
// from the first 1024-byte boundary of the dynamic shared memory, then
// their full (0..2) and empty (3..5) mbarriers, initialized by the kernel.
__device__ __forceinline__ unsigned char* pwin() {
    extern __shared__ __align__(128) unsigned char dsm[];
    return dsm + ((1024u - (saddr(dsm) & 1023u)) & 1023u);
}
__device__ __forceinline__ u32 pbar(int i) { return saddr(pwin() + 3 * 8192 + 8 * i); }
// Fill window wn with nq of its four 2 KB chunks (bulk copies onto its
// full mbarrier) from the token rows tokb (kdim k each), once both
// warpgroups have released its buffer.
__device__ __forceinline__ void fill_window(const unsigned char* tokb, int kdim, int wn, int nq) {
    const int b = wn % 3;
    if (wn >= 3) mb_wait(pbar(3 + b), ((wn / 3) - 1) & 1);
    mb_expect(pbar(b), nq * 2048);
    for (int q = 0; q < nq; q++) {
        int k = (256 * wn + 64 * q) % kdim;
        bulk(saddr(pwin() + b * 8192 + q * 2048), tokb + 32 * (u64)k, 2048, pbar(b));
    }
}
// A warpgroup's chunk (step c, half h) from the mbarrier-fed windows:
// wait for the window's bytes at its first chunk, release it at its last
// (the warpgroup's wgmmas on it retired by the wait).
__device__ __forceinline__ void mbar_chunk(float (&fd)[8], u32 (&A)[4][4], U4 v, int c, int h, int nstep, u64 d0) {
    const int wn = c >> 1, b = wn % 3;
    if (h == 0 && (c & 1) == 0) mb_wait(pbar(b), (wn / 3) & 1);
    wg_chunk<0>(fd, A, v, d0 + (u64)((b * 8192 + (c & 1) * 4096 + h * 2048) >> 4));
    if (h == 1 && ((c & 1) == 1 || c + 1 == nstep) && (threadIdx.x & 127) == 0) mb_arrive(pbar(3 + b));
}
"""
TROW = 2 * 128 + 16  # bytes a staged token row: a 128-k window, 16 bytes of padding (as f4s_row)


MBAR_WORKS = ("wg16m", "wg16s", "wg16sq")  # the works on the mbarrier-fed windows (pwin, pbar)


def pre_src(w):
    if w in MBAR_WORKS:
        # wg16m: thread 0 fills windows 0 and 1 (the producer warp fills
        # them all in wg16s and wg16sq).
        fill = ("const unsigned char* tokb = (const unsigned char*)w;\n"
                "const int kdim = nchunk * 64, nwin = (nstep + 1) / 2;\n"
                "if (threadIdx.x == 0) { fill_window(tokb, kdim, 0, 4); if (nwin > 1) fill_window(tokb, kdim, 1, 4); }\n")
        return ((fill if w == "wg16m" else "") +
                "float fd[8];\n"
                "for (int i = 0; i < 8; i++) fd[i] = 0.0f;\n"
                "u32 A2[1][4][4];\n"
                "const u64 d0 = swdesc(pwin());\n")
    if str(w).startswith("wg16w"):
        # Two windows of WS steps (2 WS chunks of 16 rows, 2 KB each),
        # 1024-byte aligned; window 0 staged before the loop.
        ws = int(w[5:].rstrip("bc") or 2)
        return (f"constexpr int WS = {ws};\n"
                "extern __shared__ __align__(128) unsigned char dsm[];\n"
                "unsigned char* win = dsm + ((1024u - (saddr(dsm) & 1023u)) & 1023u);\n"
                "const unsigned char* tokb = (const unsigned char*)w;\n"
                "const int kdim = nchunk * 64;\n"
                "auto stagew = [&](int c1, int buf) {\n"
                "    _Pragma(\"unroll\") for (int i = 0; i < WS; i++) {\n"
                "        int p = threadIdx.x + 256 * i, q = p >> 7, r = (p >> 3) & 15, j = p & 7;\n"
                "        int k = (128 * c1 + 64 * q) % kdim;\n"
                "        u32 dst = saddr(win + buf * (WS * 4096) + q * 2048 + (r >> 3) * 1024 + (r & 7) * 128 + (((j ^ r) & 7) << 4));\n"
                "        asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"(dst), \"l\"(tokb + (u64)r * (2 * kdim) + 2 * k + 16 * j));\n"
                "    }\n"
                "    asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
                "};\n"
                "stagew(0, 0);\n"
                "float fd[8];\n"
                "for (int i = 0; i < 8; i++) fd[i] = 0.0f;\n"
                "u32 A2[1][4][4];\n"
                "const u64 d0 = swdesc(win);\n")
    if str(w).startswith("wg"):
        # Two 64-k chunks of 16 token rows (2 KB each), 1024-byte aligned.
        return ("extern __shared__ __align__(128) unsigned char dsm[];\n"
                "unsigned char* win = dsm + ((1024u - (saddr(dsm) & 1023u)) & 1023u);\n"
                "for (int i = threadIdx.x; i < 4096 / 4; i += blockDim.x) ((u32*)win)[i] = 0x3F803F80u ^ ((u32)i * 0x00010001u & 0x007F007Fu);\n"
                "asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
                "__syncthreads();\n"
                "float fd[8];\n"
                "for (int i = 0; i < 8; i++) fd[i] = 0.0f;\n"
                "u32 A2[2][4][4];\n"
                "const u64 d0 = swdesc(win);\n")
    if not str(w).startswith("mma"):
        return ""
    ng = int(w[3:]) // 8
    return (f"constexpr int NG = {ng};\n"
            "extern __shared__ __align__(128) unsigned char dsm[];\n"
            f"for (int i = threadIdx.x; i < 8 * NG * {TROW} / 4; i += blockDim.x) ((u32*)dsm)[i] = 0x3F803F80u ^ ((u32)i * 0x00010001u & 0x007F007Fu);\n"
            "__syncthreads();\n"
            "float fa[NG][4];\n"
            "for (int g = 0; g < NG; g++) for (int i = 0; i < 4; i++) fa[g][i] = 0.0f;\n"
            f"const u32 xa = saddr(dsm + (threadIdx.x & 7) * {TROW} + 16 * ((threadIdx.x & 31) >> 3));\n")


def post_src(w):
    if str(w).startswith("wg"):
        return ("wg_wait<0>();\n"
                + ("asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\");\n" if str(w).startswith("wg16w") else "")
                + "for (int i = 0; i < 8; i++) { asm volatile(\"\" : \"+f\"(fd[i]) :: \"memory\"); acc ^= __float_as_uint(fd[i]); }")
    if not str(w).startswith("mma"):
        return ""
    return "for (int g = 0; g < NG; g++) for (int i = 0; i < 4; i++) acc ^= __float_as_uint(fa[g][i]);"


def work_src(w):
    if w in MBAR_WORKS:
        # wg16m: at a window's first chunk thread 0 first fills the window
        # after the next (once both warpgroups released it).
        fill = (" if (threadIdx.x == 0 && h == 0 && (c & 1) == 0 && (c >> 1) + 2 < nwin) fill_window(tokb, kdim, (c >> 1) + 2, 4);"
                if w == "wg16m" else "")
        return "{" + fill + " mbar_chunk(fd, A2[0], v, c, h, nstep, d0); }"
    if str(w).startswith("wg16w"):
        sync = "" if w.endswith("c") else (" asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\");"
                                           " asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\"); __syncthreads();")
        copy = "" if w.endswith("b") else " if (c + WS < nstep) stagew(c + WS, (c / WS + 1) & 1);"
        return ("{ if (h == 0 && c % WS == 0) {" + sync + copy + " }"
                " wg_chunk<0>(fd, A2[0], v, d0 + (u64)(((((c / WS) & 1) * (WS * 4096)) + (c % WS) * 4096 + h * 2048) >> 4)); }")
    if str(w).startswith("wg"):
        pipe = w.endswith("p")
        return f"wg_chunk<{1 if pipe else 0}>(fd, A2[{'h' if pipe else '0'}], v, d0 + (u64)(h * (2048 >> 4)));"
    if str(w).startswith("mma"):
        # The chunk's multipliers (mults), then each word widened just
        # before its MMAs, as f4s_k_loop does.
        return ("{ u32 m0, m1; mults(v, &m0, &m1);"
                " const u32 wd[4] = {v.x, v.y, v.z, v.w};"
                " _Pragma(\"unroll\") for (int q = 0; q < 4; q += 2) {"
                " u32 a0[4], a1[4]; widen(a0, wd[q], q < 2 ? m0 : m1); widen(a1, wd[q + 1], q < 2 ? m0 : m1);"
                f" _Pragma(\"unroll\") for (int g = 0; g < NG; g++) {{ u32 bm[4]; ldsm4(bm, xa + g * 8 * {TROW} + h * 128 + q * 32);"
                " mma(fa[g], a0, bm[0], bm[1]); mma(fa[g], a1, bm[2], bm[3]); } } }")
    if w == 0:
        return "acc ^= v.x ^ v.y ^ v.z ^ v.w;"
    body = "".join(f"x = __funnelshift_l(x, x, {3 + j % 5}) ^ (x + {0x9E37 + j}u);" for j in range(w // 3))
    return "{ u32 x; " + "".join(f"x = v.{c}; {body} acc ^= x; " for c in "xyzw") + "}"


COMMON = """
typedef unsigned int u32; typedef unsigned long long u64;
struct __align__(16) U4 { u32 x, y, z, w; };
__device__ __forceinline__ U4 ldg(const U4* p) {
    U4 v; asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ u32 saddr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// mbarriers and bulk copies onto them (the ring feed, the mbarrier-fed
// token windows).
__device__ __forceinline__ void mb_init(u32 bar, u32 n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(n) : "memory"); }
__device__ __forceinline__ void mb_arrive(u32 bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory"); }
__device__ __forceinline__ void mb_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory"); }
__device__ __forceinline__ void mb_wait(u32 bar, u32 parity) {
    u32 ok = 0;
    while (!ok)
        asm volatile("{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\nselp.u32 %0, 1, 0, p;\\n}"
                     : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// GEMM2's wait: thread 0 spins until GEMM1's CTAs have all counted (the
// count's acquire orders nothing here: the probe reads no data GEMM1
// wrote), then the CTA's barrier passes it on. *late is set if the bound
// on the spin ended it.
__device__ __forceinline__ void wait_count(const u32* count, u32 target, u32* late) {
    if (threadIdx.x == 0) {
        u32 v = 0, n = 0;
        do { asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory"); } while (v < target && ++n < SPIN_LIMIT);
        if (v < target) atomicExch(late, 1u);
    }
    CONSUMER_SYNC();
}
"""

REGS = """
__device__ __forceinline__ u32 stream(const U4* __restrict__ w, int nchunk, int group, const u32* count, u32 target, u32* late) {
    int tid = threadIdx.x & 127, nstep = nchunk / 2;
    const U4* wq = w + (u64)group * nchunk * 128 + tid;
    U4 raw[AH][2];
    #pragma unroll
    for (int i = 0; i < AH; i++)
        if (i < nstep) { raw[i][0] = ldg(wq + (2 * i) * 128); raw[i][1] = ldg(wq + (2 * i + 1) * 128); }
    if (count) wait_count(count, target, late);
    u32 acc = 0;
    PRE
    for (int c0 = 0; c0 < nstep; c0 += AH) {
        #pragma unroll
        for (int u = 0; u < AH; u++) {
            int c = c0 + u;
            if (c >= nstep) break;
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                U4 v = raw[u][h];
                WORK
                if (c + AH < nstep) raw[u][h] = ldg(wq + (2 * (c + AH) + h) * 128);
            }
        }
    }
    POST
    return acc;
}
"""

RING = """
// A 4 KB step copied into slot dst, counted on its mbarrier.
__device__ __forceinline__ void issue(u32 dst, const void* src, u32 bar) {
    mb_expect(bar, 4096);
    bulk(dst, src, 4096, bar);
}
__device__ __forceinline__ u32 stream(const U4* __restrict__ w, int nchunk, int group, const u32* count, u32 target, u32* late) {
    extern __shared__ __align__(128) unsigned char dsm[];
    unsigned char (*ring)[2][4096] = (unsigned char (*)[2][4096])dsm;
    __shared__ __align__(8) u64 full[R][2];
    int tid = threadIdx.x & 127, wg = threadIdx.x / 128, nstep = nchunk / 2;
    const unsigned char* src = (const unsigned char*)(w + (u64)group * nchunk * 128);
    if (tid == 0) {
        for (int s = 0; s < R; s++) mb_init(saddr(&full[s][wg]), 1);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0)
        for (int s = 0; s < R && s < nstep; s++) issue(saddr(ring[s][wg]), src + (u64)s * 4096, saddr(&full[s][wg]));
    if (count) wait_count(count, target, late);
    u32 acc = 0;
    for (int c = 0; c < nstep; c++) {
        int s = c % R;
        mb_wait(saddr(&full[s][wg]), (c / R) & 1);
        U4 v0 = *(const U4*)(ring[s][wg] + tid * 16), v1 = *(const U4*)(ring[s][wg] + 2048 + tid * 16);
        { U4 v = v0; WORK }
        { U4 v = v1; WORK }
        asm volatile("bar.sync %0, 128;" :: "r"(1 + wg) : "memory"); // every thread of the warpgroup has read slot s
        if (tid == 0 && c + R < nstep) issue(saddr(ring[s][wg]), src + (u64)(c + R) * 4096, saddr(&full[s][wg]));
    }
    return acc;
}
"""

KERNEL = """
extern "C" __global__ void __launch_bounds__(THREADS, CTAS) probe(const U4* w1, int nchunk1, int ctas1, const U4* w2, int nchunk2,
                                                          u32* count, int dep, u32* late, u32* out) {
    bool first = blockIdx.x < ctas1;
    int cta = first ? blockIdx.x : blockIdx.x - ctas1, group = cta * 2 + threadIdx.x / 128;
#if MBAR_WINDOWS
    // The windows' full and empty mbarriers (pwin, pbar), before the roles part.
    if (threadIdx.x == 0) {
        for (int b = 0; b < 3; b++) { mb_init(pbar(b), 1); mb_init(pbar(3 + b), 2); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
#endif
#if THREADS > 256
    if (threadIdx.x >= 256) {
        if (threadIdx.x == 256)
            produce(first ? w1 : w2, first ? nchunk1 : nchunk2, first || !dep ? nullptr : count, (u32)ctas1);
        if (first) __syncthreads();
        return;
    }
#endif
    u32 acc = first ? stream(w1, nchunk1, group, nullptr, 0, late)
                    : stream(w2, nchunk2, group, dep ? count : nullptr, (u32)ctas1, late);
    out[blockIdx.x * 256 + threadIdx.x] = acc;
    if (first) {
        __syncthreads();
        if (threadIdx.x == 0) { __threadfence(); atomicAdd(count, 1u); }
    }
}
"""


PRODUCER = r"""
// The producer warp's thread: every 2-step window of the role's token
// rows (the first bytes of its weights), PRODUCER_CHUNKS of its four 2 KB
// chunks each (fill_window); GEMM2's producer first waits for GEMM1, as
// its tokens would.
__device__ __forceinline__ void produce(const U4* w, int nchunk, const u32* count, u32 target) {
    const int nwin = (nchunk / 2 + 1) / 2;
    if (count) {
        u32 v = 0, n = 0;
        do { asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory"); } while (v < target && ++n < SPIN_LIMIT);
    }
    for (int wn = 0; wn < nwin; wn++) fill_window((const unsigned char*)w, nchunk * 64, wn, PRODUCER_CHUNKS);
}
"""


def threads(work):
    return 288 if str(work).startswith("wg16s") else 256


def source(feed, steps, ctas, work):
    mma = str(work).startswith(("mma", "wg"))
    assert feed == "regs" or not mma, "the mma works run on the regs feed"
    body = (REGS if feed == "regs" else RING).replace("WORK", work_src(work)).replace("PRE", pre_src(work)).replace("POST", post_src(work))
    sync = "asm volatile(\"bar.sync 1, 256;\" ::: \"memory\")" if threads(work) > 256 else "__syncthreads()"
    defs = (f"#define AH {steps}\n#define R {steps}\n#define CTAS {ctas}\n#define SPIN_LIMIT {SPIN_LIMIT}u\n"
            f"#define THREADS {threads(work)}\n#define CONSUMER_SYNC() {sync}\n"
            f"#define PRODUCER_CHUNKS {1 if work == 'wg16sq' else 4}\n#define MBAR_WINDOWS {int(work in MBAR_WORKS)}\n")
    return defs + COMMON + (MMA_FUNCS if mma else "") + (PRODUCER if threads(work) > 256 else "") + body + KERNEL


def smem_need(feed, steps, work):
    """The dynamic shared memory a configuration reads and writes."""
    w = str(work)
    if feed == "ring":
        return steps * 2 * 4096
    if w.startswith("mma"):
        return int(w[3:]) * TROW
    if w in MBAR_WORKS:
        return 3 * 8192 + 1024 + 64
    if w.startswith("wg16w"):
        return 2 * int(w[5:].rstrip("bc") or 2) * 4096 + 1024
    if w.startswith("wg"):
        return 4096 + 1024
    return 0


class Probe:
    def __init__(self, feed, steps, ctas, work, smem_per_sm, pin=True):
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        check_cu(cuda.cuModuleLoadData(ctypes.byref(self.mod), compile_cubin(source(feed, steps, ctas, work))), "cuModuleLoadData")
        check_cu(cuda.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"probe"), "cuModuleGetFunction")
        # Dynamic shared memory that holds the SM to C CTAs (1 KB a CTA is
        # the driver's reserve; the ring's mbarriers are static), which
        # also leaves L1 only what the carveout does not take (about 28 KB
        # of the SM's 256); unpinned, only what the work needs, the CTAs an
        # SM then set by the registers (launch bounds C) and L1 left large.
        ring = steps if feed == "ring" else 0
        need = smem_need(feed, steps, work)
        self.dyn = smem_per_sm // ctas - 1024 - ring * 16 - 64 if pin else max(need, 16)
        assert self.dyn >= need, (feed, steps, ctas, work, self.dyn, need)
        check_cu(cuda.cuFuncSetAttribute(self.fn, 8, self.dyn), "cuFuncSetAttribute")
        regs, occ = ctypes.c_int(), ctypes.c_int()
        check_cu(cuda.cuFuncGetAttribute(ctypes.byref(regs), 4, self.fn), "cuFuncGetAttribute")
        self.threads = threads(work)
        check_cu(cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(occ), self.fn, self.threads, ctypes.c_size_t(self.dyn)),
                 "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        self.regs, self.ctas = regs.value, occ.value

    def launch(self, w1, n1, c1, w2, n2, c2, count, dep, late, out):
        vals = [ctypes.c_void_p(w1.data_ptr()), ctypes.c_int(n1), ctypes.c_int(c1), ctypes.c_void_p(w2.data_ptr()), ctypes.c_int(n2),
                ctypes.c_void_p(count.data_ptr()), ctypes.c_int(dep), ctypes.c_void_p(late.data_ptr()), ctypes.c_void_p(out.data_ptr())]
        args = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        check_cu(cuda.cuLaunchKernel(self.fn, c1 + c2, 1, 1, self.threads, 1, 1, self.dyn, stream, args, None), "cuLaunchKernel")

    def close(self):
        cuda.cuModuleUnload(self.mod)


def xor_all(t):
    return int(np.bitwise_xor.reduce(t.cpu().numpy().view(np.uint32)))


def main():
    torch.zeros(1, device="cuda")
    props = torch.cuda.get_device_properties(0)
    smem_per_sm = 228 * 1024  # sm_90: 228 KB an SM, 227 KB a CTA at most
    flush = torch.zeros(64 << 20, dtype=torch.int32, device="cuda")
    count = torch.zeros(1, dtype=torch.int32, device="cuda")  # GEMM1's CTAs done
    late = torch.zeros(1, dtype=torch.int32, device="cuda")
    print(f"{props.name}, {props.multi_processor_count} SMs")
    # (label, experts, GEMM1 and GEMM2 chunks a group, modes, feeds)
    every = [("regs", 4, 3), ("regs", 8, 2), ("regs", 2, 4), ("ring", 4, 3), ("ring", 8, 3), ("ring", 4, 4)]
    parts = [("M=1 payload", 8, 56, 48, [("GEMM1", 0), ("GEMM2", 0)], every, (0, 12)),
             ("M=1 +scales", 8, 60, 50, [("GEMM1", 0), ("GEMM2", 0), ("both", 0), ("both", 1)], every, (0, 12)),
             ("E=28 +scales", 28, 60, 50, [("GEMM1", 0), ("GEMM2", 0), ("both", 0), ("both", 1)], every[:2] + every[3:4], (0, 12))]
    if sys.argv[1:] == ["mma"]:  # the 28 experts only, the forward's order, the widening alone and with the loops' MMAs
        parts = [("E=28 +scales", 28, 60, 50, [("both", 1)], [("regs", 2, 4), ("regs", 4, 3), ("regs", 2, 3)], (12, "mma8", "mma16"))]
    if sys.argv[1:] == ["wg"]:  # the same with the 16 tokens on wgmma
        parts = [("E=28 +scales", 28, 60, 50, [("both", 1)], [("regs", 2, 4), ("regs", 4, 3), ("regs", 2, 3), ("regs", 4, 2)],
                  (12, "mma16", "wg16", "wg16p"))]
    if sys.argv[1:] == ["wg-window"]:  # wgmma with its tokens staged a window at a time, beside it staged once
        parts = [("E=28 +scales", 28, 60, 50, [("both", 0), ("both", 1)], [("regs", 4, 3), ("regs", 4, 2), ("regs", 2, 3)],
                  ("wg16", "wg16w"))]
    if sys.argv[1:] == ["wg-windows"]:  # and windows of 4 and 8 steps
        parts = [("E=28 +scales", 28, 60, 50, [("both", 0), ("both", 1)], [("regs", 4, 3), ("regs", 2, 4)],
                  ("wg16w", "wg16w4", "wg16w8"))]
    pins = (True,)
    if sys.argv[1:] == ["l1"]:  # occupancy pinned by shared memory (small L1) against set by registers (large L1)
        parts = [("E=28 +scales", 28, 60, 50, [("both", 1)], [("regs", 4, 3), ("regs", 2, 4)], (12, "mma16", "wg16"))]
        pins = (True, False)
    if sys.argv[1:] == ["wg-window-parts"]:  # what a window's staging costs: its copies, its waits and barriers
        parts = [("E=28 +scales", 28, 60, 50, [("both", 1)], [("regs", 4, 3), ("regs", 2, 4)], ("wg16", "wg16w", "wg16wb", "wg16wc"))]
        pins = (False,)
    if sys.argv[1:] == ["wg-mbar"]:  # windows filled by one thread onto mbarriers, no CTA barrier
        parts = [("E=28 +scales", 28, 60, 50, [("both", 0), ("both", 1)], [("regs", 4, 3), ("regs", 2, 4), ("regs", 2, 3)],
                  ("wg16", "wg16m"))]
        pins = (False,)
    if sys.argv[1:] == ["wg-producer"]:  # the windows filled by a warp of their own
        parts = [("E=28 +scales", 28, 60, 50, [("both", 0), ("both", 1)], [("regs", 4, 3), ("regs", 2, 4), ("regs", 2, 3)],
                  ("wg16", "wg16s"))]
        pins = (False,)
    if sys.argv[1:] == ["wg-producer-quarter"]:  # and with a quarter of the bytes
        parts = [("E=28 +scales", 28, 60, 50, [("both", 0), ("both", 1)], [("regs", 4, 3), ("regs", 2, 4)], ("wg16s", "wg16sq"))]
        pins = (False,)
    if sys.argv[1:] == ["l1-m1"]:  # the same for M=1's bytes (its dataflow floor, docs/PERF.md)
        parts = [("M=1 +scales", 8, 60, 50, [("both", 0), ("both", 1)], [("regs", 4, 3), ("regs", 8, 2), ("regs", 2, 4), ("regs", 4, 4)], (0, 12))]
        pins = (True, False)
    if sys.argv[1:] == ["wg-nowait"]:  # and with GEMM2 not waiting for GEMM1 at all: below any order the forward can keep
        parts = [("E=28 +scales", 28, 60, 50, [("both", 0), ("both", 1)], [("regs", 2, 4), ("regs", 4, 3), ("regs", 2, 3), ("regs", 4, 2)],
                  (12, "mma16", "wg16"))]
    print(f"{'bytes':<13} {'mode':<18} {'feed':<5} {'CTA/SM':>6} {'steps':>5} {'work':>4} {'MB':>6} {'us':>7} {'GB/s':>6}")
    for part, experts, n1, n2, modes, feeds, works in parts:
        g1, g2 = experts * 6144 // 64, experts * 3584 // 64  # 64-row groups: [up; gate] rows of N=3072, K=3584 rows
        w1 = torch.randint(-2**31, 2**31 - 1, (g1 * n1 * CHUNK // 4,), dtype=torch.int32, device="cuda")
        w2 = torch.randint(-2**31, 2**31 - 1, (g2 * n2 * CHUNK // 4,), dtype=torch.int32, device="cuda")
        x1, x2 = xor_all(w1), xor_all(w2)
        out = torch.zeros((g1 + g2) * 128, dtype=torch.int32, device="cuda")
        for work in works:
            for feed, steps, ctas, pin in [(f, st, c, pn) for f, st, c in feeds for pn in pins]:
                try:
                    p = Probe(feed, steps, ctas, work, smem_per_sm, pin)
                except SystemExit as e:  # a compile error: say so, go on
                    print(f"{part:<13} {feed:<5} {ctas:>6} {steps:>5} failed: {str(e)[:400]}", flush=True)
                    continue
                for mode, dep in modes:
                    c1 = g1 // 2 if mode in ("GEMM1", "both") else 0
                    c2 = g2 // 2 if mode in ("GEMM2", "both") else 0
                    nbytes = (c1 * 2 * n1 + c2 * 2 * n2) * CHUNK
                    ts = []
                    late.zero_()
                    for rep in range(16):
                        count.zero_()
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        flush.sum()
                        a.record(); p.launch(w1, n1, c1, w2, n2, c2, count, dep, late, out); b.record()
                        torch.cuda.synchronize()
                        if rep: ts.append(a.elapsed_time(b) * 1000)
                    us = statistics.median(ts)
                    note = ""
                    if work == 0:
                        want = (x1 if c1 else 0) ^ (x2 if c2 else 0)
                        got = xor_all(out[: (c1 + c2) * 256])
                        note = " read ok" if got == want else f" WRONG ({got:#x} against {want:#x})"
                    if int(late.item()):
                        note += " WAIT BOUND HIT"
                    note += f" [{p.ctas} CTAs an SM, {p.regs} registers{'' if pin else ', shared memory unpinned'}]"
                    name = mode + (" (GEMM2 waits)" if dep else "") if mode == "both" else mode
                    print(f"{part:<13} {name:<18} {feed:<5} {ctas:>6} {steps:>5} {work:>4} {nbytes / 1e6:>6.1f} {us:>7.1f} {nbytes / us / 1e3:>6.0f}{note}", flush=True)
                p.close()
        del w1, w2


if __name__ == "__main__":
    main()
