// Fragment-level pieces shared by the fused tensor-core kernels of the 128-wide MLPs (IQN:
// iqn_fused.cuh; IQL: iql_fused.cu): the activations in their fast forms (also the fused SiLU
// layers' epilogues, linear_silu.cu, in TF32 and BF16 modes), TF32 rounding of a float4, a row's
// pair of outputs stored as float32 or bfloat16, quad sums, and the fixed-order column sums of a
// warp's 16 × 128 accumulator tile. Fragment layout
// (g = lane / 4, t = lane % 4, the permuted contraction order): mma_tf32.cuh.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mma_tf32.cuh"

namespace fh::cuda::tile {

// SiLU and the logistic in fast forms (the products feeding them carry 2^-11 rounding or more).
__device__ __forceinline__ float sigmoid_fast(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }
__device__ __forceinline__ float silu_fast(float z) { return __fdividef(z, 1.0f + __expf(-z)); }
// SiLU'(z) from its logistic s = σ(z): s (1 + z (1 − s)).
__device__ __forceinline__ float dsilu_of(float z, float s) { return s * (1.0f + z * (1.0f - s)); }
__device__ __forceinline__ float dsilu_fast(float z) { return dsilu_of(z, sigmoid_fast(z)); }

// Four floats as TF32 products read them (rounded once, when stored in shared memory).
__device__ __forceinline__ float4 tf32x4(float4 v) {
    return make_float4(mma::stored<false>(v.x), mma::stored<false>(v.y), mma::stored<false>(v.z),
                       mma::stored<false>(v.w));
}

// Two adjacent outputs of a row: float32, or bfloat16 (round to nearest even) where FH_MATH_BF16
// hands them to a GEMM on bfloat16 operands.
__device__ __forceinline__ void st2(float *p, float x, float y) {
    *reinterpret_cast<float2 *>(p) = make_float2(x, y);
}
__device__ __forceinline__ void st2(__nv_bfloat16 *p, float x, float y) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}
// The float32 pair rounded to bfloat16 values (round to nearest even) when R16: FH_MATH_BF16's
// stores whose only readers are GEMMs on bfloat16 operands, which then need no stage.
template <bool R16>
__device__ __forceinline__ void st2_round(float *p, float x, float y) {
    if constexpr (R16)
        st2(p, mma::rounded<true>(x), mma::rounded<true>(y));
    else
        st2(p, x, y);
}

// The sum over a quad (the 4 threads of one row pair).
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The column sums of a tile over a warp's 8 row groups g (the lanes that share t), in a fixed
// order, by a transposing butterfly: each step sends half of the values still held and keeps the
// other half. part4() takes 4 column tiles of one quarter through the steps over g's bits 2 and 1
// (lane g keeps tile g / 2, summed over 4 lanes); merge2() takes two quarters' results through
// the step over bit 0, after which lane g holds the full sum of tile g / 2 of the even quarter
// (g even) or of the odd one (g odd). 5 shuffles per 8 column tiles.
__device__ __forceinline__ float part4(float (&v)[4]) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const bool up = g & 4;
        const float send = up ? v[k] : v[k + 2], keep = up ? v[k + 2] : v[k];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
    }
    const bool up = g & 2;
    const float send = up ? v[0] : v[1], keep = up ? v[1] : v[0];
    return keep + __shfl_xor_sync(0xffffffffu, send, 8);
}
__device__ __forceinline__ float merge2(float even, float odd) {
    const bool up = (threadIdx.x >> 2) & 1;
    const float send = up ? even : odd, keep = up ? odd : even;
    return keep + __shfl_xor_sync(0xffffffffu, send, 4);
}

// A tile's column sums into a lane's accumulators, a quarter (4 column tiles) at a time: v[k][n]
// is the thread's value (its two rows summed) of kind k at column 8(4q + n) + 2t + (k % 2); K
// kinds (e.g. the two columns of dbm and of dw_z). pend keeps the even quarter's part4 results;
// after the odd one, acc[q / 2][k] += the warp's sum at column owned_col(q / 2, k % 2).
template <int K>
__device__ __forceinline__ void colsum_quarter(int q, float (&v)[K][4], float (&pend)[K],
                                               float (&acc)[2][K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const float p = part4(v[k]);
        if (q & 1) acc[q >> 1][k] += merge2(pend[k], p);
        else pend[k] = p;
    }
}
// The column of accumulator acc[pair][k] of colsum_quarter, e = k % 2.
__device__ __forceinline__ int owned_col(int pair, int e) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    return 8 * (4 * (2 * pair + (g & 1)) + (g >> 1)) + 2 * t + e;
}

}  // namespace fh::cuda::tile
