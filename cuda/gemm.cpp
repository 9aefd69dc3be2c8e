#include "gemm.hpp"

#include <cstdio>

#include "common.hpp"

namespace fh::cuda {

cublasComputeType_t compute_type(const fh_config &c) {
    return c.math_mode == FH_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Row-major C[M, N] = A[M, K] · B[N, K]ᵀ  <=>  column-major Cᵀ[N, M] = op_T(B as [K, N], ld K) ·
// (A as [K, M], ld K).
GemmDesc desc_nt(int M, int N, int K, const float *A, const float *B, float *C) {
    return GemmDesc{CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, B, K, A, K, C, N};
}
// Row-major C[M, N] = A[M, K] · B[K, N]  <=>  Cᵀ[N, M] = (B as [N, K], ld N) · (A as [K, M], ld K).
GemmDesc desc_nn(int M, int N, int K, const float *A, const float *B, float *C) {
    return GemmDesc{CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, B, N, A, K, C, N};
}
// Row-major C[M, N] = A[K, M]ᵀ · B[K, N]  <=>  Cᵀ[N, M] = (B as [N, K], ld N) · op_T(A as [M, K],
// ld M).
GemmDesc desc_tn(int M, int N, int K, const float *A, const float *B, float *C) {
    return GemmDesc{CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, B, N, A, M, C, N};
}

void gemm(const Blas &bl, const GemmDesc &g, float beta, const char *what) {
    if (bl.bf16_stage) return gemm_bf16(bl, g, beta, what);
    const float alpha = 1.0f;
    const cublasStatus_t s =
        cublasGemmEx(bl.handle, g.opa, g.opb, g.m, g.n, g.k, &alpha, g.a, CUDA_R_32F, g.lda, g.b,
                     CUDA_R_32F, g.ldb, &beta, g.c, CUDA_R_32F, g.ldc, bl.compute,
                     CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char call[256];
        snprintf(call, sizeof call, "cublasGemmEx(%s: m=%d n=%d k=%d)", what, g.m, g.n, g.k);
        throw_cublas(s, call, __FILE__, __LINE__);
    }
}

}  // namespace fh::cuda
