// kimimoe MoE kernels: MXFP8 activations x MXFP4 weights, [up; gate] FC1,
// gated activation and MXFP8 requantization fused after GEMM1, grouped
// GEMM2, deterministic finalize. Compiled at run time by NVRTC for the
// device's architecture; no CUDA headers are included.
//
// The block-scaled MMA (mx_mma below) has two bodies:
//  - sm_89/sm_90: mma.sync m16n8k32 e4m3 x e4m3 with a zero accumulator for
//    each 32-block, then a float32 promotion acc += d * scaleA * scaleB.
//    E2M1 weights are widened to E4M3 exactly (every E2M1 value is an E4M3
//    value).
//  - sm_120a (KMOE_NATIVE_MX): mma.sync.kind::mxf8f6f4.block_scale with the
//    ue8m0 scales applied by the tensor core. Compiled, never run here.
//
// The ABI (KMOE_* macros, one argument struct per kernel) is generated
// from backend/cuda/abi.go and prepended to this file before compiling;
// each kernel takes its struct by value. The static_asserts below tie the
// code's assumptions to that geometry.

#ifndef KMOE_THREADS
#error "compile with the ABI header from backend/cuda/abi.go prepended"
#endif

typedef unsigned long long u64;
struct __align__(8) f2 {
    float x, y;
};

#define BLOCK 32

static_assert(KMOE_THREADS == 256, "the GEMMs' warp roles assume 8 warps");
static_assert(KMOE_GEMM1_FEATURES == 64, "GEMM1: 8 warps x 8 features, two 32-feature MXFP8 blocks per CTA");
static_assert(KMOE_GEMM2_ROWS == 128, "GEMM2: 8 warps x 16 rows");
static_assert(KMOE_STAGE_K == 128, "stage_tokens moves KC/16 16-byte pieces per token");
static_assert(KMOE_PARAM_STRIDE == 5, "gated_act reads 5 parameters per expert");

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ u32 umax(u32 a, u32 b) { return a > b ? a : b; }

// ------------------------------------------------------------ formats --

// E8M0 byte -> float 2^(s-127); 0x00 is the subnormal 2^-127; 0xFF NaN.
// Selects, not branches: it runs once per MMA operand column.
__device__ __forceinline__ float e8m0_to_float(u32 s) {
    u32 bits = s << 23;
    bits = s == 0u ? 0x00400000u : bits;
    bits = s == 0xFFu ? 0x7FC00000u : bits;
    return __uint_as_float(bits);
}

// 2^(127-s) as float for s in [0, 254]: the inverse scale (2^-127 for 0xFE
// is subnormal).
__device__ __forceinline__ float e8m0_inverse(u32 s) {
    u32 e = 254u - s; // biased exponent of 2^(127-s)
    if (e == 0u) return __uint_as_float(0x00400000u);
    return __uint_as_float(e << 23);
}

// |x| (float bits, sign cleared, not NaN) -> E4M3 code, round to nearest
// even, saturating at 448. The same arithmetic as mxfp.e4m3Abs32.
__device__ __forceinline__ u32 e4m3_abs(u32 u) {
    if (u >= 0x43E00000u) return 0x7Eu;
    if (u < 0x3C800000u) {
        float f = __fadd_rn(__uint_as_float(u), 16384.0f);
        return __float_as_uint(f) - 0x46800000u;
    }
    return ((u + 0x7FFFFu + ((u >> 20) & 1u)) >> 20) - (120u << 3);
}

// Block scale exponent X + 127 from amax bits (non-NaN max of |v|), per
// recipe (KMOE_RECIPE_FLOOR or KMOE_RECIPE_RCEIL). E4M3: emax 8, maxpos 448 = 1.75 * 2^8.
// Returns 0xFF for a floor block with a non-finite element.
__device__ __forceinline__ u32 block_scale_e4m3(u32 amax, bool nan, int recipe) {
    if (recipe == KMOE_RECIPE_FLOOR && (nan || amax >= 0x7F800000u)) return 0xFFu;
    int x;
    if (amax == 0u) x = -127;
    else if (amax >= 0x7F800000u) x = 127;
    else if (amax < 0x00800000u) x = -127; // subnormal amax: below every clamp
    else {
        int e = (int)(amax >> 23) - 127;
        u32 m = amax & 0x7FFFFFu;
        if (recipe == KMOE_RECIPE_FLOOR) x = e - 8;
        else x = (m <= 0x600000u) ? e - 8 : e - 7;
    }
    x = imax(-127, imin(127, x));
    return (u32)(x + 127);
}

// v's E4M3 code in a block of scale sc (X + 127): 0x7F (NaN) for a NaN
// scale (floor's non-finite blocks); for a finite scale v / 2^X rounded to
// nearest even and saturated at 448, with a NaN v (rceil) as +448 (0x7E).
__device__ __forceinline__ u32 e4m3_code(float v, u32 sc) {
    if (sc == 0xFFu) return 0x7Fu;
    float scaled = __fmul_rn(v, e8m0_inverse(sc));
    u32 su = __float_as_uint(scaled), sa = su & 0x7FFFFFFFu;
    if (sa > 0x7F800000u) return 0x7Eu;
    return e4m3_abs(sa) | ((su >> 24) & 0x80u);
}

// Quantize one 32-block held one element per lane of a warp: returns this
// lane's code; lane 0's *scale_out gets the scale. NaN rules as mxfp: floor
// -> 0xFF and 0x7F codes; rceil -> NaN skipped, encoded +448.
__device__ __forceinline__ u32 warp_quantize_e4m3(float v, int recipe, u32* scale_out) {
    u32 u = __float_as_uint(v);
    u32 a = u & 0x7FFFFFFFu;
    bool isnan = a > 0x7F800000u;
    u32 amax = isnan ? 0u : a;
    for (int o = 16; o > 0; o >>= 1) amax = umax(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    u32 s = block_scale_e4m3(amax, __any_sync(0xFFFFFFFFu, isnan), recipe);
    *scale_out = s;
    return e4m3_code(v, s);
}

// The scale (X + 127) of a 32-block held four elements a lane by eight
// lanes (lanes 8q .. 8q + 7 hold block q of the warp's four): the
// functions and values of warp_quantize_e4m3 (amax over the non-NaN
// elements, the flag of any NaN), so the same scale, with three shuffles
// and a vote for the lane's four elements where warp_quantize_e4m3 takes
// five shuffles and a vote for one. Every lane of the warp calls it.
__device__ __forceinline__ u32 block_scale_lanes8(const float (&v)[4], int recipe, int lane) {
    u32 amax = 0;
    bool nan = false;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 a = __float_as_uint(v[i]) & 0x7FFFFFFFu;
        if (a > 0x7F800000u) nan = true;
        else amax = umax(amax, a);
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = umax(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const bool block_nan = ((__ballot_sync(0xFFFFFFFFu, nan) >> (lane & 24)) & 0xFFu) != 0u;
    return block_scale_e4m3(amax, block_nan, recipe);
}

__device__ __forceinline__ float round_bf16(float x) {
    u32 u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float((u & 0x80000000u) | 0x7FC00000u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xFFFF0000u);
}

// Two packed FP4 bytes (4 E2M1 codes, element 0 in the low nibble) -> four
// E4M3 bytes in one register, element 0 in the low byte. The widening is
// exact: E2M1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 are the E4M3 bytes 0x00,
// 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C; one byte permute looks all four
// up (selector = the 3-bit magnitudes). The signs take a second permute
// (PTX prmt's generic mode): with the whole code as selector, a set bit 3
// (a negative code) makes it replicate the selected byte's msb, so from bytes 0x80 it gives
// 0xFF for a negative code and 0x80 for a positive one: bit 0 of each byte
// is the sign, shifted to bit 7. Five instructions for four codes.
__device__ __forceinline__ u32 widen4(u32 two) {
    u32 mag = __byte_perm(0x3C383000u, 0x4C484440u, two & 0x7777u);
    u32 m; // PTX prmt, not __byte_perm: the intrinsic takes only 3 selector bits, no sign mode
    asm("prmt.b32 %0, %1, %1, %2;" : "=r"(m) : "r"(0x80808080u), "r"(two));
    return mag | ((m << 7) & 0x80808080u);
}

// widen4 for every 16-bit input, for the exhaustive test.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_widen4(const TestWiden4Args a) {
    u32 v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < 65536u) a.out[v] = widen4(v);
}

