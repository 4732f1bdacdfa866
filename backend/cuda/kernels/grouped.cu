// ------------------------------------------------------ grouped GEMMs --
//
// Both GEMMs use one CTA shape: 8 warps, 128 weight rows (16 per warp, the
// MMA's M side) x TT tokens of one expert (the N side, TT/8 subtiles of 8).
// TT is a template parameter with two instances: 64 (two CTAs per SM, for
// few tokens per expert) and 128 (more reuse of each weight load, for many);
// the host picks one per forward. The token operand (E4M3 codes, gathered by the permutation) is staged
// in shared memory with cp.async, KC = 128 elements (4 scale blocks) per
// stage, two stages; each warp loads its own weight rows straight from
// global memory, one 32-bit load (8 FP4 codes) per row per block.
//
// Within each 32-block the k order is permuted identically for both
// operands (any bijection leaves the dot product unchanged): thread t of a
// quad takes physical k [8t, 8t+8) for logical k [4t, 4t+4) and
// [16+4t, 16+4t+4), so its A registers come from one 32-bit load of packed
// FP4 and its B registers from one 64-bit load of E4M3 codes.

#define SROW (KC + 16) // padded bytes per staged token row


// Which expert and rows tile j of the grouped GEMM covers.
struct Tile {
    int expert, row0, count;
};

// warp_find_tile finds tile j's expert and rows (false past the last
// tile) with the 32 lanes of a warp, all active (each gets the answer):
// tile_base rises from tile_base[0] = 0, so the experts whose
// first tile is at or before j are a prefix and the last of them, the
// prefix's length less one, is expert_of's answer; the lanes read the
// bases side by side and count them with a vote, one round of loads
// where expert_of's binary search made five dependent ones (28 experts),
// each an L2 round trip at the start of every GEMM CTA.
__device__ __forceinline__ bool warp_find_tile(const int* offset, const int* tile_base, int elocal, int tt, int j, Tile* t) {
    const int lane = threadIdx.x & 31, tiles = tile_base[elocal];
    int n = 0;
    for (int i0 = 0; i0 < elocal; i0 += 32) {
        const int i = i0 + lane;
        n += __popc(__ballot_sync(0xFFFFFFFFu, i < elocal && tile_base[i] <= j));
    }
    if (j >= tiles) return false;
    const int e = n - 1;
    t->expert = e;
    t->row0 = offset[e] + (j - tile_base[e]) * tt;
    t->count = imin(tt, offset[e + 1] - t->row0);
    return true;
}

// block_find_tile finds this CTA's tile (blockIdx.y) once, in warp 0
// (warp_find_tile), and gives it to every thread; false for a CTA past the
// last tile.
__device__ __forceinline__ bool block_find_tile(const int* offset, const int* tile_base, int elocal, int tt, Tile* out) {
    __shared__ Tile s_tile;
    __shared__ int s_ok;
    if (threadIdx.x < 32) {
        Tile t;
        const bool ok = warp_find_tile(offset, tile_base, elocal, tt, blockIdx.y, &t);
        if (threadIdx.x == 0) {
            s_ok = ok;
            s_tile = t;
        }
    }
    __syncthreads();
    *out = s_tile;
    return s_ok;
}

// block_tile is block_find_tile that, for a tile, also writes src[i], the
// operand row of the tile's token i (-1 past its count): the token of slot
// row row0 + i (perm[row] / topk) where perm is given, as GEMM1 reads x,
// else the slot row itself, as GEMM2 reads the intermediate; every thread
// sees src once it returns.
template <int TT>
__device__ __forceinline__ bool block_tile(const int* offset, const int* tile_base, int elocal, const int* perm,
                                           int topk, int* src, Tile* out) {
    static_assert(TT <= KMOE_THREADS, "a thread per token row");
    if (!block_find_tile(offset, tile_base, elocal, TT, out)) return false;
    if (threadIdx.x < TT) {
        int i = threadIdx.x, row = out->row0 + i;
        src[i] = i < out->count ? (perm ? perm[row] / topk : row) : -1;
    }
    __syncthreads();
    return true;
}

// Stage k-chunk c of the tile's tokens: codes [TT][KC] and scales [TT][4].
// src_row[i] is the operand row of token i (or -1).
template <int TT>
__device__ __forceinline__ void stage_tokens(u8 (*sb)[SROW], u8 (*ss)[4], const u8* codes, const u8* scales,
                                             int ldk, const int* src_row, int c) {
    // TT * KC / 16 = 1024 16-byte pieces over 256 threads.
    for (int piece = threadIdx.x; piece < TT * KC / 16; piece += blockDim.x) {
        int tok = piece / (KC / 16), off = (piece % (KC / 16)) * 16;
        int r = src_row[tok];
        const u8* src = codes + (u64)(r < 0 ? 0 : r) * ldk + c * KC + off;
        cp_async16(&sb[tok][off], src, r >= 0);
    }
    if (threadIdx.x < TT) {
        int r = src_row[threadIdx.x];
        const u8* src = scales + (u64)(r < 0 ? 0 : r) * (ldk / 32) + c * (KC / 32);
        cp_async4(&ss[threadIdx.x][0], src, r >= 0);
    }
}

