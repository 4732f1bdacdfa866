// ------------------------------------------- sync and copy primitives --

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// Programmatic dependent launch (sm_90; launchPDL in bind.go). pdl_wait
// returns once the kernels this one depends on have completed and their
// writes are visible (at once for a kernel launched without the
// attribute); pdl_trigger lets the next kernel in the stream be launched
// once every CTA of this one has triggered or exited, so its CTAs take
// SMs as this one's last CTAs leave them (its own pdl_wait still waits
// for all of this kernel).
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Per-tile readiness of GEMM1's intermediate (the wgmma-fp4 path), so
// that GEMM2 overlaps GEMM1's last wave: each GEMM1 CTA counts itself in ready[tile] once its
// stores are done (tile_signal: every thread's stores, a fence, the
// count with release semantics), and a GEMM2 CTA waits for its own
// tile's count (tile_wait: one thread acquires, the barrier passes it
// on) instead of for the whole GEMM1 grid (pdl_wait), so GEMM2's first
// tiles run while GEMM1's last ones finish. No deadlock: GEMM2 is
// launched once every GEMM1 CTA has triggered it, so every GEMM1 CTA is
// resident or done by then. The prologue zeroes the counts each forward.
__device__ __forceinline__ void tile_signal(int* ready) {
    __threadfence();
    __syncthreads();
#if __CUDA_ARCH__ >= 700
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(ready) : "memory");
#endif
}
__device__ __forceinline__ void tile_wait(const int* ready, int target) {
#if __CUDA_ARCH__ >= 700
    if (threadIdx.x == 0) {
        int v;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(ready) : "memory");
            if (v >= target) break;
            __nanosleep(32);
        }
    }
#endif
    __syncthreads();
}

// What the k loops wait for before reading the tokens: GEMM2 its tile's
// intermediate (ready not null: ready[tile] reaching target), else the
// previous kernel (pdl_wait). The pointer is tested before any arithmetic
// on it: an offset null pointer let the compiler drop the test (the
// sanitizer caught thread 0 reading address 0).
struct InputWait {
    const int* ready;
    int tile, target;
    __device__ __forceinline__ void wait() const {
        if (ready != nullptr) tile_wait(ready + tile, target);
        else pdl_wait();
    }
};

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait0() { asm volatile("cp.async.wait_group 0;\n" ::); }
