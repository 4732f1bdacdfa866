// ------------------------------------------------------- the wgmma path --
//
// The grouped GEMMs on Hopper's warpgroup MMA (sm_90a only: compiled where
// NVRTC defines __CUDA_ARCH_FEAT_SM90_ALL, empty stubs elsewhere), on
// BF16 operands: every MXFP4 weight and every MXFP8 token value is a BF16
// value and BF16 products are exact in float32, so the tensor cores sum a
// whole row in float32 with no per-block scale to apply (internal/layout/wgmma).
// (FP8 wgmma with the weight scales folded into E4M3 was tried first: its
// block sums are not exact; docs/PERF.md.) x is converted to BF16 once
// (kmoe_x_bf16), the weights at prepare time, and GEMM1 writes the
// requantized intermediate as BF16 for GEMM2.
//
// One CTA: two warpgroups (256 threads), a tile of KMOE_WG_TOKENS tokens
// of one expert (64 per warpgroup: the wgmma's M) by BN = 128 or 256
// weight rows (its N; two instances). Both operands are staged in shared
// memory by cp.async, in wg_stages<BN>() stages of KMOE_WG_CHUNK_K k (128
// bytes a row), in the 128-byte swizzled K-major form (sw_off: row r's 128
// bytes at 128 r, its 16-byte piece j in slot j ^ (r % 8), which spreads
// a column's pieces over the banks; faster than the no-swizzle
// core-matrix form): the tokens
// gathered row by row, the weights one contiguous block per stage. Each
// stage is four wgmma m64nBNk16 per warpgroup, issued asynchronously; a stage is refilled once both warpgroups' wgmmas on it
// have completed (wait_group 1 keeps the next stage's in flight).

// The stages of a BN-row instance: 128-row tiles run two CTAs an SM
// (their 64 accumulators a thread allow it), so three stages of 32 KB;
// 256-row tiles one, with four of 48 KB.
template <int BN>
__device__ constexpr int wg_stages() { return WgTile<BN>::stages; }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ENABLED 1
#endif
static_assert(KMOE_WG_TOKENS == 128 && KMOE_WG_CHUNK_K == 64, "two warpgroups of 64 tokens, 128-byte chunks");

#define WG_CHUNK_BYTES (2 * KMOE_WG_CHUNK_K)

// BN: weight rows per tile (the wgmma's N), 128 or 256.
template <int BN>
struct WgSmem {
    u8 a[wg_stages<BN>()][KMOE_WG_TOKENS * WG_CHUNK_BYTES];
    u8 b[wg_stages<BN>()][BN * WG_CHUNK_BYTES];
    int src[KMOE_WG_TOKENS];
};
static_assert(sizeof(WgSmem<128>) + KMOE_SMEM_ALIGN == WgTile<128>::smem && sizeof(WgSmem<256>) + KMOE_SMEM_ALIGN == WgTile<256>::smem,
              "the host's dynamic shared memory sizes (smem_1k's alignment included)");

// The first element of x's 32-block b (rows of k) in the BF16 copy, whose
// rows are kout apart (the wgmma-fp4 GEMMs' padded K; their padding,
// zeroed once, is never written).
__device__ __forceinline__ u64 x_out_index(u32 b, int k, int kout) {
    if (kout == k) return (u64)b * BLOCK; // unpadded: no division
    const u32 nbk = (u32)k / BLOCK;
    return (u64)(b / nbk) * (u64)kout + (u64)(b % nbk) * BLOCK;
}

// x as BF16: the MXFP8 values of x (quantized here from float32 with the
// recipe, as kmoe_quantize_x does, or given as codes and scales), four
// 32-blocks b0 .. b0 + 3 (those below nblocks) by one warp, eight lanes a
// block and four elements a lane (block_scale_lanes8; a block a warp and
// an element a lane gave the same bits in more instructions). Every lane of the warp
// calls it.
__device__ __forceinline__ void x_bf16_blocks4(const float* __restrict__ x, const u8* __restrict__ codes,
                                               const u8* __restrict__ scales, u16* __restrict__ out, int form,
                                               int recipe, int chain, u32 nblocks, u32 b0, int lane, int k, int kout) {
    const u32 b = b0 + (lane >> 3);
    const bool live = b < nblocks; // a dead lane's zeros stay in its own block's shuffles
    const u64 i = (u64)b * BLOCK + 4 * (lane & 7);
    const u64 o = x_out_index(b, k, kout) + 4 * (lane & 7);
    uint2 h;
    if (form == KMOE_FORM_FLOAT && chain == KMOE_CHAIN_BF16) { // x rounded to BF16, never MXFP8
        if (!live) return;
        const float4 v = *(const float4*)&x[i];
        h = make_uint2(bf16_rne_bits(v.x) | bf16_rne_bits(v.y) << 16, bf16_rne_bits(v.z) | bf16_rne_bits(v.w) << 16);
        *(uint2*)&out[o] = h;
        return;
    } else if (form == KMOE_FORM_FLOAT) {
        const float4 v = live ? *(const float4*)&x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float f[4] = {v.x, v.y, v.z, v.w};
        h = mxfp8_bf16_lanes8(f, recipe, lane);
    } else {
        if (!live) return;
        const u32 c = *(const u32*)&codes[i];
        h = mxfp8_bf16x4(c & 0xFFu, (c >> 8) & 0xFFu, (c >> 16) & 0xFFu, c >> 24, e8m0_to_float(scales[b]));
    }
    if (live) *(uint2*)&out[o] = h;
}

