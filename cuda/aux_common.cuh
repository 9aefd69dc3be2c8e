// Shared pieces of the auxiliary learners (cuda/iql.cu, iqn.cu, attention.cu): one device
// allocation per learner, shared-memory opt-in, the geometry of warp-per-row kernels, and the
// names the learners use for the backend's shared kernels (the fixed-order reduction of
// per-block partials in reduce.cuh, Adam in nn.cuh). Return-code checks (common.hpp), the GEMM
// layer (gemm.hpp), bias + SiLU and SiLU' with column sums (nn.cuh, reduce.cuh) and the device
// math (device_math.cuh) are the same for the Q net and the learners.
//
// Conventions, shared with the Q net's tasks (cuda_step.hpp):
// - No atomics. Every reduction over the batch is a fixed grid of blocks, each summing a fixed
//   range of rows in a fixed order into a partial (double where the CPU sums in double), then
//   one fixed-order pass over the partials: the same inputs give the same bits, run to run.
// - enqueue() never allocates, synchronises or copies between host and device; every CUDA and
//   cuBLAS return code is checked and a failure throws fh::Error{FH_ERR_CUDA, "<call> failed:
//   <status> at <file>:<line>"}.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "common.hpp"
#include "device_math.cuh"
#include "error.hpp"
#include "gemm.hpp"
#include "learners.hpp"
#include "nn.cuh"
#include "reduce.cuh"

namespace fh::cuda::aux {

// ---- device memory: one cudaMalloc per learner --------------------------------------------------
// Reserve every buffer first (offsets 256-byte aligned), then allocate once, zero-filled.
class Arena {
public:
    Arena() = default;
    Arena(const Arena &) = delete;
    Arena &operator=(const Arena &) = delete;
    ~Arena();
    size_t reserve(size_t bytes);
    template <class T>
    size_t reserve_n(size_t count) { return reserve(count * sizeof(T)); }
    void allocate(const char *what);  // throws FH_ERR_OUT_OF_MEMORY / FH_ERR_CUDA
    template <class T>
    T *at(size_t offset) const { return reinterpret_cast<T *>(base_ + offset); }
    size_t bytes() const { return base_ ? size_ : 0; }

private:
    char *base_ = nullptr;
    size_t size_ = 0;
};

// The largest dynamic shared memory a block of this device may opt into (bytes).
size_t max_smem_optin();
// Lets `kernel` use `bytes` of dynamic shared memory (a no-op up to 48 KiB); throws
// FH_ERR_BAD_DIMENSION naming `what` when the device cannot give that much.
void allow_smem(const void *kernel, size_t bytes, const char *what);
// Throws FH_ERR_INTERNAL ("`what` at p is not 16-byte aligned") unless p is: for kernels that
// load a buffer as float4s.
void require_aligned16(const void *p, const char *what);

// ---- fixed-order reductions (reduce.cuh) ------------------------------------------------------
// Partials are [Z][rows][width] (row = a block's contribution); reduce_partials() sums the rows
// of each column in a fixed order and writes out = (float)(sum / div) to the segment that owns
// the column.
using cuda::reduce_partials;
using cuda::Segs;

// Rows per block of the learners' column-parallel kernels (their partials have
// ceil(rows / this) rows per z).
constexpr int kColRows = 128;
inline int col_chunks(size_t rows) { return (int)((rows + kColRows - 1) / kColRows); }

// Adam with scale 1 (nn.cuh): a learner's one update over its flat parameters (t = *step + 1).
inline void adam(float *p, float *m, float *v, const float *g, size_t n, const AdamHyper &h,
                 const uint64_t *step, cudaStream_t s) {
    cuda::adam(p, m, v, g, n, h.lr, h.beta1, h.beta2, h.eps, step, s);
}

// ---- warp-per-row kernels: block geometry ------------------------------------------------------
// A "row kernel" gives each warp whole rows, and each warp accumulates its column sums in its own
// shared-memory row of `width` doubles; the block then sums those rows in warp order into one
// partial row. warps_for() picks the warps per block so that the accumulators fit.
struct RowPlan {
    int warps;         // per block
    int rows_per_blk;  // rows (or samples) per block: warps * per_warp
    int blocks;
    size_t smem;       // dynamic shared memory bytes
};
RowPlan plan_rows(size_t rows, int width, int per_warp, size_t extra_per_warp_bytes,
                  const char *what);

#ifdef __CUDACC__
// The end of a row kernel: acc is [warps][width] doubles in shared memory (warp w owns row w);
// out[c] = Σ_w acc[w][c] in warp order.
__device__ __forceinline__ void flush_row_acc(const double *acc, int width, double *out) {
    __syncthreads();
    const int nw = blockDim.x >> 5;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        double s = 0.0;
        for (int w = 0; w < nw; ++w) s += acc[(size_t)w * width + c];
        out[c] = s;
    }
}

// Row kernels whose warps keep their column sums in registers (the IQL and attention reward
// heads up to width 128): the lane owns columns j = lane + 32k, k < K.
// pick_lane_cols: the kernel for width w: regs[K - 1] for K = ceil(w / 32) <= 4, else general.
inline const void *pick_lane_cols(int w, const void *const (&regs)[4], const void *general) {
    const int k = (w + 31) / 32;
    return k >= 1 && k <= 4 ? regs[k - 1] : general;
}
// load_lane_cols: those columns of `row` (width w) into v; 0 where j >= w or row is null.
template <int K>
__device__ __forceinline__ void load_lane_cols(const float *row, int w, float (&v)[K]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = row && lane + 32 * k < w ? row[lane + 32 * k] : 0.0f;
}
// flush_lane_cols: the warp's row of acc_all (width 2w + 2) is [a over the lane's columns | b
// over them | s0 | s1] (s0, s1 from lane 0), then flush_row_acc into out.
template <int K>
__device__ __forceinline__ void flush_lane_cols(double *acc_all, int w, const double (&a)[K],
                                                const double (&b)[K], double s0, double s1,
                                                double *out) {
    const int lane = threadIdx.x & 31, W = 2 * w + 2;
    double *acc = acc_all + (size_t)(threadIdx.x >> 5) * W;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int j = lane + 32 * k;
        if (j < w) {
            acc[j] = a[k];
            acc[w + j] = b[k];
        }
    }
    if (lane == 0) {
        acc[2 * w] = s0;
        acc[2 * w + 1] = s1;
    }
    flush_row_acc(acc_all, W, out);
}
#endif

}  // namespace fh::cuda::aux