// The token operand (x codes, and the intermediate between the GEMMs) is
// stored permuted within each 128-element chunk so that lane t of a quad finds its
// B bytes for the chunk's 4 blocks contiguous: in-chunk element q*32 + 8t +
// j (block q, the MMA's permuted k) is stored at t*32 + q*8 + j. Its float
// scales are [row][k/32], 4 per chunk contiguous. Rows past the last token
// point at a zero row (codes 0, scales 0), so no lane needs a branch.
__device__ __forceinline__ int dec_bpos(int i) { return (i & ~127) + ((i >> 3) & 3) * 32 + ((i >> 5) & 3) * 8 + (i & 7); }


// ------------------------------------------------------ the block MMA --

// One 32-deep block of D[16x8] += (A * 2^sa_row) (B * 2^sb_col), A = 16
// weight rows, B = 8 token columns. rs0/rs1: the scales of rows g and g+8
// as floats; cs0/cs1: of columns 2t and 2t+1 (sm_90 body). sa_lane/sb_lane:
// the scale bytes in the native body's lane convention.
//
// sm_90 promotion: (d * rs) * cs is exact (power-of-two scalings of a
// float32 MMA result, unless it falls below float32's normal range), so the
// fused multiply-add rounds once, as a multiply and an add would. The asm is not volatile: it has no side
// effects, and the compiler may overlap MMAs with earlier promotions.
__device__ __forceinline__ void mx_mma(float acc[4], const u32 a[4], const u32 b[2], float rs0, float rs1,
                                       float cs0, float cs1, u32 sa_lane, u32 sb_lane) {
#if defined(KMOE_NATIVE_MX)
    // Native: lane 4r supplies row r's scale, lane 4r+1 row r+8's
    // (thread-id-a 0); lane 4n supplies column n's (thread-id-b 0).
    asm("mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e4m3.e4m3.f32.ue8m0 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, {%10}, {%11,%12}, {%13}, {%14,%15};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "r"(sa_lane), "h"((u16)0), "h"((u16)0), "r"(sb_lane), "h"((u16)0), "h"((u16)0));
#else
    float d0, d1, d2, d3;
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
    acc[0] = __fmaf_rn(__fmul_rn(d0, rs0), cs0, acc[0]);
    acc[1] = __fmaf_rn(__fmul_rn(d1, rs0), cs1, acc[1]);
    acc[2] = __fmaf_rn(__fmul_rn(d2, rs1), cs0, acc[2]);
    acc[3] = __fmaf_rn(__fmul_rn(d3, rs1), cs1, acc[3]);
#endif
}

// ------------------------------------------------------- activations --

// Kind codes (KMOE_ACT_*) are FlashInfer 0.6.18's ABI values and p holds
// one expert's KMOE_PARAM_STRIDE parameters, both from the ABI header. Same
// operation order as activation.Eval32.
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// fminf/fmaxf return the other operand for a NaN; the oracle (Go's
// math.Min/Max, like torch.clamp) propagates NaN, so these do too. The
// limits are never NaN.
__device__ __forceinline__ float pmin(float a, float b) { return a != a ? a : fminf(a, b); }
__device__ __forceinline__ float pmax(float a, float b) { return a != a ? a : fmaxf(a, b); }

// x / b for a parameter b: where b is a power of two whose reciprocal is
// a normal float, the product by that reciprocal, which is the same
// correctly rounded value (quotient and product are one real number), in
// one instruction instead of the division's sequence; else the division.
// Kimi-K3's SiTU divides the gate by its beta, 4.
__device__ __forceinline__ float div_param(float x, float b) {
    u32 bb = __float_as_uint(b), e = (bb >> 23) & 0xFFu;
    if ((bb & 0x7FFFFFu) == 0u && e - 1u < 253u)
        return __fmul_rn(x, __uint_as_float((bb & 0x80000000u) | ((254u - e) << 23)));
    return __fdiv_rn(x, b);
}

// The test of div_param: out[i] = div_param(x[i], b[i]), as bits.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_div_param(const TestDivParamArgs a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.out[i] = __float_as_uint(div_param(__uint_as_float(a.x[i]), __uint_as_float(a.b[i])));
}

__device__ float gated_act(int kind, const float* p, float g, float u) {
    switch (kind) {
    case KMOE_ACT_SWIGLU: return g * sigmoidf_(g) * u;
    case KMOE_ACT_GEGLU: return g / 2.0f * erfcf(-g / 1.41421356237309515f) * u;
    case KMOE_ACT_SWIGLU_OAI: {
        float lim = p[KMOE_PARAM_SWIGLU_LIMIT];
        g = pmin(g, lim);
        float uu = pmin(pmax(u, -lim), lim);
        return g * sigmoidf_(p[KMOE_PARAM_SWIGLU_ALPHA] * g) * (uu + p[KMOE_PARAM_SWIGLU_BETA]);
    }
    case KMOE_ACT_SWIGLU_STEP: {
        float lim = p[KMOE_PARAM_SWIGLU_LIMIT];
        return pmin(g * sigmoidf_(g), lim) * pmin(pmax(u, -lim), lim);
    }
    case KMOE_ACT_GEGLU_TANH: return g * sigmoidf_(2.0f * 0.797884560802865355f * (g + 0.044715f * g * g * g)) * u;
    case KMOE_ACT_SITU: {
        float b = p[KMOE_PARAM_SITU_BETA], lb = p[KMOE_PARAM_SITU_LINEAR_BETA];
        return b * tanhf(div_param(g, b)) * sigmoidf_(g) * (lb * tanhf(div_param(u, lb)));
    }
    }
    return __uint_as_float(0x7FC00000u);
}

// --------------------------------------------------- quantize x (MXFP8) --

// One warp per 32-block of x [M, K].
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_quantize_x(const QuantizeXArgs a) {
    const float* __restrict__ x = a.x;
    u8* __restrict__ codes = a.codes;
    u8* __restrict__ scales = a.scales;
    int nblocks = a.n_blocks, recipe = a.recipe;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= nblocks) return;
    float v = x[(u64)warp * BLOCK + lane];
    u32 s;
    u32 c = warp_quantize_e4m3(v, recipe, &s);
    codes[(u64)warp * BLOCK + lane] = (u8)c;
    if (lane == 0) scales[warp] = (u8)s;
}

// ------------------------------------------------------------ routing --

__device__ __forceinline__ int local_expert(int id, int rank, int elocal) {
    if (id < 0) return -1;
    int l = id - rank * elocal;
    return (l >= 0 && l < elocal) ? l : -1;
}

// The entries a thread takes at a time in kmoe_route_count and
// kmoe_route_scatter (consecutive, in entry order): one CTA an expert reads
// every entry, so each thread's loads were one at a time, each waited for,
// and the scatter met three barriers a 256 entries: several loads in
// flight a thread are what make the large prologue cheap.
#define ROUTE_PER 8

static_assert(ROUTE_PER == 8, "a group is two 16-byte loads");

// Whether entries i .. i + ROUTE_PER - 1 (those below n; i a multiple of
// ROUTE_PER) are routed to local expert e: bit q for entry i + q. ids is a
// device allocation (16-byte aligned), so a whole group is two 16-byte
// loads; past n an entry reads as -1, routed nowhere.
__device__ __forceinline__ void route_ids(const int* __restrict__ ids, int i, int n, int (&id)[ROUTE_PER]) {
    if (i + ROUTE_PER <= n) {
        const int4 lo = *(const int4*)&ids[i], hi = *(const int4*)&ids[i + 4];
        id[0] = lo.x, id[1] = lo.y, id[2] = lo.z, id[3] = lo.w, id[4] = hi.x, id[5] = hi.y, id[6] = hi.z, id[7] = hi.w;
    } else {
#pragma unroll
        for (int q = 0; q < ROUTE_PER; q++) id[q] = i + q < n ? ids[i + q] : -1;
    }
}

__device__ __forceinline__ u32 route_mine(const int* __restrict__ ids, int i, int n, int rank, int elocal, int e) {
    int id[ROUTE_PER];
    route_ids(ids, i, n, id);
    u32 mine = 0;
#pragma unroll
    for (int q = 0; q < ROUTE_PER; q++) mine |= (u32)(local_expert(id[q], rank, elocal) == e) << q;
    return mine;
}

