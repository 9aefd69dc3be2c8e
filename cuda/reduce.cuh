// Fixed-order reductions of the CUDA backend: sums over a vector (losses, norms, dot products)
// and column sums over the rows of a matrix (bias gradients), with double accumulators.
//
// Determinism: no atomics. Every reduction is a fixed grid of blocks, each summing a fixed
// range in a fixed order, followed by one pass that sums the partials in a fixed order: the
// same inputs give the same bits, run to run and stream to stream.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace fh::cuda {

constexpr int kMaxList = 64;  // most inputs of a fixed-order elementwise sum (num_branches <= 64)
struct PtrList {
    const float *p[kMaxList];
    int n;
};

// ---- reductions ------------------------------------------------------------------------------
constexpr int kRedMaxBlocks = 1024;  // the most partials of one reduction
// Partial sums of x (op 0: x_i, op 1: x_i²) over a fixed grid; then the final block writes
// out = (float)(Σ / div) (final op 0) or (float)sqrt(Σ) (final op 1). `partial` holds
// reduce_blocks(n) doubles.
int reduce_blocks(size_t n);
void reduce_f32(const float *x, size_t n, int op, double *partial, cudaStream_t s);
void reduce_f64(const double *x, size_t n, double *partial, cudaStream_t s);
// Σ_i a_i · b_i (double products): the spectral-norm backward's ⟨dWsn, Wsn⟩.
void reduce_dot(const float *a, const float *b, size_t n, double *partial, cudaStream_t s);
// out = (float)(mul·Σ / div) for final op 0.
void reduce_final(const double *partial, int nb, float *out, int final_op, double div,
                  cudaStream_t s, double mul = 1.0);

// out = (float)(mul · Σ x / div): reduce_f64, then reduce_final.
void sum_to(const double *x, size_t n, float *out, double div, double *partial, cudaStream_t s,
            double mul = 1.0);

// Column sums over M rows of [M, N] in row chunks: partial [colsum_chunks(M), N] doubles, then
// out[j] = (float)(Σ) or (float)(out[j] + Σ) when accumulate (CPU col_sum's order of rounding).
int colsum_chunks(int M);
// Σ_i X[i, j] (· row_scale[i] when row_scale is not null; the product is taken in double).
// With batch > 1: `batch` matrices X + k·sX, partials [batch][chunks, N].
void colsum_partial(const float *X, int M, int N, const float *row_scale, double *partial,
                    cudaStream_t s, int batch = 1, size_t sX = 0);
// dpre = (Σ_k in_k, summed in list order in float) ⊙ SiLU'(pre), written to dpre (which may be
// in_0 when the list has one entry), and the column sums of dpre.
void silu_bwd_colsum_partial(const PtrList &in, const float *pre, int M, int N, float *dpre,
                             double *partial, cudaStream_t s);
void colsum_final(const double *partial, int M, int N, float *out, bool accumulate,
                  cudaStream_t s, int batch = 1, size_t s_out = 0);
// out[j] = (float)Σ_i X[i, j] (· row_scale[i]): colsum_partial, then colsum_final.
void colsum(const float *X, int M, int N, const float *row_scale, float *out, double *partial,
            cudaStream_t s);


}  // namespace fh::cuda
