#if defined(WG_ENABLED)
// 128-k steps of weights a thread has in flight in registers, and token
// chunks staged at once, per tile (F4Tile, generated from f4Ahead and
// f4Stages in abi_fp4.go, measured per tile).
template <int NT>
__device__ constexpr int f4_ahead() { return F4Tile<NT>::ahead; }

template <int NT>
__device__ constexpr int f4_stages() { return F4Tile<NT>::stages; }

// A stage holds one step: two 64-k chunks of the tile's tokens, each in
// the wgmma path's 128-byte swizzled form (sw_off; 1024-byte aligned
// through smem_1k).
template <int NT>
struct F4Smem {
    u8 b[f4_stages<NT>()][2][NT * WG_CHUNK_BYTES];
    int src[NT];
};
static_assert(sizeof(F4Smem<8>) + KMOE_SMEM_ALIGN == F4Tile<8>::smem && sizeof(F4Smem<16>) + KMOE_SMEM_ALIGN == F4Tile<16>::smem &&
                  sizeof(F4Smem<32>) + KMOE_SMEM_ALIGN == F4Tile<32>::smem && sizeof(F4Smem<48>) + KMOE_SMEM_ALIGN == F4Tile<48>::smem &&
                  sizeof(F4Smem<64>) + KMOE_SMEM_ALIGN == F4Tile<64>::smem && sizeof(F4Smem<128>) + KMOE_SMEM_ALIGN == F4Tile<128>::smem &&
                  sizeof(F4Smem<256>) + KMOE_SMEM_ALIGN == F4Tile<256>::smem,
              "the host's dynamic shared memory sizes (smem_1k's alignment included)");

// d += A (64 x 16 BF16 in registers, the layout's fragment) x B (16 x N,
// descriptor db), float32 accumulators. N: every multiple of 8 up to 64
// (a tile's tokens rounded up to a whole 8: f4_k_loop's NE), 128 and 256
// (the shapes: wgmma_gen.go).
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 db) { WgmmaRS<N>::mma(d, a, db); }

// The token pieces (16 bytes of a row's 128-k step) this thread stages,
// found once: piece p = threadIdx.x + TH i of the NT x 16 of a step, TH
// the CTA's threads.
// COMPACT (the 256-token tile, 16 pieces a thread): the pieces' addresses
// held in 48 registers would leave the 128 accumulators too few, so only
// piece 0's are kept and the others follow: piece i is row r0 + 16 i at
// the same byte of it (threadIdx.x fixes half and piece), and sw_off of
// row r + 16 i is sw_off of r plus 2048 i (r mod 8 unchanged); each
// stage reads the rows' sources from shared memory.
template <int NT, int TH = KMOE_THREADS>
struct F4Pieces {
    static constexpr int P = (NT * 16 + TH - 1) / TH;
    static constexpr bool COMPACT = NT == 256 && TH == KMOE_THREADS;
    static constexpr int Q = COMPACT ? 1 : P;
    const u8* src[Q]; // the piece in step 0 (a zero row's: the first row, not read); COMPACT: the tile's row 0's byte
    u32 dst[Q];       // its shared-memory address in stage 0
    bool valid[Q];    // a real token (else zeros are written)
    const int* row;   // COMPACT: the source row of piece 0 (F4Smem::src + r0), rows 16 apart
    int ld;           // COMPACT: bytes a source row
};

template <int NT, int TH>
__device__ __forceinline__ void f4_pieces(F4Pieces<NT, TH>& pc, F4Smem<NT>& s, const u8* rows, int ld) {
    if constexpr (F4Pieces<NT, TH>::COMPACT) {
        static_assert(NT * 16 == KMOE_THREADS * F4Pieces<NT, TH>::P && KMOE_THREADS / 16 == 16, "piece i: row r0 + 16 i");
        int r0 = threadIdx.x >> 4, half = (threadIdx.x >> 3) & 1, piece = threadIdx.x & 7;
        pc.src[0] = rows + half * WG_CHUNK_BYTES + piece * 16;
        pc.dst[0] = smem_addr(&s.b[0][half][sw_off(r0, piece * 16)]);
        pc.row = &s.src[r0];
        pc.ld = ld;
        return;
    }
#pragma unroll
    for (int i = 0; i < F4Pieces<NT, TH>::P; i++) {
        int p = threadIdx.x + TH * i;
        int r = (p >> 4) % NT, half = (p >> 3) & 1, piece = p & 7, row = s.src[r];
        pc.src[i] = rows + (u64)(row < 0 ? 0 : row) * ld + half * WG_CHUNK_BYTES + piece * 16;
        pc.dst[i] = smem_addr(&s.b[0][half][sw_off(r, piece * 16)]);
        pc.valid[i] = row >= 0 && p < NT * 16;
    }
}

