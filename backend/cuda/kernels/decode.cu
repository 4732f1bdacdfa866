// ------------------------------------------------------ the decode path --
//
// For few tokens the layer streams weights: every touched expert's rows are
// spread over all SMs, each warp reads its rows once with 16-byte loads,
// several k-chunks in flight, and runs the same block-scaled MMA as the
// grouped path (so the per-block arithmetic is the same), with the tokens
// on the MMA's 8-wide side. Weights are pre-arranged at prepare time in
// tiles of 16 rows x KMOE_STAGE_K k (1 KB of packed FP4 + 64 B of scales):
// lane (g, t) of a warp finds, at bytes [32*lane, 32*lane + 32) of the
// tile, the 4 bytes of rows g and g + 8 for each of the 4 32-blocks in the
// MMA's permuted-k order; the scales are [16 rows][4 blocks]. K and N are
// padded to KMOE_STAGE_K with zero weights and zero x codes (exact).
//
// Three kernels and the finalize: the prologue (x quantized to padded codes
// and float scales, routing into an expert-sorted permutation and a list of
// touched experts), GEMM1 with the activation and requantization, GEMM2.

#define DEC_TILE_BYTES (16 * KC / 2)
#define DEC_TILE_SCALES (16 * KC / 32)
// k-chunks whose loads are issued together: more for fewer token subtiles
// (fewer registers held by accumulators and operand pointers).
#define DEC_UNROLL(NS) ((NS) == 1 ? 8 : 4)

// The prologue. CTA 0 routes; the other CTAs quantize x (or copy the given
// x_q) into the padded layout: codes [M][k_pad], float scales
// [M][k_pad / 32] (1.0 for the padding).
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_decode_prologue(const DecodePrologueArgs a) {
    extern __shared__ int s_counts[]; // [e_local + 1]
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (blockIdx.x == 0) {
        route_cta(a.ids, a.m * a.top_k, a.rank, a.e_local, s_counts, a.pos, a.perm, a.offset, a.touched, nullptr, 0);
        return;
    }
    int kb_pad = a.k_pad / BLOCK, kb_real = a.k / BLOCK;
    int nblocks = a.m * kb_pad;
    int nwarps = (gridDim.x - 1) * (blockDim.x >> 5);
    for (int b = (blockIdx.x - 1) * (blockDim.x >> 5) + warp; b < nblocks; b += nwarps) {
        int tok = b / kb_pad, kb = b % kb_pad;
        u64 dst = (u64)tok * a.k_pad + dec_bpos(kb * BLOCK + lane);
        if (kb >= kb_real) {
            a.xq[dst] = 0;
            if (lane == 0) a.xsf[b] = 1.0f;
            continue;
        }
        u64 src = (u64)tok * a.k + (u64)kb * BLOCK + lane;
        if (a.form == KMOE_FORM_FLOAT) {
            u32 sc;
            u32 c = warp_quantize_e4m3(a.x[src], a.recipe, &sc);
            a.xq[dst] = (u8)c;
            if (lane == 0) a.xsf[b] = e8m0_to_float(sc);
        } else {
            a.xq[dst] = a.xq_in[src];
            if (lane == 0) a.xsf[b] = e8m0_to_float(a.xs_in[(u64)tok * kb_real + kb]);
        }
    }
}

// A group of U k-chunks of a warp's weight tile in registers.
template <int U>
struct DecChunks {
    uint4 wa[U][2];
    u32 wsc[U][2];
};

template <int U>
__device__ __forceinline__ void dec_load(DecChunks<U>& d, const u8* __restrict__ w, const u8* __restrict__ ws, int c0,
                                         int nchunk, int lane) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (c0 + u < nchunk) {
            const uint4* tile = (const uint4*)(w + (u64)(c0 + u) * DEC_TILE_BYTES) + 2 * lane;
            d.wa[u][0] = __ldg(tile);
            d.wa[u][1] = __ldg(tile + 1);
            const u32* sc = (const u32*)(ws + (u64)(c0 + u) * DEC_TILE_SCALES);
            d.wsc[u][0] = __ldg(sc + (lane >> 2));
            d.wsc[u][1] = __ldg(sc + 8 + (lane >> 2));
        }
    }
}

template <int NS, int U>
__device__ __forceinline__ void dec_compute(float (&acc)[NS][4], const DecChunks<U>& d, int c0, int nchunk,
                                            const u8* const (&bcode)[NS], const float* const (&bsc0)[NS],
                                            const float* const (&bsc1)[NS], int nsub, int t) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (c0 + u >= nchunk) break;
        int c = c0 + u;
        // The chunk's token operand: 32 contiguous code bytes (blocks 0..3)
        // and 4 scales per column, per subtile.
        uint4 bq[NS][2];
        float4 cs0[NS], cs1[NS];
