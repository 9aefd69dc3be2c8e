#include "aux_common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace fh::cuda::aux {

namespace {

const char *base_name(const char *file) {
    const char *b = strrchr(file, '/');
    return b ? b + 1 : file;
}

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
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < width) {
        double s = 0.0;
        for (int y = 0; y < kTy; ++y) s += sh[y][threadIdx.x];
        for (int k = 0; k < segs.n; ++k) {
            const Seg &g = segs.s[k];
            if (col >= g.col0 && col < g.col0 + g.len)
                g.dst[(size_t)z * g.zstride + (col - g.col0)] = (float)(s / g.div);
        }
    }
}

// grid (row chunks, column tiles, Z), block (32, 8).
__global__ void k_bias_silu(float *pre, float *act, const float *__restrict__ bias, size_t rows,
                            int cols, size_t zbias) {
    const int col = blockIdx.y * kTx + threadIdx.x, z = blockIdx.z;
    if (col >= cols) return;
    const size_t r0 = (size_t)blockIdx.x * kColRows, r1 = min(rows, r0 + kColRows);
    const size_t zoff = (size_t)z * rows * cols;
    const float b = bias[(size_t)z * zbias + col];
    for (size_t r = r0 + threadIdx.y; r < r1; r += kTy) {
        const size_t i = zoff + r * cols + col;
        const float v = __fadd_rn(pre[i], b);
        pre[i] = v;
        act[i] = dev_silu(v);
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
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        double s = 0.0;
        for (int y = 0; y < kTy; ++y) s += sh[y][threadIdx.x];
        partial[((size_t)z * gridDim.x + blockIdx.x) * cols + col] = s;
    }
}

__global__ void k_adam(float *p, float *m, float *v, const float *__restrict__ g, size_t n,
                       float lr, float beta1, float beta2, float eps, const uint64_t *step) {
    // As src/cpu/nn.cpp adam(): bc = (float)(1 - pow((double)beta, (double)t)), t = step + 1.
    const double t = (double)(*step + 1);
    const float bc1 = (float)(1.0 - pow((double)beta1, t));
    const float bc2 = (float)(1.0 - pow((double)beta2, t));
    const float ob1 = __fadd_rn(1.0f, -beta1), ob2 = __fadd_rn(1.0f, -beta2);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(ob1, gi));
        const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(ob2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        const float num = __fmul_rn(lr, __fdiv_rn(mi, bc1));
        const float den = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, bc2)), eps);
        p[i] = __fadd_rn(p[i], -__fdiv_rn(num, den));
    }
}

template <class T>
void reduce_impl(const T *part, int rows, int width, int Z, const Segs &segs, cudaStream_t s) {
    if (segs.n < 1 || segs.n > kMaxSegs)
        fail(FH_ERR_INTERNAL, "reduce_partials: %d segments", segs.n);
    dim3 grid((width + kTx - 1) / kTx, Z), block(kTx, kTy);
    k_reduce_partials<T><<<grid, block, 0, s>>>(part, rows, width, segs);
    FH_AUX_LAUNCHED("k_reduce_partials");
}

}  // namespace

// ---- errors -----------------------------------------------------------------------------------

void fail_cuda(cudaError_t e, const char *call, const char *file, int line) {
    fail(e == cudaErrorMemoryAllocation ? FH_ERR_OUT_OF_MEMORY : FH_ERR_CUDA,
         "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e), cudaGetErrorString(e),
         base_name(file), line);
}

void fail_cublas(cublasStatus_t s, const char *call, const char *file, int line) {
    fail(s == CUBLAS_STATUS_ALLOC_FAILED ? FH_ERR_OUT_OF_MEMORY : FH_ERR_CUDA,
         "%s failed: %s (%s) at %s:%d", call, cublasGetStatusName(s), cublasGetStatusString(s),
         base_name(file), line);
}

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
        fail_cuda(e, call, __FILE__, __LINE__);
    }
    base_ = (char *)p;
    // Zero once so that no buffer ever holds garbage (every one is written before it is read).
    // At construction, outside any capture; waits for this memset only, not for other work.
    FH_AUX_CUDA(cudaMemsetAsync(base_, 0, size_, 0));
    FH_AUX_CUDA(cudaStreamSynchronize(0));
}

size_t max_smem_optin() {
    int dev = 0, v = 0;
    FH_AUX_CUDA(cudaGetDevice(&dev));
    FH_AUX_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
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
    FH_AUX_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
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

// ---- GEMM -------------------------------------------------------------------------------------

cublasComputeType_t compute_type(const fh_config &c) {
    return c.math_mode == FH_MATH_STRICT ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
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
    const float alpha = 1.0f;
    const cublasStatus_t s =
        cublasGemmEx(bl.handle, g.opa, g.opb, g.m, g.n, g.k, &alpha, g.a, CUDA_R_32F, g.lda, g.b,
                     CUDA_R_32F, g.ldb, &beta, g.c, CUDA_R_32F, g.ldc, bl.compute,
                     CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char call[200];
        snprintf(call, sizeof call, "cublasGemmEx(%s: m=%d n=%d k=%d)", what, g.m, g.n, g.k);
        fail_cublas(s, call, __FILE__, __LINE__);
    }
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

void bias_silu(float *pre, float *act, const float *bias, size_t rows, int cols, int Z,
               size_t zbias, cudaStream_t s) {
    dim3 grid(col_chunks(rows), (cols + kTx - 1) / kTx, Z), block(kTx, kTy);
    k_bias_silu<<<grid, block, 0, s>>>(pre, act, bias, rows, cols, zbias);
    FH_AUX_LAUNCHED("k_bias_silu");
}

void dsilu_colsum(float *g, const float *pre, size_t rows, int cols, int Z, double *partial,
                  cudaStream_t s) {
    dim3 grid(col_chunks(rows), (cols + kTx - 1) / kTx, Z), block(kTx, kTy);
    k_dsilu_colsum<<<grid, block, 0, s>>>(g, pre, rows, cols, partial);
    FH_AUX_LAUNCHED("k_dsilu_colsum");
}

void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s) {
    const int threads = 256;
    const int blocks = (int)std::min<size_t>((n + threads - 1) / threads, 2048);
    k_adam<<<blocks < 1 ? 1 : blocks, threads, 0, s>>>(p, m, v, g, n, lr, beta1, beta2, eps, step);
    FH_AUX_LAUNCHED("k_adam");
}

}  // namespace fh::cuda::aux
