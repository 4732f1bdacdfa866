// The small tiles' loop without a barrier a step (8 and 16 tokens: f4sTiles
// in abi.go). The same weights, loaded and widened the same way, but each
// warp multiplies its own 16 rows with mma.sync m16n8k16, whose A fragment
// is the wgmma's per-warp slice (the layout needs no change) and whose
// accumulators, NT/8 of them side by side, are the wgmma's NT/2 in the same
// order (so the epilogues are shared), reading the tokens with ldmatrix.
// The tokens are staged a window of f4s_win k at a time, two windows
// double-buffered, so the CTA meets at a barrier once a window (8 or 4
// steps of 128 k) instead of once a step, and no warp waits at a wgmma for
// the other three of its warpgroup. Why: at small M the step's barrier
// and the wgmma waits were where the warps stalled most.
// Each accumulator still sums its k16 steps in k order, in float32.
#if defined(WG_ENABLED)
// The token window, k a window, per tile (F4SyncTile: f4sWinK in abi_fp4.go).
template <int NT>
__device__ constexpr int f4s_win() { return F4SyncTile<NT>::win_k; }
// Bytes a staged token row: 16 more, so ldmatrix's 8 rows fall in 8 bank groups.
template <int NT>
__device__ constexpr int f4s_row() { return 2 * f4s_win<NT>() + 16; }
static_assert(f4s_win<8>() % 128 == 0 && KMOE_THREADS % (f4s_win<8>() / 8) == 0 && f4s_win<16>() % 128 == 0 &&
                  KMOE_THREADS % (f4s_win<16>() / 8) == 0,
              "whole steps; whole rows per pass");

template <int NT>
struct F4SyncSmem {
    u8 x[2][NT][f4s_row<NT>()];
    int src[NT];
};
static_assert(sizeof(F4SyncSmem<8>) == F4SyncTile<8>::smem && sizeof(F4SyncSmem<16>) == F4SyncTile<16>::smem,
              "the host's dynamic shared memory sizes");

// Four 8 x 8 BF16 matrices from shared memory, lane l giving row l % 8 of
// matrix l / 8; r[i] is matrix i's (row l / 4, columns 2 (l % 4), +1).
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// d += A (16 x 16 BF16, registers as the layout's word) x B (16 x 8 BF16:
// b0 k 2t, 2t+1 and b1 k 2t+8, 2t+9 of token l / 4), float32.
__device__ __forceinline__ void mma_bf16_m16n8k16(float* d, const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Whether the NT-token tile stages its token windows from pieces found
// once a tile (F4sPieces) instead of finding each row's source again every
// window (f4s_stage_rows): found once pays on the 8-token tile (80
// registers) and costs on the 16-token one, where the pieces' registers
// made ptxas spill at 64.
template <int NT>
__device__ constexpr bool f4s_keep_pieces() { return NT == 8; }

// The token pieces this thread stages in every window, found once a tile.
// Piece i is row r0 + i RS of the tile, 16 bytes at column col of the
// window; off[i] its source in 16-byte units from rows (a zero row's: row
// 0's, not read; the host keeps the 8-token tile's token buffers under 64
// GiB, f4sAddressable in policy.go), bit i of valid set for a real token.
template <int NT>
struct F4sPieces {
    static constexpr int PR = f4s_win<NT>() / 8; // 16-byte pieces a row
    static constexpr int RS = KMOE_THREADS / PR;  // rows apart
    static constexpr int RP = (NT + RS - 1) / RS; // rows a thread
    static_assert(KMOE_THREADS % PR == 0 && NT % RS == 0, "whole rows a pass, every thread the same count");
    u32 off[RP];
    u32 valid;
    u32 dst; // piece 0's shared-memory address in buffer 0
    int col;
};

// What a tile keeps: its pieces, or nothing (the tiles that find each
// row's source every window).
template <int NT, bool KEEP = f4s_keep_pieces<NT>()>
struct F4sPiecesOf {
    typedef F4sPieces<NT> T;
};
template <int NT>
struct F4sPiecesOf<NT, false> {
    struct T {};
};

template <int NT>
__device__ __forceinline__ void f4s_pieces(F4sPieces<NT>& pc, F4SyncSmem<NT>& s, int kdim) {
    constexpr int PR = F4sPieces<NT>::PR, RS = F4sPieces<NT>::RS;
    int col = threadIdx.x % PR, r0 = threadIdx.x / PR;
    pc.col = col;
    pc.valid = 0;
    pc.dst = smem_addr(&s.x[0][r0][col * 16]);
#pragma unroll
    for (int i = 0; i < F4sPieces<NT>::RP; i++) {
        int row = s.src[r0 + i * RS];
        pc.off[i] = (u32)(row < 0 ? 0 : row) * (u32)(kdim / 8) + (u32)col;
        if (row >= 0) pc.valid |= 1u << i;
    }
}

// Stage window w (k [w WIN, + WIN), WIN = f4s_win) of the tile's token
// rows (2 kdim bytes a row) into buffer b, from the pieces found once; a
// thread whose pieces are past kdim (K not a multiple of the window)
// stages none.
template <int NT>
__device__ __forceinline__ void f4s_stage_pieces(const F4sPieces<NT>& pc, int b, const u8* rows, int kdim, int w) {
    constexpr int ROW = f4s_row<NT>(), RS = F4sPieces<NT>::RS;
    constexpr u32 BUF = NT * ROW;
    if (w * f4s_win<NT>() + pc.col * 8 >= kdim) return;
    const u8* base = rows + (u64)w * (2 * f4s_win<NT>());
#pragma unroll
    for (int i = 0; i < F4sPieces<NT>::RP; i++) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(pc.dst + b * BUF + i * RS * ROW),
                     "l"(base + (u64)pc.off[i] * 16), "r"((pc.valid >> i) & 1 ? 16 : 0));
    }
}

