// Test kernels: each runs one device function over inputs the host
// gives, for the exhaustive tests (gpu_test.go, f4_gpu_test.go). Built
// into the test module only.

// widen4 for every 16-bit input, for the exhaustive test.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_widen4(const TestWiden4Args a) {
    u32 v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < 65536u) a.out[v] = widen4(v);
}

// The test of situ: out[i] = SiTU(g[i], u[i]) with the parameters p
// (one expert's, packed), as bits; legacy: the float32 chain situ
// replaced (tanhf, expf, IEEE divisions), for TestSitu's comparison.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_situ(const TestSituArgs a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.n) return;
    const float g = __uint_as_float(a.g[i]), u = __uint_as_float(a.u[i]);
    float v;
    if (a.legacy) {
        const float b = a.p[KMOE_PARAM_SITU_BETA], lb = a.p[KMOE_PARAM_SITU_LINEAR_BETA];
        v = b * tanhf(__fdiv_rn(g, b)) * (1.0f / (1.0f + expf(-g))) * (lb * tanhf(__fdiv_rn(u, lb)));
    } else {
        v = situ(situ_k(a.p), g, u);
    }
    a.out[i] = __float_as_uint(v);
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

// The exhaustive test of mxfp8_value_bf16x2: every float bit pattern v at
// each scale of [sc0, sc1), in the low half beside ~v in the high half
// (so each half sees every pattern), against the code and back
// (mxfp8_bf16 of e4m3_code); count gets the mismatches, first the least
// sc << 32 | v of them (left as it was where none).
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_mxfp8_value(const TestMxfp8ValueArgs a) {
    u32 n = 0;
    u64 first = ~0ull;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u32 sc = (u32)a.sc0; sc < (u32)a.sc1; sc++) {
        const float sf = e8m0_to_float(sc);
        for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < (1ull << 32); v += stride) {
            const float f = __uint_as_float((u32)v), g = __uint_as_float(~(u32)v);
            if ((mxfp8_bf16(e4m3_code(f, sc), sf) | mxfp8_bf16(e4m3_code(g, sc), sf) << 16) != mxfp8_value_bf16x2(f, g, sc)) {
                n++;
                first = first < ((u64)sc << 32 | v) ? first : ((u64)sc << 32 | v);
            }
        }
    }
    if (n != 0u) {
        atomicAdd(a.count, n);
        atomicMin(a.first, first);
    }
}
