// --------------------------------------------------- the wgmma-fp4 path --
//
// The grouped GEMMs on wgmma with the weights kept as MXFP4 in memory
// (sm_90a only, like the wgmma path): each thread loads its part of the
// A operand (64 weight rows x 16 k a step) straight from global memory,
// 16 bytes per 64-k chunk in the layout of internal/layout/fp4, widens it to
// BF16 in registers exactly (f4_widen) and issues wgmma with A from
// registers and the tokens as B from shared memory, NT of them (the MMA's
// N: 8 .. 128), so few tokens per expert waste little of the MMA and the
// weights cost their 4.25 bits a weight of memory traffic. BF16 products
// are exact in float32, so, as on the wgmma path, the tensor cores sum a
// whole row in float32 with no per-block promotion.
//
// One CTA: two warpgroups, 64 weight rows each (GEMM1: 32 features' up
// and gate rows, so each thread holds an up and its gate, as in the
// grouped GEMM1; GEMM2: 64 output rows), and NT tokens of one expert,
// staged as BF16 rows in f4_stages<NT>() cp.async stages of 128 k (a
// step: two layout chunks) shared by both warpgroups. The weights of step
// c + f4_ahead<NT>() are loaded as step c's are widened, chunk by chunk; a
// warpgroup's wgmmas on a chunk are waited for before it widens the next
// (the other warpgroups of the SM overlap them). One barrier a step (128 k
// of 64 rows: 64 weights a thread, measured to be worth it against one a
// 64-k chunk): past it, every warpgroup's wgmmas on step c - 1 are done,
// so step c - 2's stage is refilled there.

#define F4_CHUNK_BYTES KMOE_F4_CHUNK_BYTES
#define F4_CHUNK_SCALES KMOE_F4_CHUNK_SCALES
static_assert(F4_CHUNK_BYTES == 128 * 16 && F4_CHUNK_SCALES == 32 * 4, "16 payload bytes a thread and 4 scale bytes a quad a chunk");

// The scale words of the AH 128-k steps a thread has in flight: its
// quad's words of four chunks (two steps) sit side by side (internal/layout/fp4),
// so one 16-byte load brings two steps' scales. wsq: the quad's words of
// step pair 0 (pair p at + 32 p). Slot u holds steps c0 + u, c0 + u + 1
// for even u (c0 a multiple of AH, so AH is even).
template <int AH>
struct F4Scales {
    static_assert(AH % 2 == 0, "whole step pairs in flight");
    uint4 q[AH / 2];
    __device__ __forceinline__ void load_first(const uint4* __restrict__ wsq, int nstep) {
#pragma unroll
        for (int i = 0; i < AH / 2; i++) {
            if (2 * i < nstep) q[i] = __ldg(wsq + 32 * i);
        }
    }
    // The word of chunk h of the step in slot u.
    __device__ __forceinline__ u32 word(int u, int h) const {
        const uint4& s = q[u / 2];
        return (u & 1) ? (h ? s.w : s.z) : (h ? s.y : s.x);
    }
    // Once step c (slot u) is widened: at odd u both steps of the pair
    // are, so its slot takes steps c + AH - 1 and c + AH.
    __device__ __forceinline__ void reload(const uint4* __restrict__ wsq, int u, int c, int nstep) {
        if ((u & 1) && c + AH - 1 < nstep) q[u / 2] = __ldg(wsq + 32 * ((c + AH - 1) / 2));
    }
};

// a * (the BF16 in half H of m, in both halves), round to nearest: exact
// here (the multiplier is a power of two and the product a BF16 value).
// fma with -0 leaves a product's sign of zero as it is. The half is
// broadcast with a mov that ptxas folds into the HFMA2's operand (.H0_H0,
// .H1_H1), so one word carries the multipliers of two rows.
template <int H>
__device__ __forceinline__ u32 bf16x2_mul_half(u32 a, u32 m) {
    u32 d;
    if constexpr (H == 0)
        asm("{\n.reg .b16 l, h;\n.reg .b32 b;\nmov.b32 {l, h}, %2;\nmov.b32 b, {l, l};\n"
            "fma.rn.bf16x2 %0, %1, b, %3;\n}\n"
            : "=r"(d) : "r"(a), "r"(m), "r"(0x80008000u));
    else
        asm("{\n.reg .b16 l, h;\n.reg .b32 b;\nmov.b32 {l, h}, %2;\nmov.b32 b, {h, h};\n"
            "fma.rn.bf16x2 %0, %1, b, %3;\n}\n"
            : "=r"(d) : "r"(a), "r"(m), "r"(0x80008000u));
    return d;
}

// The multiplier pairs of a scale word (bytes: row r0 block 0, r0 block
// 1, r1 block 0, r1 block 1, each s + 126): the BF16 2^(s-1) of r0 in the
// low half and of r1 in the high half, for block 0 (*b0) and block 1
// (*b1). Two instructions each.
__device__ __forceinline__ void f4_mults(u32 sc, u32* b0, u32* b1) {
    *b0 = (sc << 7) & 0x7F807F80u;
    *b1 = (sc >> 1) & 0x7F807F80u;
}

// One word of the layout (internal/layout/fp4) -> the four A registers of a k16
// step: each half's sign to bit 15 and magnitude bits to 8..6 (the value
// E2M1 x 2^-126, code 1 a BF16 subnormal), then times 2^(s-1): mm's low
// half is row r0's multiplier (registers 0 and 2), its high half row r1's
// (1 and 3). Nine integer instructions a word (a mask; a shift or a
// rotation and a mask, twice; two shifts, two masks): no placement does it
// in fewer (internal/layout/fp4), and the placement before took eleven.
__device__ __forceinline__ void f4_widen(u32 (&a)[4], u32 q, u32 mm) {
    u32 o0 = q & 0x81C081C0u;
    u32 o1 = (q << 6) & 0x81C081C0u;
    u32 o2 = __funnelshift_l(q, q, 12) & 0x81C081C0u; // a rotation: one SHF
    u32 o3 = ((q << 2) & 0x80C080C0u) | ((q >> 6) & 0x01000100u);
    a[0] = bf16x2_mul_half<0>(o0, mm);
    a[1] = bf16x2_mul_half<1>(o1, mm);
    a[2] = bf16x2_mul_half<0>(o2, mm);
    a[3] = bf16x2_mul_half<1>(o3, mm);
}

// One 64-k chunk of a thread's weights (its four words w, its scale word
// sc) -> the A registers of the chunk's four k16 steps.
__device__ __forceinline__ void f4_widen_chunk(u32 (&a)[4][4], uint4 w, u32 sc) {
    u32 b0, b1;
    f4_mults(sc, &b0, &b1);
    f4_widen(a[0], w.x, b0);
    f4_widen(a[1], w.y, b0);
    f4_widen(a[2], w.z, b1);
    f4_widen(a[3], w.w, b1);
}
