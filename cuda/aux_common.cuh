// Shared pieces of the auxiliary learners (cuda/iql.cu, iqn.cu, attention.cu): return-code
// checks, one device allocation per learner, the row-major GEMM layer over cuBLAS, and the
// small kernels every learner uses (bias + SiLU, SiLU' with column sums, fixed-order reduction
// of per-block partials, Adam).
//
// Conventions, shared with the core backend (cuda/kernels.cu):
// - Float expressions that the CPU reference (src/cpu/) evaluates in a given order are written
//   with __fmul_rn / __fadd_rn / __fdiv_rn so that nvcc cannot contract them into FMAs.
// - No atomics. Every reduction over the batch is a fixed grid of blocks, each summing a fixed
//   range of rows in a fixed order into a partial (double where the CPU sums in double), then
//   one fixed-order pass over the partials: the same inputs give the same bits, run to run.
// - enqueue() never allocates, synchronises or copies between host and device; every CUDA and
//   cuBLAS return code is checked and a failure throws fh::Error{FH_ERR_CUDA, "<call> failed:
//   <status> at <file>:<line>"}.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "error.hpp"

namespace fh::cuda::aux {

[[noreturn]] void fail_cuda(cudaError_t e, const char *call, const char *file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t s, const char *call, const char *file, int line);

}  // namespace fh::cuda::aux

