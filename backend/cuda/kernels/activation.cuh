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
// Kimi-K3's SiTU divides the gate by its beta, 4. DivBy is that choice
// for one b, made once where many x share it.
struct DivBy {
    float b, r; // the divisor; its reciprocal where pw
    bool pw;
};
__device__ __forceinline__ DivBy div_by(float b) {
    u32 bb = __float_as_uint(b), e = (bb >> 23) & 0xFFu;
    bool pw = (bb & 0x7FFFFFu) == 0u && e - 1u < 253u;
    return DivBy{b, __uint_as_float((bb & 0x80000000u) | ((254u - e) << 23)), pw};
}
__device__ __forceinline__ float div_with(float x, const DivBy& d) { return d.pw ? __fmul_rn(x, d.r) : __fdiv_rn(x, d.b); }
__device__ __forceinline__ float div_param(float x, float b) { return div_with(x, div_by(b)); }

// SiTU's two parameters with their divisions chosen (div_by), for a
// loop over one expert's elements (kmoe_act_requant).
struct SituK {
    DivBy b, lb;
};
__device__ __forceinline__ SituK situ_k(const float* p) {
    return SituK{div_by(p[KMOE_PARAM_SITU_BETA]), div_by(p[KMOE_PARAM_SITU_LINEAR_BETA])};
}
__device__ __forceinline__ float situ(const SituK& k, float g, float u) {
    return k.b.b * tanhf(div_with(g, k.b)) * sigmoidf_(g) * (k.lb.b * tanhf(div_with(u, k.lb)));
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
    case KMOE_ACT_SITU: return situ(situ_k(p), g, u);
    }
    return __uint_as_float(0x7FC00000u);
}