// The same window, each row's source found from s.src (-1 a zero row)
// as it is staged; past kdim, as f4s_stage_pieces.
template <int NT>
__device__ __forceinline__ void f4s_stage_rows(F4SyncSmem<NT>& s, int b, const u8* rows, int kdim, int w) {
    constexpr int PR = f4s_win<NT>() / 8; // 16-byte pieces a row
    int col = threadIdx.x % PR, k = w * f4s_win<NT>() + col * 8;
    if (k >= kdim) return;
#pragma unroll
    for (int r = threadIdx.x / PR; r < NT; r += KMOE_THREADS / PR) {
        int row = s.src[r];
        cp_async16(&s.x[b][r][col * 16], rows + (u64)(row < 0 ? 0 : row) * 2 * kdim + 2 * k, row >= 0);
    }
}

// AH: the 128-k steps of weights each thread has in flight in registers.
template <int NT, int AH>
__device__ __forceinline__ void f4s_k_loop(float (&acc)[NT / 2], F4SyncSmem<NT>& s, const u8* rows, int kdim,
                                           F4Weights<AH>& wt, InputWait in, int ntok) {
    // The 8-token groups that hold tokens of the tile (ntok of them): the
    // others' rows are zeros, so their MMAs add nothing to accumulators no
    // epilogue reads.
    const int ngroup = imin(NT / 8, (ntok + 7) / 8);
    constexpr int WS = f4s_win<NT>() / 128, ROW = f4s_row<NT>();
    int nstep = wt.nstep;
    in.wait(); // GEMM2: the weights above are loaded before GEMM1 ends, the tokens below after
    typename F4sPiecesOf<NT>::T pc;
    if constexpr (f4s_keep_pieces<NT>()) f4s_pieces<NT>(pc, s, kdim);
    // A window's pieces past kdim (K not a multiple of the window) are
    // not staged: the last window's steps read only k below kdim.
    auto stage = [&](int b, int w) {
        if constexpr (f4s_keep_pieces<NT>()) f4s_stage_pieces<NT>(pc, b, rows, kdim, w);
        else f4s_stage_rows<NT>(s, b, rows, kdim, w);
    };
    stage(0, 0);
    cp_async_commit();
    int lane = threadIdx.x & 31;
    const u32 xa = smem_addr(&s.x[0][lane & 7][16 * (lane >> 3)]); // this lane's ldmatrix row
    for (int c0 = 0; c0 < nstep; c0 += AH) {
#pragma unroll
        for (int u = 0; u < AH; u++) {
            int c = c0 + u;
            if (c >= nstep) break;
            int j = c % WS, w = c / WS;
            if (j == 0) {
                cp_async_wait<0>();
                __syncthreads(); // window w has landed, every thread's copies; every warp is past window w - 1
                if ((w + 1) * WS < nstep) stage((w + 1) & 1, w + 1);
                cp_async_commit();
            }
            u32 xs = xa + (w & 1) * (NT * ROW) + j * 256;
            // Each word widened just before its two MMAs: 8 A registers live,
            // not a chunk's 16, which leaves registers for more steps in flight.
#pragma unroll
            for (int h = 0; h < 2; h++) {
                u32 b0, b1;
                f4_mults(wt.sc.word(u, h), &b0, &b1);
                const u32 wds[4] = {wt.raw[u][h].x, wt.raw[u][h].y, wt.raw[u][h].z, wt.raw[u][h].w};
#pragma unroll
                for (int q = 0; q < 4; q += 2) {
                    u32 a0[4], a1[4];
                    f4_widen(a0, wds[q], q < 2 ? b0 : b1);
                    f4_widen(a1, wds[q + 1], q < 2 ? b0 : b1);
#pragma unroll
                    for (int g = 0; g < NT / 8; g++) {
                        if (g > 0 && g >= ngroup) break;
                        u32 bm[4];
                        ldsm_x4(bm, xs + g * 8 * ROW + h * 128 + q * 32);
                        mma_bf16_m16n8k16(&acc[4 * g], a0, bm[0], bm[1]);
                        mma_bf16_m16n8k16(&acc[4 * g], a1, bm[2], bm[3]);
                    }
                }
                wt.reload(u, h, c);
            }
        }
    }
    cp_async_wait<0>();
}

