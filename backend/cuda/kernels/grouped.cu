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

#define KC KMOE_STAGE_K // k elements per shared-memory stage
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

// Four elements of a 32-block held as block_scale_lanes8 holds them ->
// the BF16 bits of their MXFP8 values (the recipe's scale), element 2i in
// the low half of word i.
__device__ __forceinline__ uint2 mxfp8_bf16_lanes8(const float (&v)[4], int recipe, int lane) {
    const u32 sc = block_scale_lanes8(v, recipe, lane);
    if (sc == 0xFFu) return make_uint2(0x7FC07FC0u, 0x7FC07FC0u); // mxfp8_value_bf16's NaN codes
    // The scale's two forms once for the four elements: per element they
    // were found again inside each element's branch.
    const float inv = e8m0_inverse(sc), sf = e8m0_to_float(sc);
    return make_uint2(mxfp8_value_bf16x2_of(v[0], v[1], inv, sf), mxfp8_value_bf16x2_of(v[2], v[3], inv, sf));
}

// gated_act, called rather than inlined: the wgmma GEMM1 evaluates it at
// 64 unrolled sites, and inlined copies of every activation there made the
// kernel miss the instruction cache (its warps waited on instruction
// fetch for a large part of their cycles).
__device__ __noinline__ float gated_act_call(int kind, const float* p, float g, float u) { return gated_act(kind, p, g, u); }

// The FC1 bias of feature f of an expert whose bias row (2n floats, up
// then gate) is b1, or zeros where b1 is null or f is a padding feature
// (f >= n: the wgmma-fp4 GEMMs' padded N).
struct Bias1 {
    float up, gate;
};
__device__ __forceinline__ Bias1 fc1_bias(const float* b1, int n, int f) {
    if (b1 == nullptr || f >= n) return Bias1{0.0f, 0.0f};
    return Bias1{b1[f], b1[n + f]};
}

// The expert's FC1 bias row of b1 ([E, 2N]), or null without a bias.
__device__ __forceinline__ const float* fc1_bias_row(const float* b1, int e, int n) {
    return b1 == nullptr ? nullptr : b1 + (u64)e * 2 * n;
}

// The activation of one up and gate on a chain, with the FC1 bias bi
// (added where bias is set): the flashinfer chain rounds both inputs to
// BF16 before the bias is added and the result after, as FlashInfer's
// activation kernel does; the others add the bias to the float32
// accumulator. On the mxfp8 chain an infinite accumulator stands for a
// finite GEMM1 value past float32's range (x saturated to 448 x 2^127
// under rceil), which the oracle carries exactly: it is taken as the
// largest float, so that g x sigmoid(g) at g = -inf is the oracle's -0
// rather than -inf x 0 = NaN (SiTU saturates alike either way and is
// left as it is). KIND: the kind fixed at compile time, or -1 for kind;
// CALL: through gated_act_call (kind). Every GEMM1 epilogue and
// kmoe_act_requant.
// SK (KIND SiTU only): SiTU's parameters as sk has them, chosen once by
// the caller.
template <int KIND, bool CALL = false, bool SK = false>
__device__ __forceinline__ float chain_act(int kind, const float* p, float gate, float up, int chain, bool bias = false,
                                           Bias1 bi = Bias1{0.0f, 0.0f}, SituK sk = SituK{}) {
    static_assert(!SK || KIND == KMOE_ACT_SITU && !CALL, "SiTU's parameters");
    const bool chain_fi = chain == KMOE_CHAIN_FLASHINFER;
    if (chain_fi) {
        up = round_bf16(up);
        gate = round_bf16(gate);
    }
    if (bias) {
        up = __fadd_rn(up, bi.up);
        gate = __fadd_rn(gate, bi.gate);
    }
    if (KIND < 0 && chain == KMOE_CHAIN_MXFP8 && kind != KMOE_ACT_SITU) {
        const float big = __uint_as_float(0x7F7FFFFFu); // the largest float
        up = pmax(pmin(up, big), -big);                  // NaN stays NaN
        gate = pmax(pmin(gate, big), -big);
    }
    float act;
    if constexpr (CALL) act = gated_act_call(kind, p, gate, up);
    else if constexpr (SK) act = situ(sk, gate, up);
    else act = gated_act(KIND >= 0 ? KIND : kind, p, gate, up);
    if (chain_fi) act = round_bf16(act);
    return act;
}

// The BF16 bits of float v rounded to nearest even (the bf16 chain's
// intermediate; NaN: the quiet NaN of its sign).
__device__ __forceinline__ u32 bf16_rne_bits(float v) { return __float_as_uint(round_bf16(v)) >> 16; }

