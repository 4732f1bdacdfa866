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