// counts[e] = entries routed to local expert e. grid = E_local, block 256.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_route_count(const RouteCountArgs a) {
    __shared__ int warpsum[KMOE_THREADS / 32];
    int e = blockIdx.x;
    int c = 0;
    for (int i = threadIdx.x * ROUTE_PER; i < a.n_entries; i += blockDim.x * ROUTE_PER)
        c += __popc(route_mine(a.ids, i, a.n_entries, a.rank, a.e_local, e));
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xFFFFFFFFu, c, o);
    if ((threadIdx.x & 31) == 0) warpsum[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += warpsum[w];
        a.counts[e] = t;
    }
}

// Stable expert-sorted permutation: CTA e writes, in entry order, the
// entries routed to expert e at rows offset[e]..; pos[entry] = row. Also
// tile_base[e] = sum over e' < e of ceil(count/TT), and tile_base[E] and
// offset[E] totals. grid = E_local, block 256 (8 warps), ROUTE_PER
// consecutive entries a thread at a time. route_scatter_expert is CTA e's
// part, given every expert's count (global or shared memory); the whole
// CTA calls it (kmoe_route_scatter, kmoe_route_x_many).
__device__ void route_scatter_expert(const int* __restrict__ ids, int nentries, int rank, int elocal, int e, int tt,
                                     const int* counts, int* __restrict__ offset, int* __restrict__ tile_base,
                                     int* __restrict__ perm, int* __restrict__ pos) {
    __shared__ int s_off, s_run;
    __shared__ int warpcnt[KMOE_THREADS / 32];
    if (threadIdx.x == 0) {
        int off = 0, tb = 0;
        for (int i = 0; i < e; i++) {
            off += counts[i];
            tb += (counts[i] + tt - 1) / tt;
        }
        offset[e] = off;
        tile_base[e] = tb;
        if (e == elocal - 1) {
            offset[elocal] = off + counts[e];
            tile_base[elocal] = tb + (counts[e] + tt - 1) / tt;
        }
        s_off = off;
        s_run = 0;
    }
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int base = 0; base < nentries; base += blockDim.x * ROUTE_PER) {
        int i0 = base + threadIdx.x * ROUTE_PER;
        u32 mine = route_mine(ids, i0, nentries, rank, elocal, e);
        int c = __popc(mine), incl = c; // inclusive scan of c over the warp's lanes
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += y;
        }
        if (lane == 31) warpcnt[warp] = incl;
        __syncthreads();
        int row = s_off + s_run + incl - c;
        for (int w = 0; w < warp; w++) row += warpcnt[w];
        for (; mine != 0u; mine &= mine - 1u) {
            int i = i0 + __ffs(mine) - 1;
            perm[row] = i;
            pos[i] = row++;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int t = 0;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += warpcnt[w];
            s_run += t;
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_route_scatter(const RouteScatterArgs a) {
    route_scatter_expert(a.ids, a.n_entries, a.rank, a.e_local, blockIdx.x, a.tt, a.counts, a.offset, a.tile_base, a.perm,
                         a.pos);
}

// Routing in one CTA, for few entries (the decode prologue, and the BF16
// paths' up to abiRouteCTAMax entries): counts in shared memory
// (s_counts[elocal + 1]), offsets (the exclusive scan, offset[elocal] the
// total) and, where not null, the touched experts (touched[elocal] =
// their number) and the token tiles (tile_base[e] = sum over e' < e of
// ceil(count / tt), tile_base[elocal] the total: kmoe_route_scatter's);
// then the stable scatter in entry order, one warp, 32 entries a step:
// pos[i] = the row of entry i (-1: not local), perm[row] = i.
__device__ void route_cta(const int* __restrict__ ids, int n, int rank, int elocal, int* s_counts, int* pos, int* perm,
                          int* offset, int* touched, int* tile_base, int tt) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int e = threadIdx.x; e <= elocal; e += blockDim.x) s_counts[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int e = local_expert(ids[i], rank, elocal);
        if (e >= 0) atomicAdd(&s_counts[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) { // offsets (exclusive scan), the touched list, the tiles
        int off = 0, nt = 0, tb = 0;
        for (int e = 0; e < elocal; e++) {
            int c = s_counts[e];
            offset[e] = off;
            if (touched && c > 0) touched[nt++] = e;
            if (tile_base) {
                tile_base[e] = tb;
                tb += (c + tt - 1) / tt;
            }
            s_counts[e] = off; // from here on: the next free row of e
            off += c;
        }
        offset[elocal] = off;
        if (touched) touched[elocal] = nt;
        if (tile_base) tile_base[elocal] = tb;
    }
    __syncthreads();
    if (warp == 0) { // stable scatter in entry order, 32 entries a step
        for (int base = 0; base < n; base += 32) {
            int i = base + lane;
            int e = i < n ? local_expert(ids[i], rank, elocal) : -1;
            u32 peers = __match_any_sync(0xFFFFFFFFu, e);
            int before = __popc(peers & ((1u << lane) - 1u));
            int row = e >= 0 ? s_counts[e] + before : -1;
            __syncwarp();
            if (e >= 0 && before == __popc(peers) - 1) s_counts[e] += __popc(peers);
            __syncwarp();
            if (i < n) {
                pos[i] = row;
                if (row >= 0) perm[row] = i;
            }
        }
    }
}

// The expert whose range base[e] .. base[e + 1] - 1 holds j: of token
// tile j with base tile_base, of routed row j with base offset. The last
// e with base[e] <= j, so an empty expert (its base equal to the next
// one's) is passed over.
__device__ __forceinline__ int expert_of(const int* base, int elocal, int j) {
    int lo = 0, hi = elocal - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (base[mid] <= j) lo = mid; else hi = mid - 1;
    }
    return lo;
}

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

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// Programmatic dependent launch (sm_90; launchPDL in gpu.go). pdl_wait
// returns once the kernels this one depends on have completed and their
// writes are visible (at once for a kernel launched without the
// attribute); pdl_trigger lets the next kernel in the stream be launched
// once every CTA of this one has triggered or exited, so its CTAs take
// SMs as this one's last CTAs leave them (its own pdl_wait still waits
// for all of this kernel).
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Per-tile readiness of GEMM1's intermediate (the wgmma-fp4 path), so
// that GEMM2 overlaps GEMM1's last wave: each GEMM1 CTA counts itself in ready[tile] once its
// stores are done (tile_signal: every thread's stores, a fence, the
// count with release semantics), and a GEMM2 CTA waits for its own
// tile's count (tile_wait: one thread acquires, the barrier passes it
// on) instead of for the whole GEMM1 grid (pdl_wait), so GEMM2's first
// tiles run while GEMM1's last ones finish. No deadlock: GEMM2 is
// launched once every GEMM1 CTA has triggered it, so every GEMM1 CTA is
// resident or done by then. The prologue zeroes the counts each forward.
__device__ __forceinline__ void tile_signal(int* ready) {
    __threadfence();
    __syncthreads();
#if __CUDA_ARCH__ >= 700
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(ready) : "memory");
#endif
}
__device__ __forceinline__ void tile_wait(const int* ready, int target) {
#if __CUDA_ARCH__ >= 700
    if (threadIdx.x == 0) {
        int v;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(ready) : "memory");
            if (v >= target) break;
            __nanosleep(32);
        }
    }
#endif
    __syncthreads();
}

// What the k loops wait for before reading the tokens: GEMM2 its tile's
// intermediate (ready not null: ready[tile] reaching target), else the
// previous kernel (pdl_wait). The pointer is tested before any arithmetic
// on it: an offset null pointer let the compiler drop the test (the
// sanitizer caught thread 0 reading address 0).
struct InputWait {
    const int* ready;
    int tile, target;
    __device__ __forceinline__ void wait() const {
        if (ready != nullptr) tile_wait(ready + tile, target);
        else pdl_wait();
    }
};

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait0() { asm volatile("cp.async.wait_group 0;\n" ::); }

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

// E4M3 code -> float (exact; 0x7F and 0xFF are NaN).
__device__ __forceinline__ float e4m3_to_float(u32 c) {
    u32 e = (c >> 3) & 15u, m = c & 7u;
    float v = e == 0 ? (float)m * 0.001953125f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    if ((c & 0x7Fu) == 0x7Fu) v = __uint_as_float(0x7FC00000u);
    return (c & 0x80u) ? -v : v;
}

// float -> BF16 bits for values that are BF16 values (the dequantized
// MXFP8 ones); NaN stays NaN.
__device__ __forceinline__ u32 bf16_bits(float v) {
    return v != v ? 0x7FC0u : (__float_as_uint(v) >> 16);
}

