// GEMM1's accumulators as they leave the k loop, for kmoe_act_requant:
// ug[row][f] = {up, gate} of feature f (this thread's) for the tile's
// tokens 8s + 2t + h below count (acc[s][h] up, acc[s][2 + h] gate, as
// act_requant_store reads them).
template <int NS>
__device__ __forceinline__ void store_up_gate(const float (&acc)[NS][4], int count, int t, float* ug, int row0, int n,
                                              int f) {
#pragma unroll
    for (int s = 0; s < NS; s++) {
        for (int h = 0; h < 2; h++) {
            int tok = s * 8 + 2 * t + h;
            if (tok < count) *(float2*)&ug[2 * ((u64)(row0 + tok) * n + f)] = make_float2(acc[s][h], acc[s][2 + h]);
        }
    }
}

#if defined(WG_ENABLED)
// This warpgroup's row group, x TH / 128 + h for warpgroup h of CTA x, of
// the expert's groups. Where groups is not a multiple of three, the last
// three-warpgroup CTA's spare warpgroups (*spare) take its first row group
// again, so that they still stage their share of the tokens and pass the
// barriers; they must store nothing. Two warpgroups leave none spare (both
// GEMMs' group counts are even).
template <int TH>
__device__ __forceinline__ int f4_row_group(int groups, bool* spare) {
    const int first = blockIdx.x * (TH / 128), rg = first + (threadIdx.x >> 7);
    *spare = TH == KMOE_F4_W3_THREADS && rg >= groups;
    return *spare ? first : rg;
}

// GEMM1's k loop for CTA x, warpgroup h the 64 rows (32 features' up and
// gate) of its row group (f4_row_group, *spare where spare is given) of
// the tile's expert: false where the CTA has no tile.
template <int NT, int SYNC, bool FIT, int TH, bool RING = false, typename Smem>
__device__ __forceinline__ bool f4_gemm1_mma(const F4Gemm1Args& a, Smem& s, Tile& tl, float (&acc)[NT / 2],
                                             bool* spare = nullptr) {
    pdl_wait(); // the routing and x (the prologue)
    pdl_trigger();
    if (!block_tile<NT>(a.offset, a.tile_base, a.e_local, a.perm, a.top_k, s.src, &tl)) return false;
    bool sp;
    const int rg = f4_row_group<TH>(a.n / 32, &sp);
    if (spare != nullptr) *spare = sp;
    u64 group = (u64)tl.expert * (a.n / 32) + rg;
    f4_tile_mma<NT, SYNC, FIT, TH, RING>(acc, s, a.xbf, a.k, a.w, a.ws, group, InputWait{nullptr, 0, 0}, tl.count); // waited above
    return true;
}
#endif

