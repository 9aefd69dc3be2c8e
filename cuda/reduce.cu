#include "reduce.cuh"

#include <algorithm>

#include "common.hpp"
#include "device_math.cuh"
#include "error.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// ---- reductions ---------------------------------------------------------------------------------
constexpr int kRedThreads = 256;
// Elements per block before the grid saturates: four per thread. With 4096 (16 per thread) a
// reduction of the step's sizes ran on a few blocks, each thread's loop of loads and adds one
// after the other (step 2.604 → 2.580 ms single-stream at B = 16384,
// bench/results/h200-2026-12-01-reduce-blocks-before-after.json).
constexpr size_t kRedPerBlock = 1024;

size_t red_chunk(size_t n, int nb) {
    size_t c = (n + nb - 1) / nb;
    return c == 0 ? 1 : c;
}

template <class T, int OP>
__global__ void k_reduce_partial(const T *x, size_t n, size_t chunk, double *partial) {
    pdl_enter();
    __shared__ double sh[kRedThreads];
    const size_t lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
    double acc = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const double v = (double)x[i];
        acc += OP == 1 ? v * v : v;
    }
    const double s = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void k_reduce_dot(const float *a, const float *b, size_t n, size_t chunk,
                             double *partial) {
    pdl_enter();
    __shared__ double sh[kRedThreads];
    const size_t lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
    double acc = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += (double)a[i] * b[i];
    const double s = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void k_reduce_final(const double *partial, int nb, float *out, int op, double div,
                               double mul) {
    pdl_enter();
    __shared__ double sh[kRedFinalThreads + 1];
    const double s = wide_block_sum<kRedFinalThreads, kRedFinalThreads>(partial, nb, sh);
    if (threadIdx.x == 0) *out = op == 1 ? (float)sqrt(s) : (float)(mul * s / div);
}

// ---- column sums ---------------------------------------------------------------------------------
constexpr int kColTx = 32, kColTy = 8;

// The column kernels' threads walk their rows r0 + y, r0 + y + kColTy, ... in order, kRowBatch
// rows loaded before any is summed so that their loads are in flight together (one row at a time
// they were latency-bound: bench/results/h200-2026-12-01-row-batch-before-after.json); the sums
// keep the row order.
constexpr int U = kRowBatch;

// grid (column tiles, chunks, Z), block (kColTx, kColTy): one partial row per chunk.
__global__ void k_colsum(const float *__restrict__ X, int rows, int width, int chunk_rows,
                         size_t zstride, const float *__restrict__ row_scale, double *partial) {
    pdl_enter();
    __shared__ double sh[kColTy][kColTx + 1];
    const int col = blockIdx.x * kColTx + threadIdx.x, z = blockIdx.z;
    X += z * zstride;
    const int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    double acc = 0.0;
    if (col < width)
        for (int r = r0 + threadIdx.y; r < r1; r += U * kColTy) {
            double v[U], w[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int ru = r + u * kColTy;
                v[u] = ru < r1 ? (double)X[(size_t)ru * width + col] : 0.0;
                w[u] = row_scale && ru < r1 ? (double)row_scale[ru] : 0.0;
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (r + u * kColTy < r1) acc = row_scale ? fma(w[u], v[u], acc) : acc + v[u];
        }
    const double s = tile_col_sum(sh, acc);
    if (threadIdx.y == 0 && col < width)
        partial[((size_t)z * gridDim.y + blockIdx.y) * width + col] = s;
}

// grid (column tiles, chunks, Z), block (kColTx, kColTy). dpre may be in.p[0] (in place): each
// element is read and written by one thread, loads first.
__global__ void k_dsilu_colsum(PtrList in, const float *pre, const float *bias, size_t zbias,
                               int rows, int cols, int ld, int chunk_rows, float *dpre,
                               double *partial) {
    pdl_enter();
    __shared__ double sh[kColTy][kColTx + 1];
    const int col = blockIdx.x * kColTx + threadIdx.x;
    const size_t zoff = (size_t)blockIdx.z * rows * cols;  // Z > 1 only with ld == cols
    const int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    double acc = 0.0;
    if (col < cols) {
        const float b = bias[blockIdx.z * zbias + col];
        for (int r = r0 + threadIdx.y; r < r1; r += U * kColTy) {
            float g[U], p[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int ru = r + u * kColTy;
                const size_t i = zoff + (size_t)ru * ld + col;
                g[u] = ru < r1 ? in.p[0][i] : 0.0f;
                p[u] = ru < r1 ? pre[zoff + (size_t)ru * cols + col] : 0.0f;
                p[u] = __fadd_rn(p[u], b);
            }
            for (int k = 1; k < in.n; ++k)
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int ru = r + u * kColTy;
                    if (ru < r1) g[u] = __fadd_rn(g[u], in.p[k][zoff + (size_t)ru * ld + col]);
                }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int ru = r + u * kColTy;
                if (ru >= r1) continue;
                const float v = __fmul_rn(g[u], dev_dsilu(p[u]));
                dpre[zoff + (size_t)ru * ld + col] = v;
                acc += (double)v;
            }
        }
    }
    const double s = tile_col_sum(sh, acc);
    if (threadIdx.y == 0 && col < cols)
        partial[((size_t)blockIdx.z * gridDim.y + blockIdx.y) * cols + col] = s;
}