// Stage step c (k [128c, 128c + 128)) of the first NE token rows into
// stage st (the MMAs read no others).
template <int NT, int NE, int TH>
__device__ __forceinline__ void f4_stage(const F4Pieces<NT, TH>& pc, int st, int c) {
    constexpr u32 stage = 2 * NT * WG_CHUNK_BYTES;
    if constexpr (F4Pieces<NT, TH>::COMPACT) {
        static_assert(NE == NT, "no fitted instance");
#pragma unroll
        for (int i = 0; i < F4Pieces<NT, TH>::P; i++) {
            int row = pc.row[16 * i];
            const u8* src = pc.src[0] + (u64)(row < 0 ? 0 : row) * pc.ld + c * 2 * WG_CHUNK_BYTES;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(pc.dst[0] + st * stage + 2048 * i), "l"(src),
                         "r"(row >= 0 ? 16 : 0));
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < F4Pieces<NT, TH>::P; i++) {
        if (threadIdx.x + TH * i < NE * 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(pc.dst[i] + st * stage),
                         "l"(pc.src[i] + c * 2 * WG_CHUNK_BYTES), "r"(pc.valid[i] ? 16 : 0));
    }
}

// Widen one 64-k chunk of this thread's weights (4 words, the scale word)
// into a and multiply it by the first NE of this warpgroup's tokens in the
// stage chunk whose descriptor is db (k16 step q at + 16 q: 256 bytes
// further), into the first NE / 2 accumulators (the wgmma register map
// gives tokens 8i.. 8i + 7 registers 4i.. 4i + 3 at every N). PIPE: a is
// one of two buffers, by chunk parity, and the chunk's wgmmas stay in
// flight while the next chunk is widened into the other: the wait retires
// the group before this one, the last reader of that other buffer, so no
// instruction but a wgmma writes a register an unretired wgmma reads.
template <int NT, int NE, bool PIPE>
__device__ __forceinline__ void f4_chunk(float (&acc)[NT / 2], u32 (&a)[4][4], uint4 w, u32 sc, u64 db) {
    static_assert(NE % 8 == 0 && NE <= NT, "whole 8-token groups of the tile");
    float(&d)[NE / 2] = *reinterpret_cast<float(*)[NE / 2]>(&acc[0]);
    f4_widen_chunk(a, w, sc);
    wg_fence();
#pragma unroll
    for (int q = 0; q < 4; q++) wgmma_rs<NE>(d, a[q], db + (u64)(sw_off(0, q * 32) >> 4));
    wg_commit();
    // Without PIPE, single-buffered: done before a is written again (a
    // second buffer without the retire-the-group-before wait had ptxas
    // serialize every wgmma: a wait after each HGMMA in the SASS).
    if constexpr (PIPE) wg_wait<1>();
    else wg_wait<0>();
}