// x as BF16, 32-block b by one warp, an element a lane (warp_quantize_e4m3):
// for the one-launch prologue of few tokens (kmoe_route_x_bf16), where the
// blocks are few and each warp's chain is the kernel's time. There the
// four-a-lane form (x_bf16_blocks4, fewer instructions a block but a chain
// four elements long) made few-token forwards slower; for many tokens the instructions count, and kmoe_x_bf16
// takes that form.
__device__ __forceinline__ void x_bf16_block(const float* __restrict__ x, const u8* __restrict__ codes,
                                             const u8* __restrict__ scales, u16* __restrict__ out, int form, int recipe,
                                             int chain, int b, int lane, int k, int kout) {
    u64 i = (u64)b * BLOCK + lane, o = x_out_index((u32)b, k, kout) + lane;
    u32 c, s;
    if (form == KMOE_FORM_FLOAT && chain == KMOE_CHAIN_BF16) { // x rounded to BF16, never MXFP8
        out[o] = (u16)bf16_rne_bits(x[i]);
        return;
    }
    if (form == KMOE_FORM_FLOAT) {
        c = warp_quantize_e4m3(x[i], recipe, &s);
        s = __shfl_sync(0xFFFFFFFFu, s, 0);
    } else {
        c = codes[i];
        s = scales[b];
    }
    out[o] = (u16)mxfp8_bf16(c, e8m0_to_float(s));
}

// Four 32-blocks a warp: warp w of those writing x (numbered from 0 over
// their CTAs) takes blocks 4w .. 4w + 3. A: XBF16Args or RouteXBF16Args.
template <class A>
__device__ __forceinline__ void x_bf16_warp4(const A& a, u32 warp) {
    if (4 * warp >= (u32)a.n_blocks) return;
    x_bf16_blocks4(a.x, a.codes, a.scales, a.out, a.form, a.recipe, a.chain, (u32)a.n_blocks, 4 * warp, threadIdx.x & 31, a.k,
                   a.k_out);
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_x_bf16(const XBF16Args a) {
    x_bf16_warp4(a, (blockIdx.x * blockDim.x + threadIdx.x) >> 5);
}

// The wgmma-fp4 GEMMs' per-tile counts (tile_signal) zeroed by one CTA of
// a prologue.
__device__ __forceinline__ void zero_counts(int* ready, int n) {
    for (int j = threadIdx.x; j < n; j += blockDim.x) ready[j] = 0;
}

// The BF16 paths' prologue for few entries: one launch instead of four
// (memset, x_bf16, route_count, route_scatter; in a graph each costs a
// launch gap). CTA 0 routes (route_cta, token tiles of tt), the others
// write x as BF16, a warp a 32-block. Dynamic shared memory: 4 (e_local
// + 1) bytes.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_route_x_bf16(const RouteXBF16Args a) {
    extern __shared__ int s_counts[]; // [e_local + 1]
    pdl_trigger(); // GEMM1's CTAs launched now wait for this kernel in their pdl_wait
    if (blockIdx.x == 0) {
        route_cta(a.ids, a.n_entries, a.rank, a.e_local, s_counts, a.pos, a.perm, a.offset, nullptr, a.tile_base, a.tt);
        return;
    }
    int nwarps = (gridDim.x - 1) * (blockDim.x >> 5);
    for (int b = (blockIdx.x - 1) * (blockDim.x >> 5) + (threadIdx.x >> 5); b < a.n_blocks; b += nwarps)
        x_bf16_block(a.x, a.codes, a.scales, a.out, a.form, a.recipe, a.chain, b, threadIdx.x & 31, a.k, a.k_out);
    if (blockIdx.x == 1) zero_counts(a.ready, a.n_ready);
}

