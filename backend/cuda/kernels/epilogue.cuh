// ----------------------------------------------------- GEMM1 epilogue --

// What every path's GEMM1 epilogue shares: the activation on a chain with
// the FC1 bias, and the intermediate's MXFP8 (or BF16) requantization and
// store, used by the grouped, wgmma and wgmma-fp4 GEMMs and by
// kmoe_act_requant.

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