// The GEMM1 epilogue of both paths: the activation in registers, then
// MXFP8 requantization of each 32-feature block, which four warps (warps
// bw0 .. bw0+3 of the CTA, 8 features each) share through s_amax. acc[s]
// holds, for token subtile s, up(fw+g; tokens 8s+2t, 8s+2t+1) in [0], [1]
// and the gate of the same in [2], [3]. Token tok's codes go to row
// row0 + tok of aq (ldn features a row, in the decode path's permuted
// order if permuted; scales ldn/32 a row, and as floats in aqsf unless it
// is null), or, if aqbf is not null, their MXFP8 values as BF16 to aqbf
// (ldn features a row; aq and aqs unused). Called by every thread of the
// CTA (it synchronizes). KIND: the activation kind fixed at compile time
// (act_requant_store dispatches on the kind once), or -1 for kind. b1:
// the expert's FC1 bias row (n up, then n gate values) or null. On the
// bf16 chain (aqbf only) each activation is stored as BF16 and nothing
// is requantized.
template <int NS, int KIND>
__device__ __forceinline__ void act_requant_store_k(const float (&acc)[NS][4], int nsub, int count, u32 (*s_amax)[NS * 8],
                                                    int warp, int bw0, const float* p, int kind, int chain, int recipe,
                                                    int g, int t, u8* aq, u8* aqs, float* aqsf, int row0, int ldn,
                                                    int fw, bool permuted, u8* aqbf, const float* b1, int n) {
    // The kind fixed at compile time is the plain layer's instance (no
    // bias: act_requant_store picks it only then, on any chain), so
    // Kimi-K3's epilogue carries none of the bias code and the bf16 chain
    // keeps the compile-time activation.
    constexpr bool PLAIN = KIND >= 0;
    bool chain_fi = chain == KMOE_CHAIN_FLASHINFER;
    int rcp = chain_fi ? KMOE_RECIPE_RCEIL : recipe;
    const bool bias = !PLAIN && b1 != nullptr;
    const Bias1 bi = PLAIN ? Bias1{0.0f, 0.0f} : fc1_bias(b1, n, fw + g);
    if (chain == KMOE_CHAIN_BF16) { // the activation stored as BF16, no requantization (BF16 paths only: aqbf)
#pragma unroll
        for (int s = 0; s < NS; s++) {
            if (s >= nsub) break;
            for (int h = 0; h < 2; h++) {
                int tok = s * 8 + 2 * t + h;
                float act = chain_act<KIND>(kind, p, acc[s][2 + h], acc[s][h], chain, bias, bi);
                if (tok < count) *(u16*)&aqbf[((u64)(row0 + tok) * ldn + fw + g) * 2] = (u16)bf16_rne_bits(act);
            }
        }
        return;
    }
    float v[NS][2];
#pragma unroll
    for (int s = 0; s < NS; s++) {
        if (s >= nsub) break;
        for (int h = 0; h < 2; h++) {
            float act = chain_act<KIND>(kind, p, acc[s][2 + h], acc[s][h], chain, bias, bi);
            v[s][h] = act;
            // amax over this warp's 8 features (lanes with equal t), NaN
            // skipped, with bit 31 set if any of them is NaN (no magnitude
            // has it): a NaN must not take its finite neighbours out of the
            // amax (rceil skips the NaN alone, as mxfp and the oracle do).
            u32 bits = __float_as_uint(act) & 0x7FFFFFFFu;
            u32 m = bits > 0x7F800000u ? 0u : bits;
            u32 nan8 = __ballot_sync(0xFFFFFFFFu, bits > 0x7F800000u) & (0x11111111u << t);
            for (int o = 4; o < 32; o <<= 1) m = umax(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
            if (g == 0) s_amax[warp][s * 8 + 2 * t + h] = m | (nan8 != 0u ? 0x80000000u : 0u);
        }
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < NS; s++) {
        if (s >= nsub) break;
        for (int h = 0; h < 2; h++) {
            int tok = s * 8 + 2 * t + h;
            if (tok >= count) continue;
            u32 amax = 0;
            bool anynan = false;
            for (int w8 = bw0; w8 < bw0 + 4; w8++) {
                u32 m = s_amax[w8][tok];
                anynan |= (m >> 31) != 0u;
                amax = umax(amax, m & 0x7FFFFFFFu);
            }
            u32 sc = block_scale_e4m3(amax, anynan, rcp);
            u64 row = (u64)(row0 + tok);
            if (aqbf) {
                *(u16*)&aqbf[(row * ldn + fw + g) * 2] = (u16)mxfp8_value_bf16(v[s][h], sc);
                continue;
            }
            u32 code = e4m3_code(v[s][h], sc);
            aq[row * ldn + (permuted ? dec_bpos(fw + g) : fw + g)] = (u8)code;
            if (warp == bw0 && g == 0) {
                aqs[row * (ldn / 32) + (fw >> 5)] = (u8)sc;
                if (aqsf) aqsf[row * (ldn / 32) + (fw >> 5)] = e8m0_to_float(sc);
            }
        }
    }
}

// The GEMM1 epilogue, SiTU (Kimi-K3's activation) with the kind a
// compile-time constant: with the kind read at run time, each of a
// thread's unrolled elements held every kind's code and a branch over it,
// and GEMM1's warps waited on instruction fetch at each element's start.
// Only SiTU: a constant kind for every kind made the module's NVRTC
// compile several times as long, SiTU alone adds half again.
template <int NS>
__device__ __forceinline__ void act_requant_store(const float (&acc)[NS][4], int nsub, int count, u32 (*s_amax)[NS * 8],
                                                  int warp, int bw0, const float* p, int kind, int chain, int recipe,
                                                  int g, int t, u8* aq, u8* aqs, float* aqsf, int row0, int ldn,
                                                  int fw, bool permuted, u8* aqbf, const float* b1, int n) {
#define EPILOGUE_OF(K) \
    act_requant_store_k<NS, K>(acc, nsub, count, s_amax, warp, bw0, p, kind, chain, recipe, g, t, aq, aqs, aqsf, row0, ldn, fw, permuted, aqbf, b1, n)
    if (kind == KMOE_ACT_SITU && b1 == nullptr) EPILOGUE_OF(KMOE_ACT_SITU); // Kimi-K3's
    else EPILOGUE_OF(-1); // the others: the kind read at run time
#undef EPILOGUE_OF
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
