// Warp-level TF32 tensor-core products: mma.sync.m16n8k8 (PTX ISA, "Matrix Fragments for
// mma.m16n8k8", .tf32) and the split-TF32 ("3xTF32") variant that gives float32 accuracy.
//
// Fragments of one m16n8k8 product, with g = lane / 4 ("groupID") and t = lane % 4:
//   A [16 x 8], row-major:  a0 = A[g][t],  a1 = A[g+8][t],  a2 = A[g][t+4],  a3 = A[g+8][t+4]
//   B [8 x 8],  "col":      b0 = B[t][g],  b1 = B[t+4][g]
//   C [16 x 8]:             c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
//
// A product's contraction index k may be numbered in any order, as long as A and B use the same
// order. The kernels use that: with logical k = t ↔ physical column 2t and k = t+4 ↔ 2t+1, the
// accumulator fragment of one 8-column tile (c0, c1 / c2, c3) IS the A fragment of the next
// product (a0 = c0, a2 = c1, a1 = c2, a3 = c3) and IS a B fragment (b0 = c0, b1 = c1 for rows
// g, b0 = c2, b1 = c3 for rows g + 8): results feed the next product without a shared-memory
// round trip, as long as the other operand is read with the same column order.
//
// Split TF32: x = hi + lo with hi = tf32(x), lo = tf32(x − hi); a·b ≈ hi·hi + hi·lo + lo·hi
// (lo·lo is below float32 rounding). Three products per tile; the small terms go first.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fh::cuda::mma {

// Round to TF32 (10 stored mantissa bits, round to nearest, ties to even), kept as a float32 bit
// pattern with the low 13 bits zero, as the tensor cores read it. cvt.rn (PTX ISA: .rn for a
// .tf32 destination needs sm_90) and not cvt.rna (ties away): sm_90's ptxas makes cvt.rn one
// F2FP instruction and cvt.rna a test against infinity, a predicated add and, for memory, a
// mask, which were a fifth of the attention kernels' instructions (docs/cuda.md, "Findings").
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// Round to bfloat16 (8-bit mantissa, round to nearest even, as gemm_bf16.cu's staging rounds),
// kept as a float32 bit pattern: its low 16 bits are zero, so a TF32 product reads it exactly and
// multiplies bfloat16 values as a BF16 product would (exact products, float32 accumulation).
__device__ __forceinline__ uint32_t to_bf16_bits(float x) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x)) << 16;
}
// An operand's rounding for a product: TF32, or bfloat16 (FH_MATH_BF16's operands) with BF16.
template <bool BF16>
__device__ __forceinline__ uint32_t to_operand(float x) {
    return BF16 ? to_bf16_bits(x) : to_tf32(x);
}
// The same as a float, for memory that products read later.
template <bool BF16>
__device__ __forceinline__ float rounded(float x) {
    return __uint_as_float(to_operand<BF16>(x));
}
// One operand element as the product reads it: `hi` alone (TF32) or hi + lo (split).
struct Op {
    uint32_t hi, lo;
};
template <bool SPLIT>
__device__ __forceinline__ Op op(float x) {
    Op o;
    o.hi = to_tf32(x);
    o.lo = SPLIT ? to_tf32(x - __uint_as_float(o.hi)) : 0u;
    return o;
}

// One operand element rounded as the mode's plain products read it: TF32, or bfloat16 (BF16).
template <bool BF16>
__device__ __forceinline__ Op op_rounded(float x) {
    return Op{to_operand<BF16>(x), 0u};
}

// A value for shared memory that a product reads later: plain TF32 products read operands that
// were rounded once when stored (no conversion at each load); split products need the float.
template <bool SPLIT>
__device__ __forceinline__ float stored(float x) {
    return SPLIT ? x : rounded<false>(x);
}
// The operand element of a value written by stored<SPLIT>().
template <bool SPLIT>
__device__ __forceinline__ Op loaded(float x) {
    return SPLIT ? op<true>(x) : Op{__float_as_uint(x), 0u};
}

__device__ __forceinline__ void mma1(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                     uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c += A·B for one 16x8x8 tile from the operands' elements (see the fragment table above).
template <bool SPLIT>
__device__ __forceinline__ void mma(float (&c)[4], const Op (&a)[4], const Op (&b)[2]) {
    if (SPLIT) {
        mma1(c, a[0].lo, a[1].lo, a[2].lo, a[3].lo, b[0].hi, b[1].hi);
        mma1(c, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].lo, b[1].lo);
    }
    mma1(c, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].hi, b[1].hi);
}

// The A fragment of a product whose contraction runs over the 8 columns of accumulator tile c
// (in the permuted order described above), each element made an operand by f.
template <class F>
__device__ __forceinline__ void a_from_acc_by(Op (&a)[4], const float (&c)[4], F f) {
    a[0] = f(c[0]);
    a[1] = f(c[2]);
    a[2] = f(c[1]);
    a[3] = f(c[3]);
}
template <bool SPLIT>
__device__ __forceinline__ void a_from_acc(Op (&a)[4], const float (&c)[4]) {
    a_from_acc_by(a, c, [](float x) { return op<SPLIT>(x); });
}
// The same for plain products in the mode's rounding (TF32, or bfloat16 with BF16).
template <bool BF16>
__device__ __forceinline__ void a_from_acc_rounded(Op (&a)[4], const float (&c)[4]) {
    a_from_acc_by(a, c, [](float x) { return op_rounded<BF16>(x); });
}

// A product's weight matrix in shared memory, row-major [*, LD] (LD a multiple of 32), at
// element (r, c): r·LD + (c XOR 8·f), f = (r ^ (r >> 2)) & 3 on r's low three bits. The
// fragment reads hit 32 different banks: rows g of 8-row groups at columns 8κ + 2t as float2
// (a B operand read by rows, or an A operand; each half-warp's g < 4 or g ≥ 4 takes four
// different f), and rows 8κ + 2t (+1) at column 8ν + g as single floats (a B operand read by
// columns; the four t take four different f). The XOR moves whole aligned groups of 8 columns,
// so float4 stores and float2 reads stay whole.
template <int LD>
__device__ __forceinline__ int swz(int r, int c) {
    const int f = (r & 3) ^ ((r >> 2) & 1);
    return r * LD + (c ^ (f << 3));
}

// c[ν] += A · Wᵀ over contraction step ka for the LD / 8 column tiles ν: W [LD, *] read by rows
// from its swz<LD> copy Ws, holding TF32 values, at columns 8ka + 2t and + 1 (the permuted
// contraction order above).
template <int LD>
__device__ __forceinline__ void mma_rows(float (&c)[LD / 8][4], const Op (&A)[4], const float *Ws,
                                         int ka) {
    const int gi = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
#pragma unroll
    for (int nu = 0; nu < LD / 8; ++nu) {
        const float *wp = Ws + swz<LD>(8 * nu + gi, 8 * ka + 2 * tq);
        const float2 w = *reinterpret_cast<const float2 *>(wp);
        const Op Bf[2] = {loaded<false>(w.x), loaded<false>(w.y)};
        mma<false>(c[nu], A, Bf);
    }
}

}  // namespace fh::cuda::mma
