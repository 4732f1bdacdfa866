// kimimoe MoE kernels: MXFP8 activations x MXFP4 weights, [up; gate] FC1,
// gated activation and MXFP8 requantization fused after GEMM1, grouped
// GEMM2, deterministic finalize. Compiled at run time by NVRTC for the
// device's architecture; no CUDA headers are included.
//
// The block-scaled MMA (mx_mma below) has two bodies:
//  - sm_89/sm_90: mma.sync m16n8k32 e4m3 x e4m3 with a zero accumulator for
//    each 32-block, then a float32 promotion acc += d * scaleA * scaleB.
//    E2M1 weights are widened to E4M3 exactly (every E2M1 value is an E4M3
//    value).
//  - sm_120a (KMOE_NATIVE_MX): mma.sync.kind::mxf8f6f4.block_scale with the
//    ue8m0 scales applied by the tensor core. Compiled, never run here.
//
// The ABI (KMOE_* macros, one argument struct per kernel) is generated
// from backend/cuda/abi.go and prepended to this file before compiling;
// each kernel takes its struct by value. The static_asserts below tie the
// code's assumptions to that geometry.

#ifndef KMOE_THREADS
#error "compile with the ABI header from backend/cuda/abi.go prepended"
#endif

typedef unsigned long long u64;
struct __align__(8) f2 {
    float x, y;
};

#define BLOCK 32
#define KC KMOE_STAGE_K // k elements per shared-memory stage

static_assert(KMOE_THREADS == 256, "the GEMMs' warp roles assume 8 warps");
static_assert(KMOE_GEMM1_FEATURES == 64, "GEMM1: 8 warps x 8 features, two 32-feature MXFP8 blocks per CTA");
static_assert(KMOE_GEMM2_ROWS == 128, "GEMM2: 8 warps x 16 rows");
static_assert(KMOE_STAGE_K == 128, "stage_tokens moves KC/16 16-byte pieces per token");
static_assert(KMOE_PARAM_STRIDE == 19, "gated_act reads 5 parameters and SiTU 14 derived constants per expert");

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ u32 umax(u32 a, u32 b) { return a > b ? a : b; }
