// The timing module (timing.go): what kimimoe bench and the tests run
// around a timed forward, apart from the product module.

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
