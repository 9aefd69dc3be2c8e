// A thin row-major GEMM layer over cuBLAS (column-major): the three shapes the Q net needs,
// named as in src/cpu/nn.hpp so the CUDA tasks read like the CPU ones.
//
//   gemm_nt: C[M, N] = A[M, K] · B[N, K]ᵀ + beta·C     (y = x Wᵀ)
//   gemm_nn: C[M, N] = A[M, K] · B[K, N]   + beta·C     (dx = dy W)
//   gemm_tn: C[M, N] = A[K, M]ᵀ · B[K, N]  + beta·C     (dW = dyᵀ x)
//
// A row-major [r, c] matrix is the column-major [c, r] matrix with leading dimension c, so each
// call computes Cᵀ = op(B)·op(A) in cuBLAS's terms. The compute type is FP32 (strict) or
// FP32 with TF32 tensor cores, fixed per pipeline (fh_config.math_mode). The handle must
// already be bound to its lane's stream and workspace.
#pragma once
#include <cublas_v2.h>

namespace fh::cuda {

struct Blas {
    cublasHandle_t handle;
    cublasComputeType_t compute;  // CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32
};

void gemm_nt(const Blas &b, int M, int N, int K, const float *A, const float *B, float *C,
             float beta, const char *what);
void gemm_nn(const Blas &b, int M, int N, int K, const float *A, const float *B, float *C,
             float beta, const char *what);
void gemm_tn(const Blas &b, int M, int N, int K, const float *A, const float *B, float *C,
             float beta, const char *what);
// `batch` independent gemm_tn's, operand k at A + k·sA, B + k·sB, C + k·sC (elements).
void gemm_tn_batched(const Blas &b, int M, int N, int K, const float *A, long long sA,
                     const float *B, long long sB, float *C, long long sC, int batch, float beta,
                     const char *what);

}  // namespace fh::cuda