template <int NT, bool SYNC>
struct F4SmemOf {
    typedef F4Smem<NT> T;
};
template <int NT>
struct F4SmemOf<NT, true> {
    typedef F4SyncSmem<NT> T;
};

// A wgmma-fp4 GEMM's dynamic shared memory as the loop SYNC picks lays it
// out: the wgmma loop's swizzled stages 1024-byte aligned (smem_1k), the
// mma.sync loop's where they start.
template <int NT, int SYNC>
__device__ __forceinline__ typename F4SmemOf<NT, SYNC != 0>::T& f4_smem() {
    extern __shared__ __align__(128) u8 f4_smem_raw[];
    return *(typename F4SmemOf<NT, SYNC != 0>::T*)(SYNC == 0 ? smem_1k(f4_smem_raw) : f4_smem_raw);
}

// Whether the plain (not fitted) wgmma loop of the NT-token tile
// double-buffers its A registers (f4PipeMinTokens in abi.go).
template <int NT>
__device__ constexpr bool f4_pipe() { return KMOE_F4_PIPE_MIN_T != 0 && NT >= KMOE_F4_PIPE_MIN_T; }

// The steps in flight of the loop SYNC and FIT pick (the fitted instance
// at KMOE_F4_FIT_PIPE tokens double-buffers A: fewer steps, f4FitPipe).
template <int NT, int SYNC, bool FIT>
__device__ constexpr int f4_tile_ahead() {
    return SYNC != 0 ? SYNC : FIT && NT == KMOE_F4_FIT_PIPE ? KMOE_F4_FIT_PIPE_AHEAD : f4_ahead<NT>();
}

// acc = this warpgroup's 64 weight rows (row group `group` of the layout:
// payload w, scales ws) x the tile's tokens (rows, kdim k a row), by the
// loop SYNC picks (FIT: the wgmma loop at the tile's N): the k loop of
// both GEMMs. TH: the CTA's threads (the wgmma loop's only: its token
// staging), W3's three warpgroups with fewer steps in flight (their
// registers).
template <int NT, int SYNC, bool FIT, int TH = KMOE_THREADS, bool RING = false, typename Smem>
__device__ __forceinline__ void f4_tile_mma(float (&acc)[NT / 2], Smem& s, const u8* rows, int kdim, const u8* w,
                                            const u8* ws, u64 group, InputWait in, int ntok) {
    static_assert(TH == KMOE_THREADS || SYNC == 0 && (!FIT || RING), "three warpgroups: the wgmma loop, fitted on the ring");
    static_assert(!RING || TH == KMOE_F4_W3_THREADS, "the stage ring: the three-warpgroup GEMMs");
    constexpr int AH = TH == KMOE_THREADS ? f4_tile_ahead<NT, SYNC, FIT>() : KMOE_F4_W3_AHEAD;
    F4Weights<AH> wt;
    wt.begin(w, ws, group, kdim);
#pragma unroll
    for (int i = 0; i < NT / 2; i++) acc[i] = 0.0f;
    if constexpr (SYNC != 0) f4s_k_loop<NT, SYNC>(acc, s, rows, kdim, wt, in, ntok);
    else if constexpr (FIT && TH != KMOE_THREADS)
        f4_k_loop_fit<NT, NT, AH, KMOE_F4_W3_FIT_STEP, f4_pipe<NT>(), TH, RING>(acc, s, rows, kdim, wt, in, (ntok + 7) / 8);
    else if constexpr (FIT) f4_k_loop_fit<NT, NT>(acc, s, rows, kdim, wt, in, (ntok + 7) / 8);
    else f4_k_loop<NT, NT, AH, f4_pipe<NT>(), TH, RING>(acc, s, rows, kdim, wt, in);
}
#endif