// The BF16 bits of the MXFP8 value code x sf (sf the block's scale as a
// float): exact below 2^128, an infinity from there (xPastBF16 in Go keeps
// such x off the BF16 paths).
__device__ __forceinline__ u32 mxfp8_bf16(u32 code, float sf) { return bf16_bits(__fmul_rn(e4m3_to_float(code), sf)); }

// mxfp8_bf16 of four codes of one block (scale sf as a float), element
// 2i in the low half of word i.
__device__ __forceinline__ uint2 mxfp8_bf16x4(u32 c0, u32 c1, u32 c2, u32 c3, float sf) {
    return make_uint2(mxfp8_bf16(c0, sf) | mxfp8_bf16(c1, sf) << 16, mxfp8_bf16(c2, sf) | mxfp8_bf16(c3, sf) << 16);
}

// Four elements of a 32-block held as block_scale_lanes8 holds them ->
// the BF16 bits of their MXFP8 values (the recipe's scale), element 2i in
// the low half of word i.
__device__ __forceinline__ uint2 mxfp8_bf16_lanes8(const float (&v)[4], int recipe, int lane) {
    const u32 sc = block_scale_lanes8(v, recipe, lane);
    return mxfp8_bf16x4(e4m3_code(v[0], sc), e4m3_code(v[1], sc), e4m3_code(v[2], sc), e4m3_code(v[3], sc),
                        e8m0_to_float(sc));
}

// gated_act, called rather than inlined: the wgmma GEMM1 evaluates it at
// 64 unrolled sites, and inlined copies of every activation there made the
// kernel miss the instruction cache (ncu: 5 of 11.7 cycles per issued
// instruction waiting for an instruction fetch).
__device__ __noinline__ float gated_act_call(int kind, const float* p, float g, float u) { return gated_act(kind, p, g, u); }

