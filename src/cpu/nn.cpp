#include "nn.hpp"

#include <cblas.h>

namespace fh::cpu {

void gemm_nt(size_t M, size_t N, size_t K, const float *A, const float *B, float *C, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K,
                B, (int)K, beta, C, (int)N);
}

void gemm_nn(size_t M, size_t N, size_t K, const float *A, const float *B, float *C, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K,
                B, (int)N, beta, C, (int)N);
}

void gemm_tn(size_t M, size_t N, size_t K, const float *A, const float *B, float *C, float beta) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)M,
                B, (int)N, beta, C, (int)N);
}

void col_sum(const float *X, size_t rows, size_t cols, float *out, bool accumulate) {
    for (size_t j = 0; j < cols; ++j) {
        double s = accumulate ? out[j] : 0.0;
        for (size_t i = 0; i < rows; ++i) s += X[i * cols + j];
        out[j] = (float)s;
    }
}

void add_row_bias(float *X, size_t rows, size_t cols, const float *b) {
    for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j) X[i * cols + j] += b[j];
}

void linear_silu(size_t M, size_t N, size_t K, const float *X, const float *W, const float *b,
                 float *pre, float *act) {
    gemm_nt(M, N, K, X, W, pre);
    add_row_bias(pre, M, N, b);
    for (size_t i = 0; i < M * N; ++i) act[i] = silu(pre[i]);
}

void silu_backward(float *dact, const float *pre, size_t n) {
    for (size_t i = 0; i < n; ++i) dact[i] *= dsilu(pre[i]);
}

double sum_squares(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (double)x[i] * x[i];
    return s;
}

void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, uint64_t t, float scale) {
    const float bc1 = (float)(1.0 - std::pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - std::pow((double)beta2, (double)t));
    for (size_t i = 0; i < n; ++i) {
        float gi = g[i] * scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
    }
}

void polyak(float *target, const float *online, size_t n, float tau) {
    for (size_t i = 0; i < n; ++i) target[i] = tau * online[i] + (1.0f - tau) * target[i];
}

}  // namespace fh::cpu
