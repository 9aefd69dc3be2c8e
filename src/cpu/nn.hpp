// Building blocks of the CPU reference: GEMMs through OpenBLAS's cblas, activations, and
// fixed-order reductions (rows summed first to last, in double, then rounded once).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace fh::cpu {

// C[M, N] = A[M, K] · B[N, K]ᵀ + beta·C      (y = x Wᵀ for W [N, K])
void gemm_nt(size_t M, size_t N, size_t K, const float *A, const float *B, float *C,
             float beta = 0.0f);
// C[M, N] = A[M, K] · B[K, N] + beta·C        (dx = dy W)
void gemm_nn(size_t M, size_t N, size_t K, const float *A, const float *B, float *C,
             float beta = 0.0f);
// C[M, N] = A[K, M]ᵀ · B[K, N] + beta·C       (dW = dyᵀ x)
void gemm_tn(size_t M, size_t N, size_t K, const float *A, const float *B, float *C,
             float beta = 0.0f);

// out[j] = sum_i X[i, j] (+ out[j] if accumulate), rows in order.
void col_sum(const float *X, size_t rows, size_t cols, float *out, bool accumulate = false);
void add_row_bias(float *X, size_t rows, size_t cols, const float *b);

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }
inline float silu(float z) { return z * sigmoid(z); }
inline float dsilu(float z) {  // d/dz z·σ(z)
    float s = sigmoid(z);
    return s * (1.0f + z * (1.0f - s));
}
inline float softplus(float z) {  // log(1 + e^z) without overflow
    return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
}
inline float huber(float u, float k) {
    float a = std::fabs(u);
    return a <= k ? 0.5f * u * u : k * (a - 0.5f * k);
}
inline float dhuber(float u, float k) { return std::fabs(u) <= k ? u : (u > 0 ? k : -k); }

// pre = X Wᵀ + b; act = SiLU(pre).  X [M, K], W [N, K].
void linear_silu(size_t M, size_t N, size_t K, const float *X, const float *W, const float *b,
                 float *pre, float *act);
// dpre = dact ⊙ SiLU'(pre), in place on dact.
void silu_backward(float *dact, const float *pre, size_t n);

// Sum of squares in double, elements in order.
double sum_squares(const float *x, size_t n);

// Adam (Kingma & Ba 2015, Algorithm 1) on n flat parameters; g is scaled by `scale` first
// (global-norm clipping). 1-beta^t in float64, rounded to float32 (SPEC §5.6).
void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, uint64_t t, float scale = 1.0f);

// target = tau·online + (1 - tau)·target
void polyak(float *target, const float *online, size_t n, float tau);

}  // namespace fh::cpu