// The BF16 paths' prologue for more entries, in one launch instead of four
// (the memset of pos and the tile counts, kmoe_x_bf16, kmoe_route_count,
// kmoe_route_scatter): CTA e < e_local counts every local expert's entries
// itself (in shared memory: the ids are a few hundred KB at most, read by
// each such CTA from L2) and scatters expert e's as kmoe_route_scatter's
// CTA e does, so no CTA waits for another; CTA e_local writes pos = -1 for
// the entries routed to no local expert (each entry's pos is written once,
// so no memset) and zeroes the tile counts; the others write x as BF16,
// four blocks a warp (kmoe_x_bf16's form). The same values as the four
// launches. Dynamic shared memory: 4 e_local bytes.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_route_x_many(const RouteXBF16Args a) {
    extern __shared__ int s_counts[]; // [e_local]
    pdl_trigger(); // GEMM1's CTAs launched now wait for this kernel in their pdl_wait
    const int elocal = a.e_local, n = a.n_entries;
    if ((int)blockIdx.x < elocal) {
        for (int e = threadIdx.x; e < elocal; e += blockDim.x) s_counts[e] = 0;
        __syncthreads();
        for (int i = threadIdx.x * ROUTE_PER; i < n; i += blockDim.x * ROUTE_PER) {
            int id[ROUTE_PER];
            route_ids(a.ids, i, n, id);
#pragma unroll
            for (int q = 0; q < ROUTE_PER; q++) {
                const int e = local_expert(id[q], a.rank, elocal);
                if (e >= 0) atomicAdd(&s_counts[e], 1);
            }
        }
        __syncthreads();
        route_scatter_expert(a.ids, n, a.rank, elocal, blockIdx.x, a.tt, s_counts, a.offset, a.tile_base, a.perm, a.pos);
        return;
    }
    if ((int)blockIdx.x == elocal) {
        for (int i = threadIdx.x * ROUTE_PER; i < n; i += blockDim.x * ROUTE_PER) {
            int id[ROUTE_PER];
            route_ids(a.ids, i, n, id);
#pragma unroll
            for (int q = 0; q < ROUTE_PER; q++)
                if (i + q < n && local_expert(id[q], a.rank, elocal) < 0) a.pos[i + q] = -1;
        }
        zero_counts(a.ready, a.n_ready);
        return;
    }
    x_bf16_warp4(a, ((blockIdx.x - elocal - 1) * blockDim.x + threadIdx.x) >> 5);
}

