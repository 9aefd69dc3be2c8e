#include "gemm.hpp"

#include <cstdio>

#include "common.hpp"

namespace fh::cuda {

namespace {

void gemm(const Blas &b, cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k,
          const float *A, int lda, const float *B, int ldb, float *C, int ldc, float beta,
          const char *what) {
    const float alpha = 1.0f;
    cublasStatus_t s = cublasGemmEx(b.handle, opa, opb, m, n, k, &alpha, A, CUDA_R_32F, lda, B,
                                    CUDA_R_32F, ldb, &beta, C, CUDA_R_32F, ldc, b.compute,
                                    CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char call[256];
        snprintf(call, sizeof call, "cublasGemmEx(%s: m=%d n=%d k=%d)", what, m, n, k);
        throw_cublas(s, call, __FILE__, __LINE__);
    }
}

}  // namespace

// Row-major C = A Bᵀ  <=>  column-major Cᵀ[N, M] = B[N, K] Aᵀ: first operand B stored as the
// column-major [K, N] matrix Bᵀ (ld K), transposed; second A as column-major [K, M], as is.
void gemm_nt(const Blas &b, int M, int N, int K, const float *A, const float *B, float *C,
             float beta, const char *what) {
    gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, B, K, A, K, C, N, beta, what);
}

// Row-major C = A B  <=>  Cᵀ = Bᵀ Aᵀ: B is column-major [N, K] (ld N), A column-major [K, M].
void gemm_nn(const Blas &b, int M, int N, int K, const float *A, const float *B, float *C,
             float beta, const char *what) {
    gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, B, N, A, K, C, N, beta, what);
}

// Row-major C = Aᵀ B with A [K, M]  <=>  Cᵀ = Bᵀ A: B column-major [N, K] (ld N); A is
// column-major [M, K] (ld M), transposed.
void gemm_tn(const Blas &b, int M, int N, int K, const float *A, const float *B, float *C,
             float beta, const char *what) {
    gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, B, N, A, M, C, N, beta, what);
}

void gemm_tn_batched(const Blas &b, int M, int N, int K, const float *A, long long sA,
                     const float *B, long long sB, float *C, long long sC, int batch, float beta,
                     const char *what) {
    const float alpha = 1.0f;
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        b.handle, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &alpha, B, CUDA_R_32F, N, sB, A, CUDA_R_32F,
        M, sA, &beta, C, CUDA_R_32F, N, sC, batch, b.compute, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char call[256];
        snprintf(call, sizeof call, "cublasGemmStridedBatchedEx(%s: m=%d n=%d k=%d batch=%d)",
                 what, N, M, K, batch);
        throw_cublas(s, call, __FILE__, __LINE__);
    }
}

}  // namespace fh::cuda