// A warpgroup's weight stream: this thread's payload (wq: chunk j at
// + 128 j) and its quad's scales (F4Scales) of one 64-row group (the
// layout of internal/layout/fp4: payload w, scales ws, kdim / 64 chunks a group),
// and the words of the AH 128-k steps in flight. begin loads the first AH
// steps: first of all, since their latency is the loop's longest; each
// loop then reloads a chunk's words as soon as that chunk is widened.
template <int AH>
struct F4Weights {
    const uint4* wq;
    const uint4* wsq;
    int nstep;
    uint4 raw[AH][2];
    F4Scales<AH> sc;
    __device__ __forceinline__ void begin(const u8* w, const u8* ws, u64 group, int kdim) {
        int tid = threadIdx.x & 127, nchunk = kdim / KMOE_WG_CHUNK_K;
        int nchunk4 = (nchunk + 3) & ~3; // the scales' chunks, padded to whole groups of four
        wq = (const uint4*)(w + group * nchunk * F4_CHUNK_BYTES) + tid;
        wsq = (const uint4*)(ws + group * nchunk4 * F4_CHUNK_SCALES) + (tid >> 2);
        nstep = nchunk / 2;
#pragma unroll
        for (int i = 0; i < AH; i++) {
            if (i < nstep) {
                for (int h = 0; h < 2; h++) raw[i][h] = __ldg(wq + (2 * i + h) * 128);
            }
        }
        sc.load_first(wsq, nstep);
    }
    // Once chunk h of the step c in slot u is widened: its words are free,
    // so step c + AH's are loaded into them (scales: F4Scales::reload).
    __device__ __forceinline__ void reload(int u, int h, int c) {
        if (c + AH < nstep) raw[u][h] = __ldg(wq + (2 * (c + AH) + h) * 128);
        if (h == 1) sc.reload(wsq, u, c, nstep);
    }
};

// The oldest step this thread staged has landed: its own cp.async
// copies, S - 3 younger groups left in flight, are complete and made
// visible to the tensor cores; ARRIVE (the ring) also counts the thread
// on the stage's full mbarrier, where the plain loop meets at the CTA
// barrier next.
template <int S, bool ARRIVE>
__device__ __forceinline__ void f4_stage_landed(u64* full) {
    cp_async_wait<S - 3>();
    fence_proxy_async();
    if constexpr (ARRIVE) mbar_arrive(full);
}

