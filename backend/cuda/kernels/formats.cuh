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
// float): exact from BF16's smallest step, 2^-133, to below 2^128; an
// infinity above, truncated below (layout.XOutsideBF16 in Go keeps such x off
// the BF16 paths).
__device__ __forceinline__ u32 mxfp8_bf16(u32 code, float sf) { return bf16_bits(__fmul_rn(e4m3_to_float(code), sf)); }

// mxfp8_bf16 of four codes of one block (scale sf as a float), element
// 2i in the low half of word i.
__device__ __forceinline__ uint2 mxfp8_bf16x4(u32 c0, u32 c1, u32 c2, u32 c3, float sf) {
    return make_uint2(mxfp8_bf16(c0, sf) | mxfp8_bf16(c1, sf) << 16, mxfp8_bf16(c2, sf) | mxfp8_bf16(c3, sf) << 16);
}

// The BF16 bits of v0's and v1's MXFP8 values in a block of scale sc
// (v0 in the low half): the bits of mxfp8_bf16(e4m3_code(v, sc),
// e8m0_to_float(sc)) with no code kept (every float v at every scale:
// TestMXFP8ValueExhaustive), in a quarter of the instructions. v / 2^X
// (rounded to float32, as e4m3_code does) is clamped at 448 from above,
// which takes a NaN (whose code is +448) and +inf there; the hardware
// conversion (sm_89 and up) then rounds onto E4M3's grid to nearest even
// and saturates at -448; back through FP16 (which holds every E4M3 value)
// to float32, multiplied by 2^X, and truncated to BF16, as bf16_bits does
// (exact from BF16's smallest step, 2^-133, up). mxfp8_value_bf16x2_of
// takes the scale as its inverse inv (e8m0_inverse) and its value sf
// (e8m0_to_float), so a lane's elements of one block find them once.
__device__ __forceinline__ u32 mxfp8_value_bf16x2_of(float v0, float v1, float inv, float sf) {
    const float s0 = fminf(__fmul_rn(v0, inv), 448.0f), s1 = fminf(__fmul_rn(v1, inv), 448.0f);
    unsigned short c;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(c) : "f"(s1), "f"(s0)); // the first operand: the high byte
    u32 h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(c));
    float f0, f1;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f0) : "h"((unsigned short)h));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f1) : "h"((unsigned short)(h >> 16)));
    return __byte_perm(__float_as_uint(__fmul_rn(f0, sf)), __float_as_uint(__fmul_rn(f1, sf)), 0x7632);
}
__device__ __forceinline__ u32 mxfp8_value_bf16x2(float v0, float v1, u32 sc) {
    if (sc == 0xFFu) return 0x7FC07FC0u; // a floor block with a non-finite element: NaN codes
    return mxfp8_value_bf16x2_of(v0, v1, e8m0_inverse(sc), e8m0_to_float(sc));
}
__device__ __forceinline__ u32 mxfp8_value_bf16(float v, u32 sc) { return mxfp8_value_bf16x2(v, v, sc) & 0xFFFFu; }

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
    // fmaxf returns the other operand for a NaN, so amax is the largest
    // |v| that is not NaN (0 if none), as bits: the order of non-negative
    // floats is their bits' order.
    float m = 0.0f;
    bool nan = false;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m = fmaxf(m, fabsf(v[i]));
        nan |= v[i] != v[i];
    }
    u32 amax = __float_as_uint(m);
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


// The token operand (x codes, and the intermediate between the GEMMs) is
// stored permuted within each 128-element chunk so that lane t of a quad finds its
// B bytes for the chunk's 4 blocks contiguous: in-chunk element q*32 + 8t +
// j (block q, the MMA's permuted k) is stored at t*32 + q*8 + j. Its float
// scales are [row][k/32], 4 per chunk contiguous. Rows past the last token
// point at a zero row (codes 0, scales 0), so no lane needs a branch.
__device__ __forceinline__ int dec_bpos(int i) { return (i & ~127) + ((i >> 3) & 3) * 32 + ((i >> 5) & 3) * 8 + (i & 7); }