#define FH_AUX_CUDA(call)                                                                   \
    do {                                                                                    \
        cudaError_t fh_aux_e_ = (call);                                                     \
        if (fh_aux_e_ != cudaSuccess)                                                       \
            ::fh::cuda::aux::fail_cuda(fh_aux_e_, #call, __FILE__, __LINE__);               \
    } while (0)

#define FH_AUX_BLAS(call)                                                                   \
    do {                                                                                    \
        cublasStatus_t fh_aux_s_ = (call);                                                  \
        if (fh_aux_s_ != CUBLAS_STATUS_SUCCESS)                                             \
            ::fh::cuda::aux::fail_cublas(fh_aux_s_, #call, __FILE__, __LINE__);             \
    } while (0)

// After every <<<...>>> launch (configuration errors surface here, also during capture).
#define FH_AUX_LAUNCHED(name)                                                               \
    do {                                                                                    \
        cudaError_t fh_aux_e_ = cudaGetLastError();                                         \
        if (fh_aux_e_ != cudaSuccess)                                                       \
            ::fh::cuda::aux::fail_cuda(fh_aux_e_, "launch of " name, __FILE__, __LINE__);   \
    } while (0)

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

// ---- GEMM: row-major tensors on column-major cuBLAS --------------------------------------------
// A row-major [r, c] matrix is the column-major [c, r] matrix with leading dimension c. So the
// row-major product C = A·B is computed as the column-major Cᵀ = Bᵀ·Aᵀ, with the operands
// swapped and no data moved; a row-major "transpose this operand" becomes CUBLAS_OP_T on the
// column-major view of the same memory. The three shapes (names as in src/cpu/nn.hpp):
//   nt: C[M, N] = A[M, K] · B[N, K]ᵀ   (y = x Wᵀ)   -> cuBLAS (T, N), m=N n=M k=K, B ld K, A ld K
//   nn: C[M, N] = A[M, K] · B[K, N]    (dx = dy W)  -> cuBLAS (N, N), m=N n=M k=K, B ld N, A ld K
//   tn: C[M, N] = A[K, M]ᵀ · B[K, N]   (dW = dyᵀ x) -> cuBLAS (N, T), m=N n=M k=K, B ld N, A ld M
// C is always column-major [N, M] with ld N, i.e. row-major [M, N].
struct Blas {
    cublasHandle_t handle;
    cublasComputeType_t compute;  // CUBLAS_COMPUTE_32F (strict) or ..._32F_FAST_TF32
};
cublasComputeType_t compute_type(const fh_config &c);

// One GEMM in cuBLAS's own (column-major) terms: C = op(a) · op(b), C [m, n] ld ldc.
struct GemmDesc {
    cublasOperation_t opa, opb;
    int m, n, k;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float *c;
    int ldc;
};
GemmDesc desc_nt(int M, int N, int K, const float *A, const float *B, float *C);
GemmDesc desc_nn(int M, int N, int K, const float *A, const float *B, float *C);
GemmDesc desc_tn(int M, int N, int K, const float *A, const float *B, float *C);

// C = op(a)·op(b) + beta·C on the handle's stream (alpha = 1).
void gemm(const Blas &bl, const GemmDesc &g, float beta, const char *what);
inline void gemm_nt(const Blas &bl, int M, int N, int K, const float *A, const float *B, float *C,
                    float beta, const char *what) {
    gemm(bl, desc_nt(M, N, K, A, B, C), beta, what);
}
inline void gemm_nn(const Blas &bl, int M, int N, int K, const float *A, const float *B, float *C,
                    float beta, const char *what) {
    gemm(bl, desc_nn(M, N, K, A, B, C), beta, what);
}
inline void gemm_tn(const Blas &bl, int M, int N, int K, const float *A, const float *B, float *C,
                    float beta, const char *what) {
    gemm(bl, desc_tn(M, N, K, A, B, C), beta, what);
}

// ---- fixed-order reductions --------------------------------------------------------------------
// Partials are [Z][rows][width] (row = a block's contribution); the final pass sums the rows of
// each column in a fixed order (8 interleaved double accumulators, then those in order) and
// writes out = (float)(sum / div) to the segment that owns the column.
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

// Rows per block of the column-parallel kernels below (their partials have ceil(rows / this)
// rows per z).
constexpr int kColRows = 128;
inline int col_chunks(size_t rows) { return (int)((rows + kColRows - 1) / kColRows); }

// pre[z] += bias[z] (per column), act[z] = SiLU(pre[z]); Z stacked [rows, cols] matrices, the
// biases zbias floats apart.
void bias_silu(float *pre, float *act, const float *bias, size_t rows, int cols, int Z,
               size_t zbias, cudaStream_t s);
// g[z] = g[z] ⊙ SiLU'(pre[z]) in place, and the column sums of the result as partials
// [Z][col_chunks(rows)][cols] doubles.
void dsilu_colsum(float *g, const float *pre, size_t rows, int cols, int Z, double *partial,
                  cudaStream_t s);

// Adam (SPEC §5.6, the CPU's nn.cpp adam with scale 1) on n flat parameters, t = *step + 1
// read on the device; 1 − β^t in float64, rounded to float32.
void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s);

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

// ---- device helpers (src/cpu/nn.hpp, bit for bit where the CPU is float) ------------------------
#if defined(__CUDACC__) || defined(FH_AUX_EMULATION)  // (the host emulation test compiles these too)
__device__ __forceinline__ float dev_sigmoid(float z) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}
__device__ __forceinline__ float dev_silu(float z) { return __fmul_rn(z, dev_sigmoid(z)); }
// SiLU'(z) from its sigmoid s: s (1 + z (1 − s)).
__device__ __forceinline__ float dev_dsilu_s(float z, float s) {
    return __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(z, __fadd_rn(1.0f, -s))));
}
__device__ __forceinline__ float dev_dsilu(float z) { return dev_dsilu_s(z, dev_sigmoid(z)); }
__device__ __forceinline__ float dev_huber(float u, float k) {
    const float a = fabsf(u);
    return a <= k ? __fmul_rn(__fmul_rn(0.5f, u), u)
                  : __fmul_rn(k, __fadd_rn(a, -__fmul_rn(0.5f, k)));
}
__device__ __forceinline__ float dev_dhuber(float u, float k) {
    return fabsf(u) <= k ? u : (u > 0.0f ? k : -k);
}
// Butterfly sums: every lane ends with the same bits (a + b == b + a exactly, level by level).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
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
#endif

}  // namespace fh::cuda::aux