// The final pass over a few hundred partial rows is a chain of dependent loads, not a bandwidth
// problem: k_colsum's 8 row lanes, 4 rows in flight each, walked 264 partial rows in 9 rounds
// (7.3 µs after IQN's online pass, warm Nsight). Here a block of 32 columns × 32 row lanes
// loads 8 rows per lane at once (a round covers 256 rows), each lane sums its rows y, y + 32, ...
// in order in double, and the 32 lanes meet in a fixed tree in shared memory (y + 16, + 8, ...):
// the default step's 13 final passes 63.0 → 49.6 µs with warm caches; wall 1.618 / 1.612 →
// 1.602 ms multi-stream and 2.036 / 2.034 → 2.019 single at B = 16384, two runs of the old pass
// against one (bench/results/h200-2026-12-02-reduce-final-before-after.json, -ncu-warm.txt).
constexpr int kFinTx = 32, kFinTy = 32, kFinBatch = 8;
template <class T>
__global__ void __launch_bounds__(kFinTx *kFinTy) k_colsum_final(const T *__restrict__ X, int rows,
                                                                 int width, Segs segs) {
    pdl_enter();
    __shared__ double sh[kFinTy][kFinTx + 1];
    const int col = blockIdx.x * kFinTx + threadIdx.x, z = blockIdx.z, y = threadIdx.y;
    X += (size_t)z * rows * width;
    double acc = 0.0;
    if (col < width)
        for (int r = y; r < rows; r += kFinBatch * kFinTy) {
            double v[kFinBatch];
#pragma unroll
            for (int u = 0; u < kFinBatch; ++u) {
                const int ru = r + u * kFinTy;
                v[u] = ru < rows ? (double)X[(size_t)ru * width + col] : 0.0;
            }
#pragma unroll
            for (int u = 0; u < kFinBatch; ++u)
                if (r + u * kFinTy < rows) acc += v[u];
        }
    sh[y][threadIdx.x] = acc;
    __syncthreads();
#pragma unroll
    for (int w = kFinTy / 2; w >= 1; w >>= 1) {
        if (y < w) sh[y][threadIdx.x] += sh[y + w][threadIdx.x];
        __syncthreads();
    }
    if (y != 0 || col >= width) return;
    const double s = sh[0][threadIdx.x];
    for (int k = 0; k < segs.n; ++k) {
        const Seg &g = segs.s[k];
        if (col >= g.col0 && col < g.col0 + g.len)
            g.dst[(size_t)z * g.zstride + (col - g.col0)] = (float)(s / g.div);
    }
}

template <class T>
void reduce_partials_impl(const T *part, int rows, int width, int Z, const Segs &segs,
                          cudaStream_t s) {
    if (segs.n < 1 || segs.n > kMaxSegs)
        fail(FH_ERR_INTERNAL, "reduce_partials: %d segments", segs.n);
    dim3 grid((width + kFinTx - 1) / kFinTx, 1, Z), block(kFinTx, kFinTy);
    FH_LAUNCH(k_colsum_final<T>, grid, block, 0, s, part, rows, width, segs);
}

}  // namespace

