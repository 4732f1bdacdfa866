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
