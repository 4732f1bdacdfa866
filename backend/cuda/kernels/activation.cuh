// ------------------------------------------------------- activations --

// Kind codes (KMOE_ACT_*) are activation.Kind's own values and p holds
// one expert's KMOE_PARAM_STRIDE parameters, both from the ABI header. Same
// operation order as activation.Eval32.
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// fminf/fmaxf return the other operand for a NaN; the oracle (Go's
// math.Min/Max, like torch.clamp) propagates NaN, so these do too. The
// limits are never NaN.
__device__ __forceinline__ float pmin(float a, float b) { return a != a ? a : fminf(a, b); }
__device__ __forceinline__ float pmax(float a, float b) { return a != a ? a : fmaxf(a, b); }

// MUFU's approximations: 2^x and 1/x, float32, subnormal results
// flushed to zero (rcp is only taken of values in [1, 8] here).
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// One SiTU beta b's tanh, b tanh(x / b), from the derived parameters the
// host computes in float64 and rounds once (situTanh in situ.go): q, the
// odd polynomial's coefficients c_i / b^(2i+2) of x + x s Q(s), s = x^2,
// for |x| <= edge = 0.6 b (the fit's reach), and ex = -2 log2(e) / b,
// with which exp(-2|x| / b) = 2^(|x| ex) gives the rest.
struct SituTanh {
    float q0, q1, q2, q3, q4, edge, ex, b;
};
__device__ __forceinline__ SituTanh situ_tanh(const float* p, int q0, int edge, int ex, int b) {
    return SituTanh{p[q0], p[q0 + 1], p[q0 + 2], p[q0 + 3], p[q0 + 4], p[edge], p[ex], p[b]};
}
// b tanh(x / b) for |x| <= edge (elsewhere meaningless).
__device__ __forceinline__ float situ_poly(const SituTanh& t, float x) {
    const float s = __fmul_rn(x, x);
    float r = __fmaf_rn(t.q4, s, t.q3);
    r = __fmaf_rn(r, s, t.q2);
    r = __fmaf_rn(r, s, t.q1);
    r = __fmaf_rn(r, s, t.q0);
    return __fmaf_rn(__fmul_rn(x, s), r, x);
}

// SiTU's two betas' tanh (the gate's beta, the up's linear_beta), read
// once where many elements share them.
struct SituK {
    SituTanh g, u;
};
__device__ __forceinline__ SituK situ_k(const float* p) {
    return SituK{situ_tanh(p, KMOE_PARAM_SITU_B_Q0, KMOE_PARAM_SITU_B_EDGE, KMOE_PARAM_SITU_B_EX, KMOE_PARAM_SITU_BETA),
                 situ_tanh(p, KMOE_PARAM_SITU_LB_Q0, KMOE_PARAM_SITU_LB_EDGE, KMOE_PARAM_SITU_LB_EX,
                           KMOE_PARAM_SITU_LINEAR_BETA)};
}

// SiTU, b tanh(g/b) sigmoid(g) lb tanh(u/lb), as one quotient with one
// reciprocal. With eb = exp(-2|g|/b), e = exp(-|g|), el = exp(-2|u|/lb):
// b tanh(g/b) is the polynomial near 0 and sign(g) b (1 - eb) / (1 + eb)
// past the edge; sigmoid(g) = w / (1 + e) with w = 1 for g >= 0 and e
// below; lb tanh(u/lb) likewise. So SiTU = na nb / d, d = (1 + e) times
// 1 + eb and 1 + el where those branches are taken, d in [1, 8]: MUFU's
// reciprocal refined by a Newton step, the quotient by its residual.
// eb's error grows with |g| (its exponent is a plain product) but reaches
// tanh only past the edge, where eb <= exp(-1.2), damped by
// 2 eb / (1 - eb^2); e, which sigmoid takes undamped for g < 0, is
// expf's (its argument reduced before MUFU's 2^x). Each factor takes its
// input's sign after the branch, and the result the quotient q's, so
// zeros keep theirs. NaN in either input gives NaN; g = -inf gives -0
// (the oracle's -b x 0). It replaced a float32 chain of two tanhf, expf
// and two IEEE divisions, which took more instructions (docs/PERF.md);
// TestSitu holds both against float64.
__device__ __forceinline__ float situ(const SituK& k, float g, float u) {
    const float ag = fabsf(g), au = fabsf(u);
    const float eb = ex2_approx(__fmul_rn(ag, k.g.ex)), e = expf(-ag), el = ex2_approx(__fmul_rn(au, k.u.ex));
    const bool ng = ag <= k.g.edge, nu = au <= k.u.edge;
    float na = copysignf(ng ? situ_poly(k.g, g) : __fmaf_rn(-k.g.b, eb, k.g.b), g);
    na = __fmul_rn(na, g < 0.0f ? e : 1.0f);
    const float nb = copysignf(nu ? situ_poly(k.u, u) : __fmaf_rn(-k.u.b, el, k.u.b), u);
    const float d = __fmul_rn(__fmul_rn(ng ? 1.0f : __fadd_rn(1.0f, eb), __fadd_rn(1.0f, e)), nu ? 1.0f : __fadd_rn(1.0f, el));
    float r = rcp_approx(d);
    r = __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);
    const float n = __fmul_rn(na, nb), q = __fmul_rn(n, r);
    return copysignf(__fmaf_rn(__fmaf_rn(-d, q, n), r, q), q); // a zero residual would take -0's sign
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
