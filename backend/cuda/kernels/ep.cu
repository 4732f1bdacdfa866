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