// The native body reads the token scale bytes in its lane convention; the
// sm_90 body uses the float scales converted once per stage (csf).
__device__ __forceinline__ u32 sb_lane_of(u8 x) {
#if defined(KMOE_NATIVE_MX)
    return (u32)x;
#else
    return 0u;
#endif
}

// Shared memory of one GEMM CTA: the staged token operand (two stages),
// its scales as bytes and as floats, and each tile row's source row.
template <int TT>
struct __align__(16) GemmSmem {
    u8 sb[2][TT][SROW];
    u8 ss[2][TT][4];
    float csf[4][TT];
    int src[TT];
};

// A warp's weight operand: rows g (a0, s0) and g + 8 (a1, s1) of its MMA
// tile, packed FP4 rows and their scale rows.
struct WarpRows {
    const u8* __restrict__ a0;
    const u8* __restrict__ a1;
    const u8* __restrict__ s0;
    const u8* __restrict__ s1;
};

// Weight registers of one k-chunk: four 32-blocks of rows g and g + 8.
struct ChunkA {
    u32 a0[4], a1[4], s0[4], s1[4];
};

__device__ __forceinline__ void load_a(ChunkA& d, const WarpRows& w, int c, int t) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int kb = c * 4 + q;
        d.a0[q] = *(const u32*)(w.a0 + kb * 16 + 4 * t);
        d.a1[q] = *(const u32*)(w.a1 + kb * 16 + 4 * t);
        d.s0[q] = w.s0[kb];
        d.s1[q] = w.s1[kb];
    }
}

// The k loop of both GEMMs: acc[s] += the block-scaled MMA of the warp's
// 16 weight rows with token subtile s, over ldk. The token operand is
// staged one chunk ahead with cp.async and the weights are loaded into
// registers one chunk ahead, so both are in flight while the current
// chunk's MMAs run.
template <int TT>
__device__ __forceinline__ void gemm_k_loop(float (&acc)[TT / 8][4], GemmSmem<TT>& sm, const WarpRows& w, int ldk,
                                            const u8* codes, const u8* scales, int nsub, int g, int t) {
    int nchunk = ldk / KC;
    ChunkA cur, nxt = {};
    load_a(cur, w, 0, t);
    stage_tokens<TT>(sm.sb[0], sm.ss[0], codes, scales, ldk, sm.src, 0);
    cp_async_commit();
    for (int c = 0; c < nchunk; c++) {
        if (c + 1 < nchunk) {
            stage_tokens<TT>(sm.sb[(c + 1) & 1], sm.ss[(c + 1) & 1], codes, scales, ldk, sm.src, c + 1);
            load_a(nxt, w, c + 1, t);
        }
        cp_async_commit();
        cp_async_wait1();
        __syncthreads();
        u8(*cb)[SROW] = sm.sb[c & 1];
        u8(*cs)[4] = sm.ss[c & 1];
        if (threadIdx.x < TT) {
#pragma unroll
            for (int q = 0; q < 4; q++) sm.csf[q][threadIdx.x] = e8m0_to_float(cs[threadIdx.x][q]);
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 4; q++) {
            u32 a[4] = {widen4(cur.a0[q] & 0xFFFFu), widen4(cur.a1[q] & 0xFFFFu), widen4(cur.a0[q] >> 16),
                        widen4(cur.a1[q] >> 16)};
            u32 sa_lane = (t & 1) ? cur.s1[q] : cur.s0[q];
            float rs0 = e8m0_to_float(cur.s0[q]), rs1 = e8m0_to_float(cur.s1[q]);
#pragma unroll
            for (int s = 0; s < TT / 8; s++) {
                if (s >= nsub) break;
                u64 bv = *(const u64*)&cb[s * 8 + g][q * 32 + 8 * t];
                u32 b[2] = {(u32)bv, (u32)(bv >> 32)};
                f2 csv = *(const f2*)&sm.csf[q][s * 8 + 2 * t];
                mx_mma(acc[s], a, b, rs0, rs1, csv.x, csv.y, sa_lane, sb_lane_of(cs[s * 8 + g][q]));
            }
        }
        __syncthreads();
        cur = nxt;
    }
    cp_async_wait0();
}

