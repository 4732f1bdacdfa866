// ------------------------------------------------------------ finalize --

// out[t, :] = sum over slots k in order of w[t,k] * (y[pos[t,k], :] + b2[e])
// (y's rows y_ld apart: K, or the wgmma-fp4 GEMMs' padded K)
// (local slots only; e the slot's local expert; no b2: no bias). grid =
// (M, K / KMOE_FINALIZE_COLS rounded up), block KMOE_THREADS, four columns
// a thread (K is a multiple of 32, so y's and out's rows are 16-byte
// aligned). No atomics. A group of FIN_SLOTS slots has its positions,
// weights and y loads issued before any is summed, so a token's rows are
// read in one round trip, not one after another (the forward's last link
// at small M); the sum stays in slot order. Each chain rounds as its
// kernel family does (the oracle's finalize of that chain): mxfp8, w * (y
// + b2) added in float32; flashinfer, y rounded to bf16 first, then every
// add and product rounded to float32 (no fused multiply-add); bf16, each
// slot's row bf16(w * (y + b2)) and the float32 sum of those rows.
#define FIN_SLOTS 8
static_assert(KMOE_FINALIZE_COLS == 4 * KMOE_THREADS, "four columns a thread");

// One slot's term on the chain: the row v (y's four columns), its
// weight w and its bias b (zeros without one).
__device__ __forceinline__ float fin_term(float v, float w, float b, int chain) {
    if (chain == KMOE_CHAIN_FLASHINFER) return __fmul_rn(w, __fadd_rn(round_bf16(v), b));
    if (chain == KMOE_CHAIN_BF16) return round_bf16(__fmul_rn(w, __fadd_rn(v, b)));
    return w * (v + b);
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_finalize(const FinalizeArgs a) {
    pdl_wait(); // y (GEMM2)
    const int tok = blockIdx.x, topk = a.top_k, K = a.k;
    const int f = 4 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (f >= K) return;
    const int* __restrict__ pos = a.pos + (u64)tok * topk;
    const float* __restrict__ wts = a.wts + (u64)tok * topk;
    const int* __restrict__ ids = a.ids + (u64)tok * topk;
    const float* __restrict__ y = a.y;
    const float* __restrict__ b2 = a.b2;
    const int chain = a.chain;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 acc = zero;
    for (int k0 = 0; k0 < topk; k0 += FIN_SLOTS) {
        int p[FIN_SLOTS];
        float w[FIN_SLOTS];
        float4 v[FIN_SLOTS];
#pragma unroll
        for (int j = 0; j < FIN_SLOTS; j++) p[j] = k0 + j < topk ? pos[k0 + j] : -1;
#pragma unroll
        for (int j = 0; j < FIN_SLOTS; j++) {
            w[j] = p[j] >= 0 ? wts[k0 + j] : 0.0f;
            v[j] = p[j] >= 0 ? *(const float4*)&y[(u64)p[j] * a.y_ld + f] : zero;
        }
        if (chain == KMOE_CHAIN_MXFP8 && b2 == nullptr) { // the plain sum
#pragma unroll
            for (int j = 0; j < FIN_SLOTS; j++)
                if (p[j] >= 0) {
                    acc.x += w[j] * v[j].x;
                    acc.y += w[j] * v[j].y;
                    acc.z += w[j] * v[j].z;
                    acc.w += w[j] * v[j].w;
                }
            continue;
        }
        // The bias of each slot read where it is added (an L2 hit: E x K
        // floats), not with the rows: held beside them it took registers
        // the plain sum needs.
#pragma unroll
        for (int j = 0; j < FIN_SLOTS; j++)
            if (p[j] >= 0) {
                // A routed slot's id is a local expert of this rank (pos >= 0).
                const float4 b = b2 != nullptr ? *(const float4*)&b2[(u64)(ids[k0 + j] - a.rank * a.e_local) * K + f] : zero;
                acc.x = __fadd_rn(acc.x, fin_term(v[j].x, w[j], b.x, chain));
                acc.y = __fadd_rn(acc.y, fin_term(v[j].y, w[j], b.y, chain));
                acc.z = __fadd_rn(acc.z, fin_term(v[j].z, w[j], b.z, chain));
                acc.w = __fadd_rn(acc.w, fin_term(v[j].w, w[j], b.w, chain));
            }
    }
    *(float4*)&a.out[(u64)tok * K + f] = acc;
}
