// Hopper's warpgroup TF32 product (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-
// Accumulate", wgmma.mma_async m64n128k8 .tf32) and the shared-memory layout its operands use
// here: K-major chunks of 32 floats per row (128 bytes) in the 128-byte swizzle, row r's 16-byte
// piece c at r·128 + 16·(c ⊕ (r mod 8)), so that the eight rows a product reads at one k hit
// eight different bank groups. A k step of 8 is the descriptor's start address plus 32 bytes.
// The instructions exist only in sm_90a code (FH_HAVE_WGMMA); the kernels that use them
// (linear_silu.cu, qnet_fused.cu) are empty elsewhere and say so to the host through a probe.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FH_HAVE_WGMMA 1
#endif

namespace fh::cuda::wgmma {

// The byte offset of row r's 16-byte piece c in a swizzled chunk of 128-byte rows.
__device__ __forceinline__ uint32_t sw128(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

#ifdef FH_HAVE_WGMMA
// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): start address, leading
// byte offset (unused by swizzled K-major layouts), stride byte offset between 8-row groups
// (1024 = 8 rows of 128 bytes), swizzle mode 1 = 128 bytes.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

// d[64] += A [64 × 8] · B [128 × 8]ᵀ, both operands from shared memory (descriptors da, db).
// Accumulator j of thread (warp v of the warpgroup, g = lane / 4, t = lane % 4): row
// 16v + g (+ 8 for the odd pairs), column 8·(j / 4) + 2t + (j mod 2).
__device__ __forceinline__ void m64n128k8(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
          "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}

// A chunk's four k steps of 8 (32 floats per row), one commit group.
__device__ __forceinline__ void chunk_k32(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int k = 0; k < 4; ++k) m64n128k8(d, da + 2 * k, db + 2 * k);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// The copies of a chunk are ready for the tensor cores once each thread has waited for its own
// and made them visible to the async proxy, and a barrier then makes that true of all threads'.
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

}  // namespace fh::cuda::wgmma