// GEMM1 with the activation and MXFP8 requantization fused. Warp w owns
// intermediate features fw = f0 + 8w .. fw+7: its MMA rows g are up rows
// fw+g and rows g+8 the gate rows N+fw+g, so each thread holds matching up
// and gate values for its tokens. Warps 0-3 and 4-7 form the two 32-feature
// MXFP8 blocks of the CTA's KMOE_GEMM1_FEATURES features. grid.x = N /
// KMOE_GEMM1_FEATURES.
template <int TT>
__device__ __forceinline__ void gemm1_act(const Gemm1Args a) {
    __shared__ GemmSmem<TT> sm;
    __shared__ u32 s_amax[8][TT];
    const int K = a.k, N = a.n, topk = a.top_k;
    const u8* __restrict__ w31 = a.w31;
    const u8* __restrict__ w31s = a.w31s;
    Tile tl;
    if (!block_tile<TT>(a.offset, a.tile_base, a.e_local, a.perm, topk, sm.src, &tl)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int fw = blockIdx.x * KMOE_GEMM1_FEATURES + warp * 8;
    u64 rows_e = (u64)2 * N;
    u64 up_row = (u64)tl.expert * rows_e + fw + g, gate_row = up_row + N;
    WarpRows w = {w31 + up_row * (K / 2), w31 + gate_row * (K / 2), w31s + up_row * (K / 32), w31s + gate_row * (K / 32)};
    int nsub = (tl.count + 7) / 8;
    float acc[TT / 8][4];
    for (int s = 0; s < TT / 8; s++) for (int i = 0; i < 4; i++) acc[s][i] = 0.0f;
    gemm_k_loop<TT>(acc, sm, w, K, a.xq, a.xs, nsub, g, t);

    const float* p = a.params + (a.n_params == 1 ? 0 : tl.expert) * KMOE_PARAM_STRIDE;
    act_requant_store<TT / 8>(acc, nsub, tl.count, s_amax, warp, (warp >> 2) * 4, p, a.kind, a.chain, a.recipe, g, t,
                              a.aq, a.aqs, nullptr, tl.row0, N, fw, false, nullptr, fc1_bias_row(a.b1, tl.expert, N), N);
}

// GEMM2: y[row, f] = sum_n W2[e][f][n] * aq[row][n] in float32. Warp w owns
// output features f0 + 16w .. +15 (rows g and g+8). grid.x = K /
// KMOE_GEMM2_ROWS.
template <int TT>
__device__ __forceinline__ void gemm2(const Gemm2Args a) {
    __shared__ GemmSmem<TT> sm;
    const int K = a.k, N = a.n;
    const u8* __restrict__ w2 = a.w2;
    const u8* __restrict__ w2s = a.w2s;
    Tile tl;
    if (!block_tile<TT>(a.offset, a.tile_base, a.e_local, nullptr, 0, sm.src, &tl)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int f = blockIdx.x * KMOE_GEMM2_ROWS + warp * 16;
    u64 r0 = (u64)tl.expert * K + f + g, r1 = r0 + 8;
    WarpRows w = {w2 + r0 * (N / 2), w2 + r1 * (N / 2), w2s + r0 * (N / 32), w2s + r1 * (N / 32)};
    int nsub = (tl.count + 7) / 8;
    float acc[TT / 8][4];
    for (int s = 0; s < TT / 8; s++) for (int i = 0; i < 4; i++) acc[s][i] = 0.0f;
    gemm_k_loop<TT>(acc, sm, w, N, a.aq, a.aqs, nsub, g, t);
    float* y = a.y;
#pragma unroll
    for (int s = 0; s < TT / 8; s++) {
        if (s >= nsub) break;
        int c0 = s * 8 + 2 * t, c1 = c0 + 1;
        if (c0 < tl.count) {
            y[(u64)(tl.row0 + c0) * K + f + g] = acc[s][0];
            y[(u64)(tl.row0 + c0) * K + f + g + 8] = acc[s][2];
        }
        if (c1 < tl.count) {
            y[(u64)(tl.row0 + c1) * K + f + g] = acc[s][1];
            y[(u64)(tl.row0 + c1) * K + f + g + 8] = acc[s][3];
        }
    }
}

// The instances, all held to 128 registers a thread so that two CTAs fit
// an SM: without the bound, gemm2 at TT=128 took a few registers more,
// ran one CTA per SM and was much slower.
static_assert(KMOE_TILE_SMALL == 64 && KMOE_TILE_LARGE == 128, "the instances below");
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm1_act_t64(const Gemm1Args a) { gemm1_act<64>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm1_act_t128(const Gemm1Args a) { gemm1_act<128>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm2_t64(const Gemm2Args a) { gemm2<64>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm2_t128(const Gemm2Args a) { gemm2<128>(a); }
