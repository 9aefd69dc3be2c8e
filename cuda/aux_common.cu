#include "aux_common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace fh::cuda::aux {

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

void require_aligned16(const void *p, const char *what) {
    if (reinterpret_cast<uintptr_t>(p) % 16)
        fail(FH_ERR_INTERNAL, "%s at %p is not 16-byte aligned", what, p);
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

}  // namespace fh::cuda::aux

namespace fh::cuda {

const Blas &checked_blas(const Lane &lane, const char *who) {
    cudaStream_t hs = nullptr;
    FH_CUBLAS(cublasGetStream(lane.blas.handle, &hs));
    if (hs != lane.stream)
        fail(FH_ERR_INTERNAL, "%s: the lane's cuBLAS handle is not bound to its stream", who);
    return lane.blas;
}

}  // namespace fh::cuda
