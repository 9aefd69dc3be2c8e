// Warp-level bfloat16 tensor-core products: mma.sync.m16n8k16 with float32 accumulation (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type", .bf16), FH_MATH_BF16's products in
// the fused kernels that keep their activations in registers.
//
// Fragments of one m16n8k16 product, with g = lane / 4 and t = lane % 4; each register holds two
// bfloat16, the lower column (or row) in its low half:
//   A [16 x 16], row-major: a0 = A[g][2t, 2t+1],   a1 = A[g+8][2t, 2t+1],
//                           a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B [16 x 8], "col":      b0 = B[2t, 2t+1][g],   b1 = B[2t+8, 2t+9][g]
//   C [16 x 8]:             c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// So the accumulators of two adjacent 8-column tiles (2s, 2s + 1) ARE the A fragment of a product
// that contracts over their 16 columns: a0 = (c0, c1) and a1 = (c2, c3) of tile 2s, a2 and a3 of
// tile 2s + 1, in the natural column order (mma_tf32.cuh's TF32 products need a permuted one).
// A weight W [n, k] stored row-major in shared memory gives b0 and b1 as two 32-bit loads of row
// n = 8ν + g at columns 16s + 2t and 16s + 2t + 8.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fh::cuda::bmma {

// Two floats as one register of bfloat16 operands (round to nearest even; x in the low half).
__device__ __forceinline__ uint32_t pack(float x, float y) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t *>(&v);
}

// Two adjacent bfloat16 of shared or global memory (4-byte aligned) as one register.
__device__ __forceinline__ uint32_t ld_pair(const __nv_bfloat16 *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}
__device__ __forceinline__ uint32_t ldg_pair(const __nv_bfloat16 *p) {
    return __ldg(reinterpret_cast<const unsigned int *>(p));
}

// c += A·B for one 16x8x16 tile (the fragment table above).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace fh::cuda::bmma
