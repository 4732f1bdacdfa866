#!/usr/bin/env bash
# A syntax and type check of the kernel program (cuda.KernelProgram) with
# the host's g++, before device time is spent on an NVRTC compile: CUDA's
# qualifiers, built-in variables and intrinsics are stubbed below, inline
# asm is dropped, and both bodies are checked (sm_90a with wgmma, and
# sm_120a's native MX). It catches C++ errors (an undeclared or shadowed
# name, a wrong type, a bad template instantiation) in every instantiated
# kernel; it cannot check PTX, register use or anything NVRTC decides.
# KERNEL_SYNTAX_FLAGS adds g++ options (e.g. -DNAME for a variant that a
# device call selects).
# Exit status 1 on an error; 0 with a note if g++ is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v g++ >/dev/null || { echo "kernel-syntax: no g++ here, not checked"; exit 0; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/stubs.h" <<'EOS'
#include <cstddef>
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __CUDA_ARCH__ 900
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#define asm(...) ((void)0)
#define volatile
struct kmoe_dim3 { unsigned x, y, z; };
extern kmoe_dim3 threadIdx, blockIdx, blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; }; struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; }; struct float2 { float x, y; };
struct int4 { int x, y, z, w; }; struct int2 { int x, y; };
uint2 make_uint2(unsigned, unsigned); uint4 make_uint4(unsigned, unsigned, unsigned, unsigned);
float4 make_float4(float, float, float, float); float2 make_float2(float, float);
void __syncthreads(); void __syncwarp(unsigned = 0); void __threadfence(); void __nanosleep(unsigned);
float __uint_as_float(unsigned); unsigned __float_as_uint(float);
template <class T> T __ldg(const T*); template <class T> T __ldcg(const T*);
float __fmul_rn(float, float); float __fmaf_rn(float, float, float); float __fdiv_rn(float, float); float __fadd_rn(float, float); float __fsub_rn(float, float);
template <class T> T __shfl_xor_sync(unsigned, T, int, int = 32);
template <class T> T __shfl_up_sync(unsigned, T, int, int = 32);
template <class T> T __shfl_sync(unsigned, T, int, int = 32);
int __popc(unsigned); int __ffs(int); unsigned __ballot_sync(unsigned, int); int __any_sync(unsigned, int);
unsigned __match_any_sync(unsigned, unsigned); unsigned __funnelshift_l(unsigned, unsigned, unsigned);
unsigned __byte_perm(unsigned, unsigned, unsigned); size_t __cvta_generic_to_shared(const void*);
int atomicAdd(int*, int); unsigned atomicAdd(unsigned*, unsigned);
float expf(float); float exp2f(float); float logf(float); float fabsf(float); float fminf(float, float);
float fmaxf(float, float); float sqrtf(float); float tanhf(float); float log1pf(float); float expm1f(float);
float floorf(float); float ceilf(float); float ldexpf(float, int); float frexpf(float, int*); float erfcf(float); float erff(float);
float copysignf(float, float);
EOS
go run ./scripts/kernelsrc > "$dir/prog.cu"
# Dynamic shared arrays (extern __shared__ x[]) become sized static ones.
sed -E 's/extern __shared__/__shared__/; s/(\w+)\[\];/\1[1];/' "$dir/prog.cu" | cat "$dir/stubs.h" - > "$dir/all.cpp"
status=0
for body in "" -DKMOE_NATIVE_MX; do
  if ! g++ -std=c++17 -fsyntax-only -w $body ${KERNEL_SYNTAX_FLAGS:-} "$dir/all.cpp" 2> "$dir/err.txt"; then
    echo "kernel-syntax: errors in the kernel program${body:+ ($body)}:"; grep -v 'note:' "$dir/err.txt" | head -30
    status=1
  fi
done
[ $status = 0 ] && echo "kernel-syntax: the kernel program passes g++ -fsyntax-only (both bodies)"
exit $status
