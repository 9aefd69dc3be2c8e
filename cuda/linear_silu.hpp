// A SiLU layer in one pass: pre = x Wᵀ + b, act = SiLU(pre) (SPEC §4's hidden layers), the GEMM
// and its bias + SiLU epilogue fused in one tensor-core kernel (cuda/linear_silu.cu) in TF32
// mode, instead of cuBLAS's GEMM followed by bias_silu() (cuda/nn.cuh), which writes the
// [M, N] product to memory and reads it back.
#pragma once
#include <cuda_runtime.h>

#include "gemm.hpp"

namespace fh::cuda {

// pre[M, N] = A[M, K] · W[N, K]ᵀ + b (b per column), act = SiLU(pre), all row-major float32, on
// the stream of bl's handle. `pre` may be null, or equal to act, when no backward reads it: then
// act alone holds the result.
// Which kernel runs:
// - the fused kernel in TF32 mode (bl.compute FAST_TF32, no BF16 stage) when K % 4 == 0 and A,
//   W are 16-byte aligned: TF32 operands (round to nearest), float32 sums in a fixed order;
// - otherwise, or with FOXHUNT_LINEAR=cublas in the environment (read at each call, so at
//   capture), gemm_nt() then bias_silu(): strict FP32 and BF16 keep their GEMMs.
// FOXHUNT_LINEAR takes auto (the default), fused or cublas; another value is FH_ERR_BAD_VALUE.
void linear_silu(const Blas &bl, int M, int N, int K, const float *A, const float *W,
                 const float *b, float *pre, float *act, const char *what);

// Whether linear_silu() would run the fused kernel for these operands (for tests).
bool linear_silu_fused(const Blas &bl, int K, const float *A, const float *W);

}  // namespace fh::cuda
