// Test kernels: each runs one device function over inputs the host
// gives, for the exhaustive tests (gpu_test.go, f4_gpu_test.go). Built
// into the test module only.

// widen4 for every 16-bit input, for the exhaustive test.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_widen4(const TestWiden4Args a) {
    u32 v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < 65536u) a.out[v] = widen4(v);
}

// The test of div_param: out[i] = div_param(x[i], b[i]), as bits.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_test_div_param(const TestDivParamArgs a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.out[i] = __float_as_uint(div_param(__uint_as_float(a.x[i]), __uint_as_float(a.b[i])));
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
