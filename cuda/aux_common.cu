#include "aux_common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace fh::cuda::aux {

namespace {

constexpr int kTx = 32, kTy = 8;  // column-parallel blocks: 32 columns x 8 row lanes

// ---- kernels ----------------------------------------------------------------------------------

template <class T>
__global__ void k_reduce_partials(const T *__restrict__ part, int rows, int width, Segs segs) {
    __shared__ double sh[kTy][kTx + 1];
    const int col = blockIdx.x * kTx + threadIdx.x, z = blockIdx.y;
    const T *p = part + (size_t)z * rows * width;
    double acc = 0.0;
    if (col < width)
        for (int r = threadIdx.y; r < rows; r += kTy) acc += (double)p[(size_t)r * width + col];
    const double s = tile_col_sum(sh, acc);
    if (threadIdx.y == 0 && col < width) {
        for (int k = 0; k < segs.n; ++k) {
            const Seg &g = segs.s[k];
            if (col >= g.col0 && col < g.col0 + g.len)
                g.dst[(size_t)z * g.zstride + (col - g.col0)] = (float)(s / g.div);
        }
    }
}

__global__ void k_dsilu_colsum(float *g, const float *__restrict__ pre, size_t rows, int cols,
                               double *partial) {
    __shared__ double sh[kTy][kTx + 1];
    const int col = blockIdx.y * kTx + threadIdx.x, z = blockIdx.z;
    const size_t r0 = (size_t)blockIdx.x * kColRows, r1 = min(rows, r0 + kColRows);
    const size_t zoff = (size_t)z * rows * cols;
    double acc = 0.0;
    if (col < cols)
        for (size_t r = r0 + threadIdx.y; r < r1; r += kTy) {
            const size_t i = zoff + r * cols + col;
            const float v = __fmul_rn(g[i], dev_dsilu(pre[i]));
            g[i] = v;
            acc += (double)v;
        }
    const double s = tile_col_sum(sh, acc);
    if (threadIdx.y == 0 && col < cols)
        partial[((size_t)z * gridDim.x + blockIdx.x) * cols + col] = s;
}

template <class T>
void reduce_impl(const T *part, int rows, int width, int Z, const Segs &segs, cudaStream_t s) {
    if (segs.n < 1 || segs.n > kMaxSegs)
        fail(FH_ERR_INTERNAL, "reduce_partials: %d segments", segs.n);
    dim3 grid((width + kTx - 1) / kTx, Z), block(kTx, kTy);
    k_reduce_partials<T><<<grid, block, 0, s>>>(part, rows, width, segs);
    FH_LAUNCHED("k_reduce_partials");
}

}  // namespace

// ---- memory -----------------------------------------------------------------------------------

Arena::~Arena() {
    if (base_) cudaFree(base_);  // a destructor cannot report; the pointer came from cudaMalloc
}

size_t Arena::reserve(size_t bytes) {
    if (base_) fail(FH_ERR_INTERNAL, "Arena::reserve after allocate");
    const size_t off = (size_ + 255) & ~(size_t)255;
    size_ = off + bytes;
    return off;
}

void Arena::allocate(const char *what) {
    if (size_ == 0) size_ = 256;
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, size_);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error state of the failed allocation
        char call[160];
        snprintf(call, sizeof call, "cudaMalloc(%zu bytes for %s)", size_, what);
        throw_cuda(e, call, __FILE__, __LINE__);
    }
    base_ = (char *)p;
    // Zero once so that no buffer ever holds garbage (every one is written before it is read).
    // At construction, outside any capture; waits for this memset only, not for other work.
    FH_CUDA(cudaMemsetAsync(base_, 0, size_, 0));
    FH_CUDA(cudaStreamSynchronize(0));
}

size_t max_smem_optin() {
    int dev = 0, v = 0;
    FH_CUDA(cudaGetDevice(&dev));
    FH_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return (size_t)v;
}

void allow_smem(const void *kernel, size_t bytes, const char *what) {
    if (bytes <= 48u * 1024u) return;
    const size_t lim = max_smem_optin();
    if (bytes > lim)
        fail(FH_ERR_BAD_DIMENSION,
             "config: the CUDA %s kernel needs %zu bytes of shared memory per block, more than "
             "this device's %zu (use smaller dimensions or the CPU backend)",
             what, bytes, lim);
    FH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)bytes));
}

RowPlan plan_rows(size_t rows, int width, int per_warp, size_t extra_per_warp_bytes,
                  const char *what) {
    RowPlan p{};
    const size_t per = (size_t)width * sizeof(double) + extra_per_warp_bytes;
    int w = 8;
    while (w > 1 && (size_t)w * per > 48u * 1024u) w /= 2;
    p.warps = w;
    p.rows_per_blk = w * per_warp;
    p.blocks = (int)((rows + p.rows_per_blk - 1) / p.rows_per_blk);
    p.smem = (size_t)w * per;
    if (p.smem > 48u * 1024u && p.smem > max_smem_optin())
        fail(FH_ERR_BAD_DIMENSION,
             "config: the CUDA %s kernel needs %zu bytes of shared memory per block (use "
             "smaller dimensions or the CPU backend)", what, p.smem);
    return p;
}

// ---- launchers --------------------------------------------------------------------------------

void reduce_partials(const double *part, int rows, int width, int Z, const Segs &segs,
                     cudaStream_t s) {
    reduce_impl(part, rows, width, Z, segs, s);
}
void reduce_partials(const float *part, int rows, int width, int Z, const Segs &segs,
                     cudaStream_t s) {
    reduce_impl(part, rows, width, Z, segs, s);
}

void dsilu_colsum(float *g, const float *pre, size_t rows, int cols, int Z, double *partial,
                  cudaStream_t s) {
    dim3 grid(col_chunks(rows), (cols + kTx - 1) / kTx, Z), block(kTx, kTy);
    k_dsilu_colsum<<<grid, block, 0, s>>>(g, pre, rows, cols, partial);
    FH_LAUNCHED("k_dsilu_colsum");
}

}  // namespace fh::cuda::aux