// GEMM1 with the activation and MXFP8 requantization: CTA x takes
// intermediate features [64x, 64x + 64), warpgroup h the 32 of
// [64x + 32h, +32) (their up and gate rows: f4Row31), so warp w's
// accumulator d[4s + i] is, for tokens 8s + 2t + (i & 1), the up (i < 2)
// and gate (i >= 2) of feature 64x + 8w + l/4: the grouped GEMM1's
// register layout, whose epilogue (act_requant_store) it shares, writing
// the intermediate as BF16 for GEMM2. grid.x = N / 64.
// SYNC: 0 for the wgmma loop, else the mma.sync loop with SYNC steps ahead;
// FIT: the wgmma loop at the tile's N (f4_k_loop_fit).
template <int NT, int SYNC, bool FIT = false>
__device__ __forceinline__ void f4_gemm1_act(const F4Gemm1Args& a) {
#if defined(WG_ENABLED)
    auto& s = f4_smem<NT, SYNC>();
    __shared__ u32 s_amax[8][NT];
    Tile tl;
    float acc[NT / 2];
    if (!f4_gemm1_mma<NT, SYNC, FIT, KMOE_THREADS>(a, s, tl, acc)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (a.ug != nullptr) { // the activation and requantization in kmoe_act_requant
        store_up_gate<NT / 8>(reinterpret_cast<float(&)[NT / 8][4]>(acc), tl.count, lane & 3, a.ug, tl.row0, a.n,
                              blockIdx.x * 64 + warp * 8 + (lane >> 2));
        if (a.ready != nullptr) tile_signal(a.ready + blockIdx.y); // kmoe_act_requant by tile waits for it
        return;
    }
    const float* p = a.params + (a.n_params == 1 ? 0 : tl.expert) * KMOE_PARAM_STRIDE;
    act_requant_store<NT / 8>(reinterpret_cast<float(&)[NT / 8][4]>(acc), (tl.count + 7) / 8, tl.count, s_amax, warp,
                              (warp >> 2) * 4, p, a.kind, a.chain, a.recipe, lane >> 2, lane & 3, nullptr, nullptr,
                              nullptr, tl.row0, a.n, blockIdx.x * 64 + warp * 8, false, a.aqbf,
                              fc1_bias_row(a.b1, tl.expert, a.nb1), a.nb1);
    if (a.ready != nullptr) tile_signal(a.ready + blockIdx.y);
#endif
}

// GEMM1 in three warpgroups (f4W3* in abi.go): CTA x takes intermediate
// features [96x, 96x + 96), warpgroup h the 32 of [96x + 32h, +32), each
// with the two-warpgroup kernel's k loop and register layout (so the same
// bits), and stores up and gate for kmoe_act_requant. grid.x =
// ceil(N / 96), a last CTA's spare warpgroups storing nothing.
// RING: the k loop's stages on mbarriers (Plan.Ring), the same bits;
// FIT (on the ring only): the loop at the tile's tokens rounded up to a
// whole KMOE_F4_W3_FIT_STEP (Plan.W3Fit), the same bits again.
template <int NT, bool RING, bool FIT = false>
__device__ __forceinline__ void f4_gemm1_w3(const F4Gemm1Args& a) {
#if defined(WG_ENABLED)
    auto& s = f4_smem<NT, 0>();
    Tile tl;
    float acc[NT / 2];
    bool spare;
    if (!f4_gemm1_mma<NT, 0, FIT, KMOE_F4_W3_THREADS, RING>(a, s, tl, acc, &spare)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (!spare)
        store_up_gate<NT / 8>(reinterpret_cast<float(&)[NT / 8][4]>(acc), tl.count, lane & 3, a.ug, tl.row0, a.n,
                              blockIdx.x * KMOE_F4_W3_FEATURES + warp * 8 + (lane >> 2));
    if (a.ready != nullptr) tile_signal(a.ready + blockIdx.y);
#endif
}

// GEMM2: y[row, f] for the tile's tokens and output features, warpgroup
// h of CTA x the 64 of its row group (f4_row_group): TH = KMOE_THREADS
// gives [128x, 128x + 128) (grid.x = K / 128), TH = KMOE_F4_W3_THREADS
// three warpgroups over [192x, 192x + 192) (f4W3* in abi.go; grid.x =
// ceil(K / 192)) with the same k loop, so the same bits; the last CTA's
// spare warpgroups store nothing.
// SYNC: 0 for the wgmma loop, else the mma.sync loop with SYNC steps ahead;
// FIT: the wgmma loop at the tile's N (f4_k_loop_fit); RING: as for
// f4_gemm1_w3.
template <int NT, int SYNC, bool FIT = false, int TH = KMOE_THREADS, bool RING = false>
__device__ __forceinline__ void f4_gemm2(const F4Gemm2Args& a) {
#if defined(WG_ENABLED)
    auto& s = f4_smem<NT, SYNC>();
    // Launched while GEMM1 runs (launchPDL), after every GEMM1 CTA has
    // passed its pdl_wait: the routing is complete, GEMM1's intermediate
    // is waited for in the k loop, after the first weights are loaded.
    pdl_trigger();
    Tile tl;
    if (!block_tile<NT>(a.offset, a.tile_base, a.e_local, nullptr, 0, s.src, &tl)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    bool spare;
    const int rg = f4_row_group<TH>(a.k / 64, &spare); // this warpgroup's 64 rows
    float acc[NT / 2];
    f4_tile_mma<NT, SYNC, FIT, TH, RING>(acc, s, a.aqbf, a.n, a.w, a.ws, (u64)tl.expert * (a.k / 64) + rg,
                                   InputWait{a.ready, (int)blockIdx.y, a.ready_target}, tl.count);
    if (spare) return;
    int f = rg * 64 + (warp & 3) * 16 + (lane >> 2);
#pragma unroll
    for (int i = 0; i < NT / 2; i++) {
        int tok = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        if (tok < tl.count) a.y[(u64)(tl.row0 + tok) * a.k + f + 8 * ((i >> 1) & 1)] = acc[i];
    }
#endif
}

// Registers: NT/2 accumulators, one A buffer (16; two in the fitted
// 64-token instance), 2 f4_tile_ahead() x 5 loaded words. More CTAs an SM
// pay more than the registers cost (docs/PERF.md): four at NT = 8 (64
// registers), three at 16, 32 and 48 (85), two at 64, one at 128 and 256
// (A double-buffered: f4_pipe).
static_assert(KMOE_F4_TILE_MAX == 256, "the instances below");
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 4) kmoe_f4_gemm1_act_t8(const F4Gemm1Args a) { f4_gemm1_act<8, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm1_act_t16(const F4Gemm1Args a) { f4_gemm1_act<16, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm1_act_t32(const F4Gemm1Args a) { f4_gemm1_act<32, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm1_act_t48(const F4Gemm1Args a) { f4_gemm1_act<48, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_f4_gemm1_act_t64(const F4Gemm1Args a) { f4_gemm1_act<64, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 1) kmoe_f4_gemm1_act_t128(const F4Gemm1Args a) { f4_gemm1_act<128, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 1) kmoe_f4_gemm1_act_t256(const F4Gemm1Args a) { f4_gemm1_act<256, 0>(a); }
static_assert(KMOE_F4_W3_FEATURES * 2 == 64 * (KMOE_F4_W3_THREADS / 128), "a warpgroup's 64 rows: 32 features' up and gate");
extern "C" __global__ void __launch_bounds__(KMOE_F4_W3_THREADS, 1) kmoe_f4_gemm1_w3_t128(const F4Gemm1Args a) { f4_gemm1_w3<128, false>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_F4_W3_THREADS, 1) kmoe_f4_gemm2_w3_t128(const F4Gemm2Args a) { f4_gemm2<128, 0, false, KMOE_F4_W3_THREADS>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_F4_W3_THREADS, 1) kmoe_f4_gemm1_w3r_t128(const F4Gemm1Args a) { f4_gemm1_w3<128, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_F4_W3_THREADS, 1) kmoe_f4_gemm2_w3r_t128(const F4Gemm2Args a) { f4_gemm2<128, 0, false, KMOE_F4_W3_THREADS, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_F4_W3_THREADS, 1) kmoe_f4_gemm1_w3rf_t128(const F4Gemm1Args a) { f4_gemm1_w3<128, true, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_F4_W3_THREADS, 1) kmoe_f4_gemm2_w3rf_t128(const F4Gemm2Args a) { f4_gemm2<128, 0, true, KMOE_F4_W3_THREADS, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 4) kmoe_f4_gemm2_t8(const F4Gemm2Args a) { f4_gemm2<8, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm2_t16(const F4Gemm2Args a) { f4_gemm2<16, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm2_t32(const F4Gemm2Args a) { f4_gemm2<32, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm2_t48(const F4Gemm2Args a) { f4_gemm2<48, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_f4_gemm2_t64(const F4Gemm2Args a) { f4_gemm2<64, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 1) kmoe_f4_gemm2_t128(const F4Gemm2Args a) { f4_gemm2<128, 0>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 1) kmoe_f4_gemm2_t256(const F4Gemm2Args a) { f4_gemm2<256, 0>(a); }
// The wgmma loop at the tile's N (f4FitTiles; taken up to f4FitMaxM tokens).
static_assert(KMOE_F4_FIT_TILE_MAX == 64, "the instances below");
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm1_act_fit_t32(const F4Gemm1Args a) { f4_gemm1_act<32, 0, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm1_act_fit_t48(const F4Gemm1Args a) { f4_gemm1_act<48, 0, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_f4_gemm1_act_fit_t64(const F4Gemm1Args a) { f4_gemm1_act<64, 0, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm2_fit_t32(const F4Gemm2Args a) { f4_gemm2<32, 0, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 3) kmoe_f4_gemm2_fit_t48(const F4Gemm2Args a) { f4_gemm2<48, 0, true>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_f4_gemm2_fit_t64(const F4Gemm2Args a) { f4_gemm2<64, 0, true>(a); }
// The mma.sync loop's instances (f4sTiles; steps ahead and CTAs an SM from
// f4sAhead and f4sBlocks in abi.go), and GEMM2's 8-token variant for grids
// that fill under two CTAs an SM (f4sDeep2): more weights in flight a
// thread, more registers, fewer CTAs an SM.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, F4SyncTile<8>::blocks) kmoe_f4s_gemm1_act_t8(const F4Gemm1Args a) { f4_gemm1_act<8, F4SyncTile<8>::ahead>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, F4SyncTile<16>::blocks) kmoe_f4s_gemm1_act_t16(const F4Gemm1Args a) { f4_gemm1_act<16, F4SyncTile<16>::ahead>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, F4SyncTile<8>::blocks) kmoe_f4s_gemm2_t8(const F4Gemm2Args a) { f4_gemm2<8, F4SyncTile<8>::ahead>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, F4SyncTile<16>::blocks) kmoe_f4s_gemm2_t16(const F4Gemm2Args a) { f4_gemm2<16, F4SyncTile<16>::ahead>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, KMOE_F4S_DEEP2_BLOCKS) kmoe_f4s_gemm2_t8_deep(const F4Gemm2Args a) { f4_gemm2<8, KMOE_F4S_DEEP2_AHEAD>(a); }

// The GEMM1 epilogue as a kernel of its own (the wgmma-fp4 path where
// the activation kernel's launch (path_fp4.go) takes it): GEMM1 stores each routed row's up and
// gate in float32 (store_up_gate), and here each 32-feature block of a row
// gets the activation and the MXFP8 requantization and is written as the
// BF16 intermediate: act_requant_store's functions in its order, so the
// same bits. In GEMM1 the epilogue holds the CTA's SM slot while its
// exact activation chains run, two CTAs an SM; apart, GEMM1 saves more
// than this kernel costs (docs/PERF.md).
// Four 32-feature blocks a warp at a time, eight lanes a block and four
// features a lane (their up and gate: two 16-byte loads), so each lane's
// four activation chains are independent and the block's scale costs a
// lane three shuffles and a vote (block_scale_lanes8) for four elements.
// Fewer instructions a block than a block a warp and an element a lane
// (warp_quantize_e4m3), the same bits (TestF4ActKernel); eight features a lane was no faster. Block b =
// 4 (warp + i nwarps) + lane / 8, in 32-bit arithmetic: at most 2^32
// blocks (the host's bound is entries x N / 32); with the index in 64
// bits (a 64-bit division for the row) the kernel took longer.
//
// Blocks b0 .. b0 + 3 (below total), a warp: lane l the block b0 + l / 8.
// The rows' expert is e_row, or (e_row < 0) found from the row where its
// parameters or bias are needed. On the bf16 chain the activation is
// stored as BF16 with no requantization. SK (SiTU): sk holds the rows'
// constants, read once by the caller (situ_k).
template <int KIND, bool SK = false>
__device__ __forceinline__ void act_requant_blocks4(const ActRequantArgs& a, u32 b0, u32 total, int e_row, SituK sk = SituK{}) {
    const u32 nb = (u32)a.n / 32;
    const int lane = threadIdx.x & 31, j = lane & 7;
    constexpr bool PLAIN = KIND >= 0; // no bias (kmoe_act_requant picks it only then), any chain
    const bool chain_fi = a.chain == KMOE_CHAIN_FLASHINFER, bias = !PLAIN && a.b1 != nullptr;
    const int rcp = chain_fi ? KMOE_RECIPE_RCEIL : a.recipe;
    const float4* ug = (const float4*)a.ug; // block b's feature 4j + i: {up, gate} at float2 32 b + 4j + i
    const u32 b = b0 + (lane >> 3);
    const bool live = b < total; // a dead lane's zeros stay in its own block's shuffles
    float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
    int e = e_row < 0 ? 0 : e_row;
    Bias1 bi[4] = {};
    if (live) {
        v0 = ug[(u64)b * 16 + 2 * j];
        v1 = ug[(u64)b * 16 + 2 * j + 1];
        // The row's expert, for its parameters where they differ by expert and its bias.
        if (e_row < 0 && (a.n_params != 1 || bias)) e = expert_of(a.offset, a.e_local, (int)(b / nb));
        if (bias) {
            const float* b1 = fc1_bias_row(a.b1, e, a.nb1); // the layer's N, not the padded one
            for (int i = 0; i < 4; i++) bi[i] = fc1_bias(b1, a.nb1, (int)(b % nb) * 32 + 4 * j + i);
        }
    }
    const float* p = a.params + (a.n_params == 1 ? 0 : e) * KMOE_PARAM_STRIDE;
    const float act[4] = {chain_act<KIND, false, SK>(a.kind, p, v0.y, v0.x, a.chain, bias, bi[0], sk),
                          chain_act<KIND, false, SK>(a.kind, p, v0.w, v0.z, a.chain, bias, bi[1], sk),
                          chain_act<KIND, false, SK>(a.kind, p, v1.y, v1.x, a.chain, bias, bi[2], sk),
                          chain_act<KIND, false, SK>(a.kind, p, v1.w, v1.z, a.chain, bias, bi[3], sk)};
    uint2 h;
    if (a.chain == KMOE_CHAIN_BF16) // stored as BF16, no requantization
        h = make_uint2(bf16_rne_bits(act[0]) | bf16_rne_bits(act[1]) << 16, bf16_rne_bits(act[2]) | bf16_rne_bits(act[3]) << 16);
    else
        h = mxfp8_bf16_lanes8(act, rcp, lane);
    if (live) *(uint2*)&a.aqbf[((u64)b * 32 + 4 * j) * 2] = h;
}

// Blocks first, first + step, ... below end, four a warp at a time (the
// rows' expert e_row as act_requant_blocks4 takes it). situ: where KIND is
// SiTU, the one parameter set of every row here (Kimi-K3's), whose
// constants are then read once a thread, not once an element (situ_k);
// null where the rows' parameters differ.
template <int KIND>
__device__ __forceinline__ void act_requant_loop(const ActRequantArgs& a, u32 first, u32 end, u32 step, int e_row,
                                                 const float* situ) {
    if constexpr (KIND == KMOE_ACT_SITU) {
        if (situ != nullptr) {
            const SituK sk = situ_k(situ);
            for (u32 b0 = first; b0 < end; b0 += step) act_requant_blocks4<KIND, true>(a, b0, end, e_row, sk);
            return;
        }
    }
    for (u32 b0 = first; b0 < end; b0 += step) act_requant_blocks4<KIND>(a, b0, end, e_row);
}

// Over the grid: warp w's blocks 4 (w + i nwarps) of the routed rows.
// rows: offset[e_local] of the routing.
template <int KIND>
__device__ __forceinline__ void act_requant_rows(const ActRequantArgs& a, int rows) {
    const u32 total = (u32)rows * ((u32)a.n / 32), nwarps = gridDim.x * (blockDim.x >> 5);
    const u32 first = 4 * (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
    act_requant_loop<KIND>(a, first, total, 4 * nwarps, -1, a.n_params == 1 ? a.params : nullptr);
}

// By tile (a.done set; grid (TT, tiles)): CTA (r, t) takes row r of the
// routing's tile t once GEMM1's CTAs of that tile (a.ready_target, the
// host's count of GEMM1's grid columns) have stored it
// (tile_wait on a.ready), and counts itself in done[t] (tile_signal, also
// past the tile's rows, so GEMM2 waits for TT), so GEMM1's last tiles run
// beside this kernel's first and GEMM2's tiles start as theirs are done.
// No deadlock, as for GEMM2's wait (tile_signal): this kernel is launched
// once every GEMM1 CTA has triggered it, GEMM2 once every CTA of this one
// has. The same blocks, values and stores as over the grid.
template <int KIND>
__device__ __forceinline__ void act_requant_tile(const ActRequantArgs& a) {
    Tile tl;
    if (!block_find_tile(a.offset, a.tile_base, a.e_local, a.tt, &tl)) return;
    tile_wait(a.ready + blockIdx.y, a.ready_target);
    if ((int)blockIdx.x < tl.count) {
        const u32 nb = (u32)a.n / 32, row = (u32)(tl.row0 + (int)blockIdx.x), end = (row + 1) * nb;
        const u32 first = row * nb + 4 * (threadIdx.x >> 5), step = 4 * (blockDim.x >> 5);
        // The tile's one expert: one parameter set.
        act_requant_loop<KIND>(a, first, end, step, tl.expert,
                               a.params + (a.n_params == 1 ? 0 : tl.expert) * KMOE_PARAM_STRIDE);
    }
    tile_signal(a.done + blockIdx.y);
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_act_requant(const ActRequantArgs a) {
    // Kimi-K3's plain layer (SiTU, no bias, any chain) on the
    // compile-time kind, as in GEMM1's epilogue.
    const bool plain_situ = a.kind == KMOE_ACT_SITU && a.b1 == nullptr;
    if (a.done != nullptr) { // by tile: GEMM1's tiles waited for one at a time
        pdl_trigger(); // GEMM2's CTAs wait for their tiles' counts
        if (plain_situ) act_requant_tile<KMOE_ACT_SITU>(a);
        else act_requant_tile<-1>(a);
        return;
    }
    pdl_wait();    // GEMM1's up and gate
    pdl_trigger(); // GEMM2's CTAs may take SMs as this kernel's leave them; they wait for all of it
    int rows = a.offset[a.e_local];
    if (plain_situ) act_requant_rows<KMOE_ACT_SITU>(a, rows); // Kimi-K3's, as in GEMM1
    else act_requant_rows<-1>(a, rows);
}
