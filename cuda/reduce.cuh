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
// The final pass's block: one thread per partial at most. Its order of additions is also
// formed on smaller blocks by k_adam (nn.cu, device_math.cuh wide_block_sum).
constexpr int kRedFinalThreads = kRedMaxBlocks;
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

// ---- column sums ------------------------------------------------------------------------------
// Column sums of Z stacked row-major [rows, width] matrices go in chunks of rows: one block
// sums one chunk of a 32-column tile, each of its 8 row lanes every 8th row in order, then the
// lanes in order (device_math.cuh tile_col_sum), in double. Partials are [Z][chunks][width];
// reduce_partials() sums all rows of a column in one block of 32 row lanes, each lane every 32nd
// row in order, then the lanes in a fixed tree. A thread loads several of its rows at once, then
// sums them in row order (so the bits do not depend on how many).
constexpr int kRowBatch = 4;

constexpr int kColsumRows = 256;  // rows per chunk of colsum_partial
int colsum_chunks(int rows, int chunk_rows = kColsumRows);
// Σ_i X[i, j] (· row_scale[i] when row_scale is not null: a fused multiply-add in double) per
// chunk of kColsumRows rows; with Z > 1, matrix z is X + z·zstride.
void colsum_partial(const float *X, int rows, int width, const float *row_scale,
                    double *partial, cudaStream_t s, int Z = 1, size_t zstride = 0);
// dpre = (Σ_k in_k, summed in list order in float) ⊙ SiLU'(pre + bias), written to dpre (which
// may be in_0 when the list has one entry), and the column sums of dpre per chunk of chunk_rows
// rows; with Z > 1, every pointer advances by rows·cols per matrix and bias (per column) by
// zbias. pre is the layer's product without its bias, as bias_silu (nn.cuh) leaves it. The rows
// of in and dpre lie ld floats apart (ld = 0: cols; a matrix inside a wider one, Z = 1 only).
void dsilu_colsum(const PtrList &in, const float *pre, const float *bias, int rows, int cols,
                  int chunk_rows, float *dpre, double *partial, cudaStream_t s, int Z = 1,
                  size_t zbias = 0, int ld = 0);

// The final pass: the sums of all `rows` rows of each column of Z stacked [rows, width]
// partials, written as out = (float)(sum / div) to the segment that owns the column.
struct Seg {
    float *dst;      // column col0 + k goes to dst[z * zstride + k]
    int col0, len;
    size_t zstride;
    double div;      // 1 for gradients; the batch for a mean
};
constexpr int kMaxSegs = 4;
struct Segs {
    Seg s[kMaxSegs];
    int n = 0;
    void add(float *dst, int col0, int len, size_t zstride = 0, double div = 1.0) {
        s[n++] = Seg{dst, col0, len, zstride, div};
    }
};
void reduce_partials(const double *part, int rows, int width, int Z, const Segs &segs,
                     cudaStream_t s);
void reduce_partials(const float *part, int rows, int width, int Z, const Segs &segs,
                     cudaStream_t s);

// The final pass after colsum_partial or dsilu_colsum (chunks of kColsumRows rows over `rows`
// rows): out[j] = (float)Σ; matrix z's sums go to out + z·out_stride.
void colsum_final(const double *partial, int rows, int width, float *out, cudaStream_t s,
                  int Z = 1, size_t out_stride = 0);
// out[j] = (float)Σ_i X[i, j] (· row_scale[i]): colsum_partial, then the final pass.
void colsum(const float *X, int M, int N, const float *row_scale, float *out, double *partial,
            cudaStream_t s);

}  // namespace fh::cuda