#pragma unroll
        for (int s = 0; s < NS; s++) {
            if (s >= nsub) break;
            const uint4* bp = (const uint4*)(bcode[s] + c * KC + t * 32);
            bq[s][0] = __ldg(bp);
            bq[s][1] = __ldg(bp + 1);
            cs0[s] = __ldg((const float4*)(bsc0[s] + c * 4));
            cs1[s] = __ldg((const float4*)(bsc1[s] + c * 4));
        }
        const u32 a0[4] = {d.wa[u][0].x, d.wa[u][0].y, d.wa[u][0].z, d.wa[u][0].w};
        const u32 a1[4] = {d.wa[u][1].x, d.wa[u][1].y, d.wa[u][1].z, d.wa[u][1].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            u32 a[4] = {widen4(a0[q] & 0xFFFFu), widen4(a1[q] & 0xFFFFu), widen4(a0[q] >> 16), widen4(a1[q] >> 16)};
            u32 s0 = (d.wsc[u][0] >> (8 * q)) & 0xFFu, s1 = (d.wsc[u][1] >> (8 * q)) & 0xFFu;
            u32 sa_lane = (t & 1) ? s1 : s0;
            float rs0 = e8m0_to_float(s0), rs1 = e8m0_to_float(s1);
#pragma unroll
            for (int s = 0; s < NS; s++) {
                if (s >= nsub) break;
                u32 b[2];
                const uint4& h = bq[s][q >> 1];
                b[0] = (q & 1) ? h.z : h.x;
                b[1] = (q & 1) ? h.w : h.y;
                float c0s = q == 0 ? cs0[s].x : q == 1 ? cs0[s].y : q == 2 ? cs0[s].z : cs0[s].w;
                float c1s = q == 0 ? cs1[s].x : q == 1 ? cs1[s].y : q == 2 ? cs1[s].z : cs1[s].w;
                mx_mma(acc[s], a, b, rs0, rs1, c0s, c1s, sa_lane, 0u);
            }
        }
    }
}

// One warp's streamed MMA over a row tile: acc[s] += rows(g, g+8) x tokens
// of subtile s, over nchunk k-chunks of pre-arranged tiles at w (payload)
// and ws (scales). bcode[s] is the permuted code row of the token in column
// g of subtile s, bsc0/bsc1[s] the float scale rows of the tokens in
// columns 2t, 2t+1 (zero rows for missing tokens). The loads of U chunks
// are issued together, then computed. (Software pipelining, the next group
// in flight while this one computes, measured no faster: docs/PERF.md.)
template <int NS>
__device__ __forceinline__ void dec_stream(float (&acc)[NS][4], const u8* __restrict__ w, const u8* __restrict__ ws,
                                           int nchunk, const u8* const (&bcode)[NS], const float* const (&bsc0)[NS],
                                           const float* const (&bsc1)[NS], int nsub, int lane, int t) {
    constexpr int U = DEC_UNROLL(NS);
    for (int c0 = 0; c0 < nchunk; c0 += U) {
        DecChunks<U> d;
        dec_load<U>(d, w, ws, c0, nchunk, lane);
        dec_compute<NS, U>(acc, d, c0, nchunk, bcode, bsc0, bsc1, nsub, t);
    }
}

// One pass of a decode GEMM: acc = the warp's rows x the pass's tokens
// (dec_stream), the token rows found by row(j) for the pass's column j
// (-1: no token, read as zero_row), in code (ld bytes a row) and its float
// scales sf (ld / 32 a row).
template <int NS, class RowOf>
__device__ __forceinline__ void dec_pass(float (&acc)[NS][4], const u8* __restrict__ w, const u8* __restrict__ ws,
                                         int nchunk, const u8* code, const float* sf, int ld, int zero_row, RowOf row,
                                         int nsub, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const u8* bcode[NS];
    const float* bsc0[NS];
    const float* bsc1[NS];
#pragma unroll
    for (int s = 0; s < NS; s++) {
        int rg = row(s * 8 + g), r0 = row(s * 8 + 2 * t), r1 = row(s * 8 + 2 * t + 1);
        bcode[s] = code + (u64)(rg >= 0 ? rg : zero_row) * ld;
        bsc0[s] = sf + (u64)(r0 >= 0 ? r0 : zero_row) * (ld / 32);
        bsc1[s] = sf + (u64)(r1 >= 0 ? r1 : zero_row) * (ld / 32);
    }
    for (int s = 0; s < NS; s++) for (int i = 0; i < 4; i++) acc[s][i] = 0.0f;
    dec_stream<NS>(acc, w, ws, nchunk, bcode, bsc0, bsc1, nsub, lane, t);
}