int reduce_blocks(size_t n) {
    size_t nb = (n + kRedPerBlock - 1) / kRedPerBlock;
    return (int)std::max<size_t>(1, std::min<size_t>(nb, kRedMaxBlocks));
}

void reduce_f32(const float *x, size_t n, int op, double *partial, cudaStream_t s) {
    const int nb = reduce_blocks(n);
    if (op == 1)
        FH_LAUNCH((k_reduce_partial<float, 1>), nb, kRedThreads, 0, s, x, n, red_chunk(n, nb),
                  partial);
    else
        FH_LAUNCH((k_reduce_partial<float, 0>), nb, kRedThreads, 0, s, x, n, red_chunk(n, nb),
                  partial);
}

void reduce_f64(const double *x, size_t n, double *partial, cudaStream_t s) {
    const int nb = reduce_blocks(n);
    FH_LAUNCH((k_reduce_partial<double, 0>), nb, kRedThreads, 0, s, x, n, red_chunk(n, nb),
              partial);
}

void reduce_dot(const float *a, const float *b, size_t n, double *partial, cudaStream_t s) {
    const int nb = reduce_blocks(n);
    FH_LAUNCH(k_reduce_dot, nb, kRedThreads, 0, s, a, b, n, red_chunk(n, nb), partial);
}

void reduce_final(const double *partial, int nb, float *out, int final_op, double div,
                  cudaStream_t s, double mul) {
    FH_LAUNCH(k_reduce_final, 1, kRedFinalThreads, 0, s, partial, nb, out, final_op, div, mul);
}

int colsum_chunks(int rows, int chunk_rows) {
    return std::max(1, (rows + chunk_rows - 1) / chunk_rows);
}

void colsum_partial(const float *X, int rows, int width, const float *row_scale,
                    double *partial, cudaStream_t s, int Z, size_t zstride) {
    dim3 grid((width + kColTx - 1) / kColTx, colsum_chunks(rows), Z), block(kColTx, kColTy);
    FH_LAUNCH(k_colsum, grid, block, 0, s, X, rows, width, kColsumRows, zstride, row_scale,
              partial);
}

void dsilu_colsum(const PtrList &in, const float *pre, const float *bias, int rows, int cols,
                  int chunk_rows, float *dpre, double *partial, cudaStream_t s, int Z,
                  size_t zbias, int ld) {
    if (ld == 0) ld = cols;
    if (ld < cols || (Z > 1 && ld != cols))
        fail(FH_ERR_INTERNAL, "dsilu_colsum: row stride %d for %d columns, %d matrices", ld, cols, Z);
    dim3 grid((cols + kColTx - 1) / kColTx, colsum_chunks(rows, chunk_rows), Z),
        block(kColTx, kColTy);
    FH_LAUNCH(k_dsilu_colsum, grid, block, 0, s, in, pre, bias, zbias, rows, cols, ld, chunk_rows,
              dpre, partial);
}

void reduce_partials(const double *part, int rows, int width, int Z, const Segs &segs,
                     cudaStream_t s) {
    reduce_partials_impl(part, rows, width, Z, segs, s);
}
void reduce_partials(const float *part, int rows, int width, int Z, const Segs &segs,
                     cudaStream_t s) {
    reduce_partials_impl(part, rows, width, Z, segs, s);
}

void colsum_final(const double *partial, int rows, int width, float *out, cudaStream_t s, int Z,
                  size_t out_stride) {
    Segs g;
    g.add(out, 0, width, out_stride);
    reduce_partials(partial, colsum_chunks(rows), width, Z, g, s);
}

void sum_to(const double *x, size_t n, float *out, double div, double *partial, cudaStream_t s,
            double mul) {
    reduce_f64(x, n, partial, s);
    reduce_final(partial, reduce_blocks(n), out, 0, div, s, mul);
}

void colsum(const float *X, int M, int N, const float *row_scale, float *out, double *partial,
            cudaStream_t s) {
    colsum_partial(X, M, N, row_scale, partial, s);
    colsum_final(partial, M, N, out, s);
}

}  // namespace fh::cuda