// The activation of one up and gate on a chain: the flashinfer chain
// rounds both inputs and the result to BF16. KIND: the kind fixed at
// compile time, or -1 for kind; CALL: through gated_act_call (kind).
// Every GEMM1 epilogue and kmoe_act_requant.
template <int KIND, bool CALL = false>
__device__ __forceinline__ float chain_act(int kind, const float* p, float gate, float up, bool chain_fi) {
    if (chain_fi) {
        up = round_bf16(up);
        gate = round_bf16(gate);
    }
    float act;
    if constexpr (CALL) act = gated_act_call(kind, p, gate, up);
    else act = gated_act(KIND >= 0 ? KIND : kind, p, gate, up);
    if (chain_fi) act = round_bf16(act);
    return act;
}

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
// (act_requant_store dispatches on the kind once), or -1 for kind.
template <int NS, int KIND>
__device__ __forceinline__ void act_requant_store_k(const float (&acc)[NS][4], int nsub, int count, u32 (*s_amax)[NS * 8],
                                                    int warp, int bw0, const float* p, int kind, int chain, int recipe,
                                                    int g, int t, u8* aq, u8* aqs, float* aqsf, int row0, int ldn,
                                                    int fw, bool permuted, u8* aqbf) {
    bool chain_fi = chain == KMOE_CHAIN_FLASHINFER;
    int rcp = chain_fi ? KMOE_RECIPE_RCEIL : recipe;
    float v[NS][2];
#pragma unroll
    for (int s = 0; s < NS; s++) {
        if (s >= nsub) break;
        for (int h = 0; h < 2; h++) {
            float act = chain_act<KIND>(kind, p, acc[s][2 + h], acc[s][h], chain_fi);
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
            u32 code = e4m3_code(v[s][h], sc);
            u64 row = (u64)(row0 + tok);
            if (aqbf) {
                *(u16*)&aqbf[(row * ldn + fw + g) * 2] = (u16)mxfp8_bf16(code, e8m0_to_float(sc));
                continue;
            }
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
// and GEMM1's warps waited on instruction fetch at each element's start
// (ncu source counters: a third of the epilogue's samples). Only SiTU: a constant kind for every kind made the
// module's compile 3.7 times as long (NVRTC), SiTU alone 1.5 times.
template <int NS>
__device__ __forceinline__ void act_requant_store(const float (&acc)[NS][4], int nsub, int count, u32 (*s_amax)[NS * 8],
                                                  int warp, int bw0, const float* p, int kind, int chain, int recipe,
                                                  int g, int t, u8* aq, u8* aqs, float* aqsf, int row0, int ldn,
                                                  int fw, bool permuted, u8* aqbf) {
#define EPILOGUE_OF(K) \
    act_requant_store_k<NS, K>(acc, nsub, count, s_amax, warp, bw0, p, kind, chain, recipe, g, t, aq, aqs, aqsf, row0, ldn, fw, permuted, aqbf)
    if (kind == KMOE_ACT_SITU) EPILOGUE_OF(KMOE_ACT_SITU); // Kimi-K3's
    else EPILOGUE_OF(-1);                               // the others: the kind read at run time
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
                              a.aq, a.aqs, nullptr, tl.row0, N, fw, false, nullptr);
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
// an SM: without the bound, gemm2 at TT=128 took 132 registers, ran one CTA
// per SM and was 1.5x slower (ncu on the H200, docs/PERF.md).
static_assert(KMOE_TILE_SMALL == 64 && KMOE_TILE_LARGE == 128, "the instances below");
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm1_act_t64(const Gemm1Args a) { gemm1_act<64>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm1_act_t128(const Gemm1Args a) { gemm1_act<128>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm2_t64(const Gemm2Args a) { gemm2<64>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, 2) kmoe_gemm2_t128(const Gemm2Args a) { gemm2<128>(a); }

// ------------------------------------------------------- the wgmma path --
//
// The grouped GEMMs on Hopper's warpgroup MMA (sm_90a only: compiled where
// NVRTC defines __CUDA_ARCH_FEAT_SM90_ALL, empty stubs elsewhere), on
// BF16 operands: every MXFP4 weight and every MXFP8 token value is a BF16
// value and BF16 products are exact in float32, so the tensor cores sum a
// whole row in float32 with no per-block scale to apply (wg_layout.go).
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
// bytes at 128 r, its 16-byte piece j in slot j ^ (r % 8); measured 8-17%
// faster than the no-swizzle core-matrix form, docs/PERF.md): the tokens
// gathered row by row, the weights one contiguous block per stage. Each
// stage is four wgmma m64nBNk16 per warpgroup, issued asynchronously; a stage is refilled once both warpgroups' wgmmas on it
// have completed (wait_group 1 keeps the next stage's in flight).

// The stages of a BN-row instance: 128-row tiles run two CTAs an SM
// (their 64 accumulators a thread allow it), so three stages of 32 KB;
// 256-row tiles one, with four of 48 KB.
template <int BN>
__device__ constexpr int wg_stages() { return BN == 128 ? KMOE_WG_STAGES_128 : KMOE_WG_STAGES_256; }
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
static_assert(sizeof(WgSmem<128>) + KMOE_SMEM_ALIGN == KMOE_WG_SMEM_128 && sizeof(WgSmem<256>) + KMOE_SMEM_ALIGN == KMOE_WG_SMEM_256,
              "the host's dynamic shared memory sizes (smem_1k's alignment included)");

// x as BF16: the MXFP8 values of x (quantized here from float32 with the
// recipe, as kmoe_quantize_x does, or given as codes and scales), four
// 32-blocks b0 .. b0 + 3 (those below nblocks) by one warp, eight lanes a
// block and four elements a lane (block_scale_lanes8; a block a warp and
// an element a lane gave the same bits in more instructions). Every lane of the warp
// calls it.
__device__ __forceinline__ void x_bf16_blocks4(const float* __restrict__ x, const u8* __restrict__ codes,
                                               const u8* __restrict__ scales, u16* __restrict__ out, int form,
                                               int recipe, u32 nblocks, u32 b0, int lane) {
    const u32 b = b0 + (lane >> 3);
    const bool live = b < nblocks; // a dead lane's zeros stay in its own block's shuffles
    const u64 i = (u64)b * BLOCK + 4 * (lane & 7);
    uint2 h;
    if (form == KMOE_FORM_FLOAT) {
        const float4 v = live ? *(const float4*)&x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float f[4] = {v.x, v.y, v.z, v.w};
        h = mxfp8_bf16_lanes8(f, recipe, lane);
    } else {
        if (!live) return;
        const u32 c = *(const u32*)&codes[i];
        h = mxfp8_bf16x4(c & 0xFFu, (c >> 8) & 0xFFu, (c >> 16) & 0xFFu, c >> 24, e8m0_to_float(scales[b]));
    }
    if (live) *(uint2*)&out[i] = h;
}

// x as BF16, 32-block b by one warp, an element a lane (warp_quantize_e4m3):
// for the one-launch prologue of few tokens (kmoe_route_x_bf16), where the
// blocks are few and each warp's chain is the kernel's time. There the
// four-a-lane form (x_bf16_blocks4, fewer instructions a block but a chain
// four elements long) made few-token forwards slower; for many tokens the instructions count, and kmoe_x_bf16
// takes that form.
__device__ __forceinline__ void x_bf16_block(const float* __restrict__ x, const u8* __restrict__ codes,
                                             const u8* __restrict__ scales, u16* __restrict__ out, int form, int recipe,
                                             int b, int lane) {
    u64 i = (u64)b * BLOCK + lane;
    u32 c, s;
    if (form == KMOE_FORM_FLOAT) {
        c = warp_quantize_e4m3(x[i], recipe, &s);
        s = __shfl_sync(0xFFFFFFFFu, s, 0);
    } else {
        c = codes[i];
        s = scales[b];
    }
    out[i] = (u16)mxfp8_bf16(c, e8m0_to_float(s));
}

// Four 32-blocks a warp: warp w of those writing x (numbered from 0 over
// their CTAs) takes blocks 4w .. 4w + 3. A: XBF16Args or RouteXBF16Args.
template <class A>
__device__ __forceinline__ void x_bf16_warp4(const A& a, u32 warp) {
    if (4 * warp >= (u32)a.n_blocks) return;
    x_bf16_blocks4(a.x, a.codes, a.scales, a.out, a.form, a.recipe, (u32)a.n_blocks, 4 * warp, threadIdx.x & 31);
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
        x_bf16_block(a.x, a.codes, a.scales, a.out, a.form, a.recipe, b, threadIdx.x & 31);
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

// d += A (64 x 16, descriptor da) x B (16 x 128, descriptor db), BF16,
// float32 accumulators.
__device__ __forceinline__ void wgmma_bf16_m64n128k16(float (&d)[64], u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_bf16_m64n256k16(float (&d)[128], u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db));
}

template <int BN>
__device__ __forceinline__ void wgmma_bf16(float (&d)[BN / 2], u64 da, u64 db) {
    if constexpr (BN == 128) wgmma_bf16_m64n128k16(d, da, db);
    else wgmma_bf16_m64n256k16(d, da, db);
}

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
    bool chain_fi = a.chain == KMOE_CHAIN_FLASHINFER;
    int rcp = chain_fi ? KMOE_RECIPE_RCEIL : a.recipe;
    int wg = threadIdx.x >> 7, w = (threadIdx.x >> 5) & 3, l = threadIdx.x & 31, t = l & 3;
    int f0 = blockIdx.x * F;
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
                    float act = chain_act<-1, true>(a.kind, p, acc[i + F / 2], acc[i], chain_fi);
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
            u32 sc = block_scale_e4m3(amax, nan != 0, rcp);
            if (!valid) continue;
            float sf = e8m0_to_float(sc);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                u32 pair = 0;
#pragma unroll
                for (int b = 0; b < 2; b++) pair |= mxfp8_bf16(e4m3_code(v[2 * jj + b], sc), sf) << (16 * b);
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

// --------------------------------------------------- the wgmma-fp4 path --
//
// The grouped GEMMs on wgmma with the weights kept as MXFP4 in memory
// (sm_90a only, like the wgmma path): each thread loads its part of the
// A operand (64 weight rows x 16 k a step) straight from global memory,
// 16 bytes per 64-k chunk in the layout of f4_layout.go, widens it to
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
// quad's words of four chunks (two steps) sit side by side (f4_layout.go),
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

// One word of the layout (f4_layout.go) -> the four A registers of a k16
// step: each half's sign to bit 15 and magnitude bits to 8..6 (the value
// E2M1 x 2^-126, code 1 a BF16 subnormal), then times 2^(s-1): mm's low
// half is row r0's multiplier (registers 0 and 2), its high half row r1's
// (1 and 3). Nine integer instructions a word (a mask; a shift or a
// rotation and a mask, twice; two shifts, two masks): no placement does it
// in fewer (f4_layout.go), and the placement before took eleven.
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

// The exhaustive test of f4_widen and f4_mults: out[4i + j] is register j
// of word in[i] widened as block i & 1 of scale word sc[i].
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_f4_widen(const TestF4WidenArgs a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.n) return;
    u32 r[4], b0, b1;
    f4_mults(a.sc[i], &b0, &b1);
    f4_widen(r, a.in[i], (i & 1) ? b1 : b0);
    for (int j = 0; j < 4; j++) a.out[4 * i + j] = r[j];
}

// The timing's L2 flush (Backend.flushL2): every CTA reads its share of
// n 16-byte words (cached in L2, so L2 ends holding clean lines of this
// buffer) and folds them into one word, written only if it is a value the
// host never stores (the buffer holds zeros), so the loads stay live and
// nothing is written.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_l2_flush(const L2FlushArgs a) {
    u32 x = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += gridDim.x * blockDim.x) {
        uint4 v = __ldcg(a.src + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x9E3779B9u) a.sink[blockIdx.x] = x;
}

#if defined(WG_ENABLED)
// 128-k steps of weights a thread has in flight in registers, per tile
// (f4Ahead in abi.go, measured per tile).
template <int NT>
__device__ constexpr int f4_ahead() {
    return NT == 8 ? KMOE_F4_AHEAD_T8 : NT == 16 ? KMOE_F4_AHEAD_T16 : NT == 32 ? KMOE_F4_AHEAD_T32
                                    : NT == 48 ? KMOE_F4_AHEAD_T48 : NT == 64 ? KMOE_F4_AHEAD_T64
                                    : NT == 128 ? KMOE_F4_AHEAD_T128 : KMOE_F4_AHEAD_T256;
}

template <int NT>
__device__ constexpr int f4_stages() {
    return NT == 8 ? KMOE_F4_STAGES_T8 : NT == 16 ? KMOE_F4_STAGES_T16 : NT == 32 ? KMOE_F4_STAGES_T32
                                     : NT == 48 ? KMOE_F4_STAGES_T48 : NT == 64 ? KMOE_F4_STAGES_T64
                                     : NT == 128 ? KMOE_F4_STAGES_T128 : KMOE_F4_STAGES_T256;
}

// A stage holds one step: two 64-k chunks of the tile's tokens, each in
// the wgmma path's 128-byte swizzled form (sw_off; 1024-byte aligned
// through smem_1k).
template <int NT>
struct F4Smem {
    u8 b[f4_stages<NT>()][2][NT * WG_CHUNK_BYTES];
    int src[NT];
};
static_assert(sizeof(F4Smem<8>) + KMOE_SMEM_ALIGN == KMOE_F4_SMEM_T8 && sizeof(F4Smem<128>) + KMOE_SMEM_ALIGN == KMOE_F4_SMEM_T128 &&
                  sizeof(F4Smem<256>) + KMOE_SMEM_ALIGN == KMOE_F4_SMEM_T256,
              "the host's dynamic shared memory sizes (smem_1k's alignment included)");

// d += A (64 x 16 BF16 in registers, the layout's fragment) x B (16 x N,
// descriptor db), float32 accumulators. N: every multiple of 8 up to 64
// (a tile's tokens rounded up to a whole 8: f4_k_loop's NE), 128 and 256.
__device__ __forceinline__ void wgmma_rs_n8(float (&d)[4], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n16(float (&d)[8], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n24(float (&d)[12], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, %16, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n32(float (&d)[16], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n40(float (&d)[20], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n40k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19}, {%20, %21, %22, %23}, %24, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n48(float (&d)[24], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, %27}, %28, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n56(float (&d)[28], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n56k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27}, {%28, %29, %30, %31}, %32, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n256(float (&d)[128], const u32 (&a)[4], u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 db) {
    if constexpr (N == 8) wgmma_rs_n8(d, a, db);
    else if constexpr (N == 16) wgmma_rs_n16(d, a, db);
    else if constexpr (N == 24) wgmma_rs_n24(d, a, db);
    else if constexpr (N == 32) wgmma_rs_n32(d, a, db);
    else if constexpr (N == 40) wgmma_rs_n40(d, a, db);
    else if constexpr (N == 48) wgmma_rs_n48(d, a, db);
    else if constexpr (N == 56) wgmma_rs_n56(d, a, db);
    else if constexpr (N == 64) wgmma_rs_n64(d, a, db);
    else if constexpr (N == 128) wgmma_rs_n128(d, a, db);
    else {
        static_assert(N == 256, "an instance above");
        wgmma_rs_n256(d, a, db);
    }
}

// The token pieces (16 bytes of a row's 128-k step) this thread stages,
// found once: piece p = threadIdx.x + 256 i of the NT x 16 of a step.
// COMPACT (the 256-token tile, 16 pieces a thread): the pieces' addresses
// held in 48 registers would leave the 128 accumulators too few, so only
// piece 0's are kept and the others follow: piece i is row r0 + 16 i at
// the same byte of it (threadIdx.x fixes half and piece), and sw_off of
// row r + 16 i is sw_off of r plus 2048 i (r mod 8 unchanged); each
// stage reads the rows' sources from shared memory.
template <int NT>
struct F4Pieces {
    static constexpr int P = (NT * 16 + KMOE_THREADS - 1) / KMOE_THREADS;
    static constexpr bool COMPACT = NT == 256;
    static constexpr int Q = COMPACT ? 1 : P;
    const u8* src[Q]; // the piece in step 0 (a zero row's: the first row, not read); COMPACT: the tile's row 0's byte
    u32 dst[Q];       // its shared-memory address in stage 0
    bool valid[Q];    // a real token (else zeros are written)
    const int* row;   // COMPACT: the source row of piece 0 (F4Smem::src + r0), rows 16 apart
    int ld;           // COMPACT: bytes a source row
};

template <int NT>
__device__ __forceinline__ void f4_pieces(F4Pieces<NT>& pc, F4Smem<NT>& s, const u8* rows, int ld) {
    if constexpr (F4Pieces<NT>::COMPACT) {
        static_assert(NT * 16 == KMOE_THREADS * F4Pieces<NT>::P && KMOE_THREADS / 16 == 16, "piece i: row r0 + 16 i");
        int r0 = threadIdx.x >> 4, half = (threadIdx.x >> 3) & 1, piece = threadIdx.x & 7;
        pc.src[0] = rows + half * WG_CHUNK_BYTES + piece * 16;
        pc.dst[0] = smem_addr(&s.b[0][half][sw_off(r0, piece * 16)]);
        pc.row = &s.src[r0];
        pc.ld = ld;
        return;
    }
#pragma unroll
    for (int i = 0; i < F4Pieces<NT>::P; i++) {
        int p = threadIdx.x + KMOE_THREADS * i;
        int r = (p >> 4) % NT, half = (p >> 3) & 1, piece = p & 7, row = s.src[r];
        pc.src[i] = rows + (u64)(row < 0 ? 0 : row) * ld + half * WG_CHUNK_BYTES + piece * 16;
        pc.dst[i] = smem_addr(&s.b[0][half][sw_off(r, piece * 16)]);
        pc.valid[i] = row >= 0 && p < NT * 16;
    }
}

// Stage step c (k [128c, 128c + 128)) of the first NE token rows into
// stage st (the MMAs read no others).
template <int NT, int NE>
__device__ __forceinline__ void f4_stage(const F4Pieces<NT>& pc, int st, int c) {
    constexpr u32 stage = 2 * NT * WG_CHUNK_BYTES;
    if constexpr (F4Pieces<NT>::COMPACT) {
        static_assert(NE == NT, "no fitted instance");
#pragma unroll
        for (int i = 0; i < F4Pieces<NT>::P; i++) {
            int row = pc.row[16 * i];
            const u8* src = pc.src[0] + (u64)(row < 0 ? 0 : row) * pc.ld + c * 2 * WG_CHUNK_BYTES;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(pc.dst[0] + st * stage + 2048 * i), "l"(src),
                         "r"(row >= 0 ? 16 : 0));
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < F4Pieces<NT>::P; i++) {
        if (threadIdx.x + KMOE_THREADS * i < NE * 16)
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
// layout of f4_layout.go: payload w, scales ws, kdim / 64 chunks a group),
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

// The k loop: acc (this thread's NT/2 accumulators of its warpgroup's 64
// rows x NT tokens) += weights (wt, begun) x tokens over kdim k (a
// multiple of 128), in steps of 128 k (two layout chunks), on the tile's
// first NE tokens (the MMA's N; the other accumulators keep their zeros).
// PIPE: A double-buffered (f4_chunk); then, at a step's barrier, a
// warpgroup may still have the previous step's second chunk in flight,
// and the stage refilled there is two steps back, retired either way.
template <int NT, int NE, int AH, bool PIPE = false>
__device__ __forceinline__ void f4_k_loop(float (&acc)[NT / 2], F4Smem<NT>& s, const u8* rows, int kdim,
                                          F4Weights<AH>& wt, InputWait in) {
    int nstep = wt.nstep;
    F4Pieces<NT> pc;
    f4_pieces<NT>(pc, s, rows, 2 * kdim);
    in.wait(); // GEMM2: the weights above are loaded before GEMM1 ends, the tokens below after
    constexpr int S = f4_stages<NT>();
    static_assert(S >= 3, "a stage refilled two steps behind");
#pragma unroll
    for (int st = 0; st < S - 2; st++) {
        if (st < nstep) f4_stage<NT, NE>(pc, st, st);
        cp_async_commit();
    }
    u32 a[2][4][4];
    const u64 d0 = sw_desc(s.b[0][0]);
    for (int c0 = 0; c0 < nstep; c0 += AH) {
#pragma unroll
        for (int u = 0; u < AH; u++) {
            int c = c0 + u;
            if (c >= nstep) break;
            cp_async_wait<S - 3>(); // step c's tokens have landed (this thread's copies)
            fence_proxy_async();    // ... and are visible to the tensor cores
            __syncthreads();        // every thread's; and every warpgroup's wgmmas on step c - 1 are done
            int nx = c + S - 2;     // into step c - 2's stage
            if (nx < nstep) f4_stage<NT, NE>(pc, nx % S, nx);
            cp_async_commit();
            // The descriptors, from stage 0's (the start address field
            // counts 16-byte units; no carry out of it within shared memory).
            u64 db = d0 + (u64)((c % S) * (int)sizeof(s.b[0]) >> 4);
            // Each chunk's weights are reloaded (step c + AH's) once
            // widened: loaded into registers still in use, they were loaded
            // into others and moved back at once, a move that waited the
            // whole load (ncu: a quarter of the stall samples at M=1 and 8).
#pragma unroll
            for (int h = 0; h < 2; h++) {
                f4_chunk<NT, NE, PIPE>(acc, a[PIPE ? h : 0], wt.raw[u][h], wt.sc.word(u, h), db + h * (sizeof(s.b[0][0]) >> 4));
                wt.reload(u, h, c);
            }
        }
    }
    if constexpr (PIPE) wg_wait<0>(); // the last chunk's group
#pragma unroll
    for (int i = 0; i < NT / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
    cp_async_wait<0>();
}

// The k loop at N = the tile's tokens rounded up to a whole 8 (ng groups
// of 8; the _fit instances, f4FitTiles in abi.go): the tensor cores' time
// is proportional to N, and a 32-token tile at M=48 holds ~14 tokens, a
// 64-token tile at M=128 ~37. Its own instances, because the kernel with
// one loop per N ran full tiles slower than the kernel with one loop, so
// large M keep the plain ones.
template <int NT, int NE, int AH>
__device__ __forceinline__ void f4_k_loop_fit(float (&acc)[NT / 2], F4Smem<NT>& s, const u8* rows, int kdim,
                                              F4Weights<AH>& wt, InputWait in, int ng) {
    if constexpr (NE > 8) {
        if (ng < NE / 8) {
            f4_k_loop_fit<NT, NE - 8, AH>(acc, s, rows, kdim, wt, in, ng);
            return;
        }
    }
    f4_k_loop<NT, NE, AH, NT == KMOE_F4_FIT_PIPE>(acc, s, rows, kdim, wt, in);
}
#endif

// The small tiles' loop without a barrier a step (8 and 16 tokens: f4sTiles
// in abi.go). The same weights, loaded and widened the same way, but each
// warp multiplies its own 16 rows with mma.sync m16n8k16, whose A fragment
// is the wgmma's per-warp slice (the layout needs no change) and whose
// accumulators, NT/8 of them side by side, are the wgmma's NT/2 in the same
// order (so the epilogues are shared), reading the tokens with ldmatrix.
// The tokens are staged a window of f4s_win k at a time, two windows
// double-buffered, so the CTA meets at a barrier once a window (8 or 4
// steps of 128 k) instead of once a step, and no warp waits at a wgmma for
// the other three of its warpgroup. Why: the step's barrier
// and the wgmma waits were a third of the stall samples at M = 1 and 8.
// Each accumulator still sums its k16 steps in k order, in float32.
#if defined(WG_ENABLED)
// The token window, k a window, per tile (f4sWinK in abi.go).
template <int NT>
__device__ constexpr int f4s_win() { return NT == 8 ? KMOE_F4S_WIN_K_T8 : KMOE_F4S_WIN_K_T16; }
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
static_assert(sizeof(F4SyncSmem<8>) == KMOE_F4S_SMEM_T8 && sizeof(F4SyncSmem<16>) == KMOE_F4S_SMEM_T16,
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
// GiB, f4sAddressable in gpu.go), bit i of valid set for a real token.
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
// both GEMMs.
template <int NT, int SYNC, bool FIT, typename Smem>
__device__ __forceinline__ void f4_tile_mma(float (&acc)[NT / 2], Smem& s, const u8* rows, int kdim, const u8* w,
                                            const u8* ws, u64 group, InputWait in, int ntok) {
    F4Weights<f4_tile_ahead<NT, SYNC, FIT>()> wt;
    wt.begin(w, ws, group, kdim);
#pragma unroll
    for (int i = 0; i < NT / 2; i++) acc[i] = 0.0f;
    if constexpr (SYNC != 0) f4s_k_loop<NT, SYNC>(acc, s, rows, kdim, wt, in, ntok);
    else if constexpr (FIT) f4_k_loop_fit<NT, NT>(acc, s, rows, kdim, wt, in, (ntok + 7) / 8);
    else f4_k_loop<NT, NT, f4_tile_ahead<NT, SYNC, FIT>(), f4_pipe<NT>()>(acc, s, rows, kdim, wt, in);
}
#endif

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
    extern __shared__ __align__(128) u8 f4_smem_raw[];
    typedef typename F4SmemOf<NT, SYNC != 0>::T Smem;
    Smem& s = *(Smem*)(SYNC == 0 ? smem_1k(f4_smem_raw) : f4_smem_raw); // the wgmma loop's swizzled stages
    __shared__ u32 s_amax[8][NT];
    pdl_wait(); // the routing and x (the prologue)
    pdl_trigger();
    Tile tl;
    if (!block_tile<NT>(a.offset, a.tile_base, a.e_local, a.perm, a.top_k, s.src, &tl)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float acc[NT / 2];
    u64 group = (u64)tl.expert * (a.n / 32) + blockIdx.x * 2 + (threadIdx.x >> 7); // this warpgroup's 64 rows
    f4_tile_mma<NT, SYNC, FIT>(acc, s, a.xbf, a.k, a.w, a.ws, group, InputWait{nullptr, 0, 0}, tl.count); // waited above
    if (a.ug != nullptr) { // the activation and requantization in kmoe_act_requant
        store_up_gate<NT / 8>(reinterpret_cast<float(&)[NT / 8][4]>(acc), tl.count, lane & 3, a.ug, tl.row0, a.n,
                              blockIdx.x * 64 + warp * 8 + (lane >> 2));
        if (a.ready != nullptr) tile_signal(a.ready + blockIdx.y); // kmoe_act_requant by tile waits for it
        return;
    }
    const float* p = a.params + (a.n_params == 1 ? 0 : tl.expert) * KMOE_PARAM_STRIDE;
    act_requant_store<NT / 8>(reinterpret_cast<float(&)[NT / 8][4]>(acc), (tl.count + 7) / 8, tl.count, s_amax, warp,
                              (warp >> 2) * 4, p, a.kind, a.chain, a.recipe, lane >> 2, lane & 3, nullptr, nullptr,
                              nullptr, tl.row0, a.n, blockIdx.x * 64 + warp * 8, false, a.aqbf);
    if (a.ready != nullptr) tile_signal(a.ready + blockIdx.y);
#endif
}

// GEMM2: y[row, f] for the tile's tokens and output features [128x,
// 128x + 128), warpgroup h the 64 of [128x + 64h, +64). grid.x = K / 128.
// SYNC: 0 for the wgmma loop, else the mma.sync loop with SYNC steps ahead;
// FIT: the wgmma loop at the tile's N (f4_k_loop_fit).
template <int NT, int SYNC, bool FIT = false>
__device__ __forceinline__ void f4_gemm2(const F4Gemm2Args& a) {
#if defined(WG_ENABLED)
    extern __shared__ __align__(128) u8 f4_smem_raw[];
    typedef typename F4SmemOf<NT, SYNC != 0>::T Smem;
    Smem& s = *(Smem*)(SYNC == 0 ? smem_1k(f4_smem_raw) : f4_smem_raw); // the wgmma loop's swizzled stages
    // Launched while GEMM1 runs (launchPDL), after every GEMM1 CTA has
    // passed its pdl_wait: the routing is complete, GEMM1's intermediate
    // is waited for in the k loop, after the first weights are loaded.
    pdl_trigger();
    Tile tl;
    if (!block_tile<NT>(a.offset, a.tile_base, a.e_local, nullptr, 0, s.src, &tl)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float acc[NT / 2];
    u64 group = (u64)tl.expert * (a.k / 64) + blockIdx.x * 2 + (threadIdx.x >> 7); // this warpgroup's 64 rows
    f4_tile_mma<NT, SYNC, FIT>(acc, s, a.aqbf, a.n, a.w, a.ws, group,
                          InputWait{a.ready, (int)blockIdx.y, a.ready_target}, tl.count);
    int f = blockIdx.x * 128 + warp * 16 + (lane >> 2);
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
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, KMOE_F4S_BLOCKS_T8) kmoe_f4s_gemm1_act_t8(const F4Gemm1Args a) { f4_gemm1_act<8, KMOE_F4S_AHEAD_T8>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, KMOE_F4S_BLOCKS_T16) kmoe_f4s_gemm1_act_t16(const F4Gemm1Args a) { f4_gemm1_act<16, KMOE_F4S_AHEAD_T16>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, KMOE_F4S_BLOCKS_T8) kmoe_f4s_gemm2_t8(const F4Gemm2Args a) { f4_gemm2<8, KMOE_F4S_AHEAD_T8>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, KMOE_F4S_BLOCKS_T16) kmoe_f4s_gemm2_t16(const F4Gemm2Args a) { f4_gemm2<16, KMOE_F4S_AHEAD_T16>(a); }
extern "C" __global__ void __launch_bounds__(KMOE_THREADS, KMOE_F4S_DEEP2_BLOCKS) kmoe_f4s_gemm2_t8_deep(const F4Gemm2Args a) { f4_gemm2<8, KMOE_F4S_DEEP2_AHEAD>(a); }

// The GEMM1 epilogue as a kernel of its own (the wgmma-fp4 path where
// f4ActKernel in gpu.go takes it): GEMM1 stores each routed row's up and
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
// Parameters of expert e, or (e < 0) of the row's expert where they
// differ by expert.
template <int KIND>
__device__ __forceinline__ void act_requant_blocks4(const ActRequantArgs& a, u32 b0, u32 total, int e_row) {
    const u32 nb = (u32)a.n / 32;
    const int lane = threadIdx.x & 31, j = lane & 7;
    const bool chain_fi = a.chain == KMOE_CHAIN_FLASHINFER;
    const int rcp = chain_fi ? KMOE_RECIPE_RCEIL : a.recipe;
    const float4* ug = (const float4*)a.ug; // block b's feature 4j + i: {up, gate} at float2 32 b + 4j + i
    const u32 b = b0 + (lane >> 3);
    const bool live = b < total; // a dead lane's zeros stay in its own block's shuffles
    float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
    int e = e_row < 0 ? 0 : e_row;
    if (live) {
        v0 = ug[(u64)b * 16 + 2 * j];
        v1 = ug[(u64)b * 16 + 2 * j + 1];
        if (e_row < 0 && a.n_params != 1) e = expert_of(a.offset, a.e_local, (int)(b / nb)); // the row's parameters
    }
    const float* p = a.params + e * KMOE_PARAM_STRIDE;
    const float act[4] = {chain_act<KIND>(a.kind, p, v0.y, v0.x, chain_fi), chain_act<KIND>(a.kind, p, v0.w, v0.z, chain_fi),
                          chain_act<KIND>(a.kind, p, v1.y, v1.x, chain_fi), chain_act<KIND>(a.kind, p, v1.w, v1.z, chain_fi)};
    const uint2 h = mxfp8_bf16_lanes8(act, rcp, lane);
    if (live) *(uint2*)&a.aqbf[((u64)b * 32 + 4 * j) * 2] = h;
}

// Over the grid: warp w's blocks 4 (w + i nwarps) of the routed rows.
// rows: offset[e_local] of the routing.
template <int KIND>
__device__ __forceinline__ void act_requant_rows(const ActRequantArgs& a, int rows) {
    const u32 total = (u32)rows * ((u32)a.n / 32), nwarps = gridDim.x * (blockDim.x >> 5);
    for (u32 b0 = 4 * (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)); b0 < total; b0 += 4 * nwarps)
        act_requant_blocks4<KIND>(a, b0, total, -1);
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
        const int e = a.n_params == 1 ? 0 : tl.expert;
        for (u32 b0 = row * nb + 4 * (threadIdx.x >> 5); b0 < end; b0 += 4 * (blockDim.x >> 5))
            act_requant_blocks4<KIND>(a, b0, end, e);
    }
    tile_signal(a.done + blockIdx.y);
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_act_requant(const ActRequantArgs a) {
    if (a.done != nullptr) { // by tile: GEMM1's tiles waited for one at a time
        pdl_trigger(); // GEMM2's CTAs wait for their tiles' counts
        if (a.kind == KMOE_ACT_SITU) act_requant_tile<KMOE_ACT_SITU>(a);
        else act_requant_tile<-1>(a);
        return;
    }
    pdl_wait();    // GEMM1's up and gate
    pdl_trigger(); // GEMM2's CTAs may take SMs as this kernel's leave them; they wait for all of it
    int rows = a.offset[a.e_local];
    if (a.kind == KMOE_ACT_SITU) act_requant_rows<KMOE_ACT_SITU>(a, rows); // Kimi-K3's, as in GEMM1
    else act_requant_rows<-1>(a, rows);
}

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
        const u8* bcode[NS];
        const float* bsc0[NS];
        const float* bsc1[NS];
#pragma unroll
        for (int s = 0; s < NS; s++) {
            int tg = s_tok[s * 8 + g], t0 = s_tok[s * 8 + 2 * t], t1 = s_tok[s * 8 + 2 * t + 1];
            bcode[s] = a.xq + (u64)(tg >= 0 ? tg : a.zero_row) * a.k_pad;
            bsc0[s] = a.xsf + (u64)(t0 >= 0 ? t0 : a.zero_row) * (a.k_pad / 32);
            bsc1[s] = a.xsf + (u64)(t1 >= 0 ? t1 : a.zero_row) * (a.k_pad / 32);
        }
        float acc[NS][4];
        for (int s = 0; s < NS; s++) for (int i = 0; i < 4; i++) acc[s][i] = 0.0f;
        dec_stream<NS>(acc, w, ws, nchunk, bcode, bsc0, bsc1, nsub, lane, t);
        act_requant_store<NS>(acc, nsub, cnt, s_amax, warp, 0, p, a.kind, a.chain, a.recipe, g, t, a.aq, a.aqs, a.aqsf,
                             row0 + base, a.n_pad, fw, true, nullptr);
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
        int nsub = (cnt + 7) / 8;
        const u8* bcode[NS];
        const float* bsc0[NS];
        const float* bsc1[NS];
#pragma unroll
        for (int s = 0; s < NS; s++) {
            int cg = s * 8 + g, c0 = s * 8 + 2 * t, c1 = c0 + 1;
            bcode[s] = a.aq + (u64)(cg < cnt ? row0 + base + cg : a.zero_row) * a.n_pad;
            bsc0[s] = a.aqsf + (u64)(c0 < cnt ? row0 + base + c0 : a.zero_row) * (a.n_pad / 32);
            bsc1[s] = a.aqsf + (u64)(c1 < cnt ? row0 + base + c1 : a.zero_row) * (a.n_pad / 32);
        }
        float acc[NS][4];
        for (int s = 0; s < NS; s++) for (int i = 0; i < 4; i++) acc[s][i] = 0.0f;
        dec_stream<NS>(acc, w, ws, nchunk, bcode, bsc0, bsc1, nsub, lane, t);
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

// ------------------------------------------------------------ finalize --

// out[t, :] = sum over slots k in order of w[t,k] * y[pos[t,k], :] (local
// slots only). grid = (M, K / KMOE_FINALIZE_COLS rounded up), block
// KMOE_THREADS, four columns a thread (K is a multiple of 32, so y's and
// out's rows are 16-byte aligned). No atomics. A group of FIN_SLOTS slots
// has its positions, weights and y loads issued before any is summed, so a
// token's rows are read in one round trip, not one after another (the
// forward's last link at small M); the sum stays in slot order, each term
// rounded as w * y then added, as before. On the flashinfer chain each y
// is first rounded to bf16 and every product and sum rounded to float32
// (the oracle's finalizeFlashInfer).
#define FIN_SLOTS 8
static_assert(KMOE_FINALIZE_COLS == 4 * KMOE_THREADS, "four columns a thread");
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_finalize(const FinalizeArgs a) {
    pdl_wait(); // y (GEMM2)
    const int tok = blockIdx.x, topk = a.top_k, K = a.k;
    const int f = 4 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (f >= K) return;
    const int* __restrict__ pos = a.pos + (u64)tok * topk;
    const float* __restrict__ wts = a.wts + (u64)tok * topk;
    const float* __restrict__ y = a.y;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k0 = 0; k0 < topk; k0 += FIN_SLOTS) {
        int p[FIN_SLOTS];
        float w[FIN_SLOTS];
        float4 v[FIN_SLOTS];
#pragma unroll
        for (int j = 0; j < FIN_SLOTS; j++) p[j] = k0 + j < topk ? pos[k0 + j] : -1;
#pragma unroll
        for (int j = 0; j < FIN_SLOTS; j++) {
            w[j] = p[j] >= 0 ? wts[k0 + j] : 0.0f;
            v[j] = p[j] >= 0 ? *(const float4*)&y[(u64)p[j] * K + f] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if (a.chain_fi) { // y rounded to bf16 as FlashInfer's GEMM2 stores it; no fused multiply-add
#pragma unroll
            for (int j = 0; j < FIN_SLOTS; j++)
                if (p[j] >= 0) {
                    acc.x = __fadd_rn(acc.x, __fmul_rn(w[j], round_bf16(v[j].x)));
                    acc.y = __fadd_rn(acc.y, __fmul_rn(w[j], round_bf16(v[j].y)));
                    acc.z = __fadd_rn(acc.z, __fmul_rn(w[j], round_bf16(v[j].z)));
                    acc.w = __fadd_rn(acc.w, __fmul_rn(w[j], round_bf16(v[j].w)));
                }
            continue;
        }
#pragma unroll
        for (int j = 0; j < FIN_SLOTS; j++)
            if (p[j] >= 0) {
                acc.x += w[j] * v[j].x;
                acc.y += w[j] * v[j].y;
                acc.z += w[j] * v[j].z;
                acc.w += w[j] * v[j].w;
            }
    }
    *(float4*)&a.out[(u64)tok * K + f] = acc;
}

// ------------------------------------ expert parallelism across devices --

// Row i of dst = row idx[i] of src, rows of width bytes: the rows a device
// sends to another. grid = rows.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_gather_rows(const GatherRowsArgs a) {
    const u8* __restrict__ src = a.src + (u64)a.idx[blockIdx.x] * a.width;
    u8* __restrict__ dst = a.dst + (u64)blockIdx.x * a.width;
    if ((a.width & 15) == 0 && ((((u64)src) | ((u64)dst)) & 15) == 0) {
        for (int i = threadIdx.x; i < a.width / 16; i += blockDim.x) ((uint4*)dst)[i] = ((const uint4*)src)[i];
    } else {
        for (int i = threadIdx.x; i < a.width; i += blockDim.x) dst[i] = src[i];
    }
}

// Row idx[i] of dst += row i of src (float32, width values): one device's
// partial outputs added into their home rows. The rows of one launch are
// distinct, so there are no atomics; the host launches one per device in
// device order, which fixes the order of the sums. grid = (rows,
// ceil(width / 256)).
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_add_rows(const AddRowsArgs a) {
    int f = blockIdx.y * blockDim.x + threadIdx.x;
    if (f >= a.width) return;
    float* d = a.dst + (u64)a.idx[blockIdx.x] * a.width + f;
    *d = *d + a.src[(u64)blockIdx.x * a.width + f];
}