// GEMM1 of the decode path: CTA (f, j) computes features [32f, 32f + 32)
// (warp w: 8 of them, up rows and gate rows as in the grouped GEMM1) of the
// j-th touched expert for all its tokens, then the activation and the
// requantization of that one 32-feature block, in passes of 8 NS tokens.
// NS token subtiles of 8 (a pass covers 8 NS tokens of the expert).
template <int NS>
__device__ __forceinline__ void decode_gemm1(const DecodeGemm1Args a) {
    constexpr int TOK = 8 * NS;
    __shared__ u32 s_amax[4][TOK];
    __shared__ int s_tok[TOK];
    int ntouched = a.touched[a.e_local];
    if ((int)blockIdx.y >= ntouched) return;
    int e = a.touched[blockIdx.y];
    int row0 = a.offset[e], count = a.offset[e + 1] - row0;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int fg = blockIdx.x * 4 + warp; // feature group of 8
    int fw = fg * 8;
    int nchunk = a.k_pad / KC;
    u64 tile0 = ((u64)e * (a.n / 8) + fg) * nchunk;
    const u8* w = a.w + tile0 * DEC_TILE_BYTES;
    const u8* ws = a.ws + tile0 * DEC_TILE_SCALES;
    const float* p = a.params + (a.n_params == 1 ? 0 : e) * KMOE_PARAM_STRIDE;
    for (int base = 0; base < count; base += TOK) {
        int cnt = imin(TOK, count - base);
        __syncthreads(); // s_tok and s_amax of the previous pass are done with
        if (threadIdx.x < TOK) s_tok[threadIdx.x] = threadIdx.x < cnt ? a.perm[row0 + base + threadIdx.x] / a.top_k : -1;
        __syncthreads();
        int nsub = (cnt + 7) / 8;
        float acc[NS][4];
        dec_pass<NS>(acc, w, ws, nchunk, a.xq, a.xsf, a.k_pad, a.zero_row, [&](int j) { return s_tok[j]; }, nsub, lane);
        act_requant_store<NS>(acc, nsub, cnt, s_amax, warp, 0, p, a.kind, a.chain, a.recipe, g, t, a.aq, a.aqs, a.aqsf,
                             row0 + base, a.n_pad, fw, true, nullptr, fc1_bias_row(a.b1, e, a.n), a.n);
    }
}

extern "C" __global__ void __launch_bounds__(KMOE_DECODE_THREADS) kmoe_decode_gemm1_n1(const DecodeGemm1Args a) { decode_gemm1<1>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_DECODE_THREADS) kmoe_decode_gemm1_n2(const DecodeGemm1Args a) { decode_gemm1<2>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_DECODE_THREADS) kmoe_decode_gemm1_n4(const DecodeGemm1Args a) { decode_gemm1<4>(a); }

// GEMM2 of the decode path: CTA (r, j), warp w computes output rows
// [16(4r + w), +16) of the j-th touched expert for all its tokens: y[row, f]
// in float32, summed over slots by kmoe_finalize.
template <int NS>
__device__ __forceinline__ void decode_gemm2(const DecodeGemm2Args a) {
    constexpr int TOK = 8 * NS;
    int ntouched = a.touched[a.e_local];
    if ((int)blockIdx.y >= ntouched) return;
    int e = a.touched[blockIdx.y];
    int row0 = a.offset[e], count = a.offset[e + 1] - row0;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int rb = blockIdx.x * 4 + warp; // 16-row block of the output
    if (rb * 16 >= a.k) return;
    int nchunk = a.n_pad / KC;
    u64 tile0 = ((u64)e * (a.k / 16) + rb) * nchunk;
    const u8* w = a.w + tile0 * DEC_TILE_BYTES;
    const u8* ws = a.ws + tile0 * DEC_TILE_SCALES;
    int f = rb * 16;
    for (int base = 0; base < count; base += TOK) {
        int cnt = imin(TOK, count - base);
        int nsub = (cnt + 7) / 8, r = row0 + base;
        float acc[NS][4];
        dec_pass<NS>(acc, w, ws, nchunk, a.aq, a.aqsf, a.n_pad, a.zero_row, [=](int j) { return j < cnt ? r + j : -1; }, nsub,
                     lane);
#pragma unroll
        for (int s = 0; s < NS; s++) {
            if (s >= nsub) break;
            int c0 = s * 8 + 2 * t, c1 = c0 + 1;
            if (c0 < cnt) {
                a.y[(u64)(row0 + base + c0) * a.k + f + g] = acc[s][0];
                a.y[(u64)(row0 + base + c0) * a.k + f + g + 8] = acc[s][2];
            }
            if (c1 < cnt) {
                a.y[(u64)(row0 + base + c1) * a.k + f + g] = acc[s][1];
                a.y[(u64)(row0 + base + c1) * a.k + f + g + 8] = acc[s][3];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(KMOE_DECODE_THREADS) kmoe_decode_gemm2_n1(const DecodeGemm2Args a) { decode_gemm2<1>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_DECODE_THREADS) kmoe_decode_gemm2_n2(const DecodeGemm2Args a) { decode_gemm2<2>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_DECODE_THREADS) kmoe_decode_gemm2_n4(const DecodeGemm2Args a) { decode_gemm2<4>(a); }
