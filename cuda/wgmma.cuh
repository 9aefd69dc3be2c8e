// Hopper's warpgroup tensor-core products (PTX ISA, "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate"): the pieces the fused SiLU layers (linear_silu.cu) and IQN's fused passes
// (iqn_fused.cuh) share. The instructions exist only in sm_90a code (nvcc's arch-specific
// target, which CMake adds for the files that use them): FH_HAVE_WGMMA is defined in that
// compilation alone, and the host asks at run time which code the driver loaded
// (wgmma_probe_kernel below).
//
// Fragments, with g = lane / 4 and t = lane % 4 (CUTLASS's SM90 register layouts say the same):
// warp v of a warpgroup holds rows 16v .. 16v + 15 of the 64-row tile, in mma.sync m16n8k8's
// layout (mma_tf32.cuh): A (TF32, from registers) a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4),
// a3 = (g + 8, t + 4); the float32 accumulators d[4i .. 4i + 3] of column block i are (g, 8i + 2t),
// (g, 8i + 2t + 1), (g + 8, 8i + 2t), (g + 8, 8i + 2t + 1). So the warp-level kernels' fragments
// (and their permuted contraction order) carry over unchanged; only B comes from shared memory,
// through a descriptor, in a layout of its own.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FH_HAVE_WGMMA 1
#endif

namespace fh::cuda::wg {

// Writes 1 where the module's loaded code is sm_90a's (has the instructions), else 0. Each
// translation unit that uses them instantiates its own Unit (the driver picks code per module,
// and one Unit in two units would be one host symbol registering one module's kernel):
// 0 linear_silu.cu, 1 iqn_target.cu, 2 iqn_online.cu.
template <int Unit>
__global__ void wgmma_probe_kernel(int *has) {
#ifdef FH_HAVE_WGMMA
    *has = 1;
#else
    *has = 0;
#endif
}

#ifdef FH_HAVE_WGMMA
// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format") of a K-major operand in
// the 128-byte swizzled layout: row r's 16-byte piece c at r·128 + 16·(c ⊕ (r mod 8)) from a
// 1024-byte aligned base; start address, leading byte offset (unused by swizzled K-major
// layouts), stride byte offset between 8-row groups (1024 = 8 rows of 128 bytes), swizzle mode
// 1 = 128 bytes. A k step of 8 TF32 values is the start address plus 32 bytes.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

__device__ __forceinline__ void fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wait_all() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// All but the newest committed group done: its products may still run while the caller reuses
// what the older ones read.
__device__ __forceinline__ void wait_all_but_one() {
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
// Generic-proxy writes to shared memory made visible to the products' (async) proxy.
__device__ __forceinline__ void fence_proxy_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving an accumulator across the asynchronous products (CUTLASS's
// warpgroup_fence_operand does the same).
template <int NT>
__device__ __forceinline__ void pin(float (&d)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}

// d[64 × 32] += A[64 × 8] · B[8 × 32] (m64n32k8), TF32 operands, A from the thread's four
// registers (the layout above), B by descriptor.
__device__ __forceinline__ void mma_rs(float (&d)[4][4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
          "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}
#endif

}  // namespace fh::cuda::wg