// The k loop: acc (this thread's NT/2 accumulators of its warpgroup's 64
// rows x NT tokens) += weights (wt, begun) x tokens over kdim k (a
// multiple of 128), in steps of 128 k (two layout chunks), on the tile's
// first NE tokens (the MMA's N; the other accumulators keep their zeros).
// PIPE: A double-buffered (f4_chunk); then, at a step's barrier, a
// warpgroup may still have the previous step's second chunk in flight,
// and the stage refilled there is two steps back, retired either way.
// TH: the CTA's threads, which stage the tokens together.
// RING (the three-warpgroup GEMMs, Plan.Ring; PIPE): no CTA barrier a
// step. Stage st's full[st] completes once every thread's copies of its
// step have landed (each thread waits for its own, fences them for the
// tensor cores and arrives, half a step before the step), empty[st] once
// every thread's wgmmas on it have retired (each arrives after the next
// step's first chunk retires them); a warpgroup waits only for the stage
// it reads and, half a step later, for the one it refills, so it may run
// up to half a step ahead of the slowest where the barrier made it wait.
template <int NT, int NE, int AH, bool PIPE = false, int TH = KMOE_THREADS, bool RING = false>
__device__ __forceinline__ void f4_k_loop(float (&acc)[NT / 2], F4Smem<NT>& s, const u8* rows, int kdim,
                                          F4Weights<AH>& wt, InputWait in) {
    int nstep = wt.nstep;
    F4Pieces<NT, TH> pc;
    f4_pieces<NT, TH>(pc, s, rows, 2 * kdim);
    constexpr int S = f4_stages<NT>();
    static_assert(S >= 3, "a stage refilled two steps behind");
    static_assert(!RING || PIPE, "RING: a step retired by the next one's first chunk");
    u64 *full = nullptr, *empty = nullptr;
    if constexpr (RING) {
        __shared__ u64 bars[2][S];
        full = bars[0];
        empty = bars[1];
        if (threadIdx.x < S) {
            mbar_init(&full[threadIdx.x], TH);
            mbar_init(&empty[threadIdx.x], TH);
        }
        __syncthreads();
    }
    in.wait(); // GEMM2: the weights above are loaded before GEMM1 ends, the tokens below after
#pragma unroll
    for (int st = 0; st < S - 2; st++) {
        if (st < nstep) f4_stage<NT, NE, TH>(pc, st, st);
        cp_async_commit();
    }
    if constexpr (RING) f4_stage_landed<S, true>(&full[0]); // step 0's
    u32 a[2][4][4];
    const u64 d0 = sw_desc(s.b[0][0]);
    for (int c0 = 0; c0 < nstep; c0 += AH) {
#pragma unroll
        for (int u = 0; u < AH; u++) {
            int c = c0 + u;
            if (c >= nstep) break;
            int nx = c + S - 2; // into step c - 2's stage
            if constexpr (RING) {
                mbar_wait(&full[c % S], (u32)(c / S) & 1);
            } else {
                f4_stage_landed<S, false>(nullptr); // step c's (this thread's copies)
                __syncthreads(); // every thread's; and every warpgroup's wgmmas on step c - 1 are done
                if (nx < nstep) f4_stage<NT, NE, TH>(pc, nx % S, nx);
                cp_async_commit();
            }
            // The descriptors, from stage 0's (the start address field
            // counts 16-byte units; no carry out of it within shared memory).
            u64 db = d0 + (u64)((c % S) * (int)sizeof(s.b[0]) >> 4);
            // Each chunk's weights are reloaded (step c + AH's) once
            // widened: loaded into registers still in use, they were loaded
            // into others and moved back at once, a move that waited the
            // whole load, a large share of the stalls at small M.
#pragma unroll
            for (int h = 0; h < 2; h++) {
                f4_chunk<NT, NE, PIPE>(acc, a[PIPE ? h : 0], wt.raw[u][h], wt.sc.word(u, h), db + h * (sizeof(s.b[0][0]) >> 4));
                wt.reload(u, h, c);
                if constexpr (RING) {
                    if (h == 0) {
                        if (c >= 1) mbar_arrive(&empty[(c - 1) % S]); // step c - 1's last group retired in the chunk
                        if (nx < nstep) {
                            if (c >= 2) mbar_wait(&empty[nx % S], (u32)((c - 2) / S) & 1);
                            f4_stage<NT, NE, TH>(pc, nx % S, nx);
                        }
                        cp_async_commit();
                        if (c + 1 < nstep) f4_stage_landed<S, true>(&full[(c + 1) % S]); // step c + 1's
                    }
                }
            }
        }
    }
    if constexpr (PIPE) wg_wait<0>(); // the last chunk's group
#pragma unroll
    for (int i = 0; i < NT / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
    cp_async_wait<0>();
}

// The k loop at N = the tile's tokens rounded up to a whole STEP (ng
// groups of 8; the _fit instances, f4FitTiles in abi.go, and the
// three-warpgroup ring's, f4W3FitStep): the tensor cores' time is
// proportional to N, and a 32-token tile at M=48 holds ~14 tokens, a
// 64-token tile at M=128 ~37, a 128-token one at M=256 ~73. Its own
// instances: in the two-warpgroup kernels one loop per N ran full tiles
// slower than one loop, so large M keep the plain ones there; the
// three-warpgroup ring's ran them as fast and take every M.
// PIPE, TH, RING: as for f4_k_loop.
template <int NT, int NE, int AH, int STEP = 8, bool PIPE = NT == KMOE_F4_FIT_PIPE, int TH = KMOE_THREADS,
          bool RING = false>
__device__ __forceinline__ void f4_k_loop_fit(float (&acc)[NT / 2], F4Smem<NT>& s, const u8* rows, int kdim,
                                              F4Weights<AH>& wt, InputWait in, int ng) {
    static_assert(STEP % 8 == 0 && NT % STEP == 0, "whole 8-token groups");
    if constexpr (NE > STEP) {
        if (8 * ng <= NE - STEP) {
            f4_k_loop_fit<NT, NE - STEP, AH, STEP, PIPE, TH, RING>(acc, s, rows, kdim, wt, in, ng);
            return;
        }
    }
    f4_k_loop<NT, NE, AH, PIPE, TH, RING>(acc, s, rows, kdim, wt, in);
}
#endif