#if defined(WG_ENABLED)
// The wgmma path's operands in the 128-byte swizzled K-major form (the
// descriptor's swizzle mode 1): a chunk row's 128 bytes contiguous, in
// 8-row groups of 1024 bytes, its 16-byte piece j in slot j ^ (r % 8),
// so a piece of the group's eight rows lies in eight different bank
// groups. The pattern follows the absolute address's bits 4..9, so every
// operand block starts on a 1024-byte boundary (smem_1k); the k16 steps
// of a chunk are its start address plus 32 bytes each (sw_off(0, 32 q)).
__device__ __forceinline__ int sw_off(int r, int b) { return (r >> 3) * 1024 + (r & 7) * 128 + ((((b >> 4) ^ r) & 7) << 4) + (b & 15); }
__device__ __forceinline__ u64 sw_desc(const void* p) {
    u64 a = smem_addr(p);
    return ((a & 0x3FFFFull) >> 4) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
// The dynamic shared memory from its first 1024-byte boundary (the host
// asks for KMOE_SMEM_ALIGN bytes more than the kernel's struct).
__device__ __forceinline__ u8* smem_1k(u8* raw) { return raw + ((KMOE_SMEM_ALIGN - (smem_addr(raw) & (KMOE_SMEM_ALIGN - 1))) & (KMOE_SMEM_ALIGN - 1)); }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Shared-memory mbarriers (the three-warpgroup GEMMs' stage ring,
// f4_k_loop's RING): initialized before any use (a CTA barrier after
// it); an arrival releases this thread's earlier writes, a wait returns
// once the phase of the given parity has completed and acquires them.
__device__ __forceinline__ void mbar_init(u64* b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* b) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* b, u32 parity) {
    asm volatile("{\n.reg .pred p;\nLAB_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra LAB_WAIT;\n}\n" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}

// d += A (64 x 16, descriptor da) x B (16 x BN, descriptor db), BF16,
// float32 accumulators (the shapes: wgmma_gen.go).
template <int BN>
__device__ __forceinline__ void wgmma_bf16(float (&d)[BN / 2], u64 da, u64 db) { WgmmaSS<BN>::mma(d, da, db); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Stage chunk c into stage st: the tile's token rows (src[i], or -1 for a
// zero row; ld bytes a row) and the weight block wblk.
template <int BN>
__device__ __forceinline__ void wg_stage(WgSmem<BN>& s, int st, const u8* rows, int ld, const u8* wblk, int c) {
    for (int p = threadIdx.x; p < KMOE_WG_TOKENS * WG_CHUNK_BYTES / 16; p += blockDim.x) {
        int r = p >> 3, piece = p & 7, row = s.src[r];
        cp_async16(&s.a[st][sw_off(r, piece * 16)], rows + (u64)(row < 0 ? 0 : row) * ld + c * WG_CHUNK_BYTES + piece * 16, row >= 0);
    }
    for (int p = threadIdx.x; p < BN * WG_CHUNK_BYTES / 16; p += blockDim.x) cp_async16(&s.b[st][p * 16], wblk + p * 16, true);
}

// The k loop: acc (this thread's BN/2 accumulators of its warpgroup's 64 x
// BN tile) += the tile's tokens x weights over kdim k. rows are the
// tokens' BF16 rows (2 kdim bytes each), wtile the tile's first block.
template <int BN>
__device__ __forceinline__ void wg_k_loop(float (&acc)[BN / 2], WgSmem<BN>& s, const u8* rows, int kdim, const u8* wtile) {
    constexpr u64 block = BN * WG_CHUNK_BYTES;
    int nchunk = kdim / KMOE_WG_CHUNK_K, ld = 2 * kdim;
    int wg = threadIdx.x >> 7;
    constexpr int S = wg_stages<BN>();
#pragma unroll
    for (int st = 0; st < S - 1; st++) {
        if (st < nchunk) wg_stage<BN>(s, st, rows, ld, wtile + st * block, st);
        cp_async_commit();
    }
    for (int c = 0; c < nchunk; c++) {
        cp_async_wait<S - 2>(); // chunk c has landed (this thread's copies)
        fence_proxy_async();    // ... and is visible to the tensor cores
        __syncthreads();        // every thread's
        int st = c % S;
        wg_fence();
#pragma unroll
        for (int q = 0; q < 4; q++)
            wgmma_bf16<BN>(acc, sw_desc(&s.a[st][sw_off(wg * 64, q * 32)]), sw_desc(&s.b[st][sw_off(0, q * 32)]));
        wg_commit();
        wg_wait<1>();    // this warpgroup's wgmmas on chunk c-1 are done
        __syncthreads(); // ... and the other's: its stage may be refilled
        int nx = c + S - 1;
        if (nx < nchunk) wg_stage<BN>(s, nx % S, rows, ld, wtile + nx * block, nx);
        cp_async_commit();
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
    cp_async_wait<0>();
}
#endif

// GEMM1 with the activation and MXFP8 requantization. CTA x takes
// intermediate features [Fx, Fx + F), F = BN/2: weight rows 0..F-1 of its
// tile are their up rows, F..BN-1 their gate rows, so accumulator i
// (column 8(i/4) + 2(l%4) + i%2 of row 16w + l/4 + 8((i/2)%2)) and i + F/2
// are the up and gate of one feature: the activation is computed in registers,
// each 32-feature block of a row, held by the four lanes of a quad (8
// values each), is quantized with a quad-wide amax (the rules of
// act_requant_store), and its MXFP8 values are written as BF16.
template <int BN>
__device__ __forceinline__ void wg_gemm1_act(const WgGemm1Args& a) {
#if defined(WG_ENABLED)
    constexpr int F = BN / 2;
    extern __shared__ __align__(128) u8 wg_smem_raw[];
    WgSmem<BN>& s = *(WgSmem<BN>*)smem_1k(wg_smem_raw);
    const int K = a.k, N = a.n;
    Tile tl;
    if (!block_tile<KMOE_WG_TOKENS>(a.offset, a.tile_base, a.e_local, a.perm, a.top_k, s.src, &tl)) return;
    u64 tile = (u64)tl.expert * (N / F) + blockIdx.x;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
    wg_k_loop<BN>(acc, s, a.xbf, K, a.w + tile * (K / KMOE_WG_CHUNK_K) * (BN * WG_CHUNK_BYTES));

    const float* p = a.params + (a.n_params == 1 ? 0 : tl.expert) * KMOE_PARAM_STRIDE;
    bool chain_fi = a.chain == KMOE_CHAIN_FLASHINFER, bias = a.b1 != nullptr;
    int rcp = chain_fi ? KMOE_RECIPE_RCEIL : a.recipe;
    int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, l = threadIdx.x & 31, t = l & 3;
    int f0 = blockIdx.x * F;
    const float* b1 = fc1_bias_row(a.b1, tl.expert, N);
#pragma unroll
    for (int h = 0; h < 2; h++) { // rows r and r + 8
        int r = wg * 64 + w * 16 + (l >> 2) + 8 * h;
        bool valid = r < tl.count;
        u64 row = (u64)(tl.row0 + (valid ? r : 0));
#pragma unroll
        for (int bk = 0; bk < F / 32; bk++) { // 32-feature blocks
            float v[8];
            u32 amax = 0;
            int nan = 0;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
#pragma unroll
                for (int b = 0; b < 2; b++) {
                    int i = 4 * (4 * bk + jj) + 2 * h + b;
                    // accumulator i is feature f0 + 8 (i / 4) + 2t + i % 2
                    Bias1 bi = bias ? fc1_bias(b1, N, f0 + 8 * (4 * bk + jj) + 2 * t + b) : Bias1{0.0f, 0.0f};
                    float act = chain_act<-1, true>(a.kind, p, acc[i + F / 2], acc[i], a.chain, bias, bi);
                    v[2 * jj + b] = act;
                    u32 bits = __float_as_uint(act) & 0x7FFFFFFFu;
                    if (bits > 0x7F800000u) nan = 1;
                    else amax = umax(amax, bits);
                }
            }
            for (int o = 1; o < 4; o <<= 1) {
                amax = umax(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
                nan |= __shfl_xor_sync(0xFFFFFFFFu, nan, o);
            }
            if (a.chain == KMOE_CHAIN_BF16) { // stored as BF16, no requantization
                if (!valid) continue;
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    int col = 8 * (4 * bk + jj) + 2 * t;
                    *(u32*)&a.aqbf[(row * N + f0 + col) * 2] = bf16_rne_bits(v[2 * jj]) | bf16_rne_bits(v[2 * jj + 1]) << 16;
                }
                continue;
            }
            u32 sc = block_scale_e4m3(amax, nan != 0, rcp);
            if (!valid) continue;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                u32 pair = mxfp8_value_bf16x2(v[2 * jj], v[2 * jj + 1], sc);
                int col = 8 * (4 * bk + jj) + 2 * t;
                *(u32*)&a.aqbf[(row * N + f0 + col) * 2] = pair;
            }
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_wg_gemm1_act_n128(const WgGemm1Args a) { wg_gemm1_act<128>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 1) kmoe_wg_gemm1_act_n256(const WgGemm1Args a) { wg_gemm1_act<256>(a); }

// GEMM2: y[row, f] for the tile's tokens and output features [BN x,
// BN x + BN), written as float pairs.
template <int BN>
__device__ __forceinline__ void wg_gemm2(const WgGemm2Args& a) {
#if defined(WG_ENABLED)
    extern __shared__ __align__(128) u8 wg_smem_raw[];
    WgSmem<BN>& s = *(WgSmem<BN>*)smem_1k(wg_smem_raw);
    const int K = a.k, N = a.n;
    Tile tl;
    if (!block_tile<KMOE_WG_TOKENS>(a.offset, a.tile_base, a.e_local, nullptr, 0, s.src, &tl)) return;
    u64 tile = (u64)tl.expert * (K / BN) + blockIdx.x;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
    wg_k_loop<BN>(acc, s, a.aqbf, N, a.w + tile * (N / KMOE_WG_CHUNK_K) * (BN * WG_CHUNK_BYTES));
    int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, l = threadIdx.x & 31;
    int f0 = blockIdx.x * BN;
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
        int r = wg * 64 + w * 16 + (l >> 2) + 8 * ((i >> 1) & 1);
        int col = 8 * (i >> 2) + 2 * (l & 3);
        if (r < tl.count) *(f2*)&a.y[(u64)(tl.row0 + r) * K + f0 + col] = f2{acc[i], acc[i + 1]};
    }
#endif
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_wg_gemm2_n128(const WgGemm2Args a) { wg_gemm2<128>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 1) kmoe_wg_gemm2_n256(const WgGemm2Args a) { wg_gemm2<256>(a); }
