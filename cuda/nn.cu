#include "nn.cuh"

#include <cstdint>

#include "common.hpp"
#include "device_math.cuh"
#include "reduce.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// SiLU(z + b): one float, or four.
__device__ __forceinline__ float add_silu(float z, float b) { return dev_silu(__fadd_rn(z, b)); }
__device__ __forceinline__ float4 add_silu(float4 z, float4 b) {
    z.x = __fadd_rn(z.x, b.x);
    z.y = __fadd_rn(z.y, b.y);
    z.z = __fadd_rn(z.z, b.z);
    z.w = __fadd_rn(z.w, b.w);
    return make_float4(dev_silu(z.x), dev_silu(z.y), dev_silu(z.z), dev_silu(z.w));
}

// Matrix blockIdx.y: n elements (V = float4: four columns each), rows of N, its bias zbias
// elements after the previous one's.
template <class V>
__global__ void k_bias_silu(const V *pre, V *act, const V *b, size_t n, int N, size_t zbias) {
    pdl_enter();
    pre += blockIdx.y * n;
    act += blockIdx.y * n;
    b += blockIdx.y * zbias;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        act[i] = add_silu(pre[i], b[i % N]);
    }
}

// kPartials: ‖g‖ summed here from norm's partials (the clipped adam()), else no clipping. At
// most 32 registers (8 blocks of kThreads per SM): the Q net's 918 blocks then run in one wave;
// with 39 the folded kernel ran in two (its chain 8.7 µs against 7.5 µs, H200).
template <bool kPartials>
__global__ void __launch_bounds__(kThreads, 8)
    k_adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
           float beta2, float eps, const uint64_t *step, NormPartials norm, float clip) {
    pdl_enter();
    // 1 − β^t in double, the same for every thread. Clipped, threads 0 and 32 compute it while
    // the norm's partials are summed and share it, instead of every thread waiting for its two
    // pows: reduce partials + Adam + step += 1 in a graph at n = 234,000 on the H200, 11.2 µs
    // with the pows per thread, 7.5 µs shared (the chain with a separate reduce_final: 11.7 µs).
    __shared__ float bc_sh[2];
    float bc1, bc2;
    if constexpr (kPartials) {
        if (threadIdx.x == 0) bc_sh[0] = (float)(1.0 - pow((double)beta1, (double)(*step + 1)));
        if (threadIdx.x == 32) bc_sh[1] = (float)(1.0 - pow((double)beta2, (double)(*step + 1)));
    } else {
        const double t = (double)(*step + 1);
        bc1 = (float)(1.0 - pow((double)beta1, t));
        bc2 = (float)(1.0 - pow((double)beta2, t));
    }
    const float ob1 = __fadd_rn(1.0f, -beta1), ob2 = __fadd_rn(1.0f, -beta2);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    // The first element's loads need no scale: they go out before the norm's sum and barriers.
    float pi = 0.0f, mi = 0.0f, vi = 0.0f, gi = 0.0f;
    if (i < n) {
        pi = p[i];
        mi = m[i];
        vi = v[i];
        gi = g[i];
    }
    // No epsilon: a zero gradient stays zero (scale 1); g · 1 is g, bit for bit.
    float scale = 1.0f;
    if constexpr (kPartials) {
        // reduce_final's (float)sqrt(Σ) in its order: the same float on every block.
        __shared__ double sh[kThreads + 1];
        const float nrm =
            (float)sqrt(wide_block_sum<kRedFinalThreads, kThreads>(norm.partial, norm.nb, sh));
        if (blockIdx.x == 0 && threadIdx.x == 0) *norm.out = nrm;
        scale = nrm > clip ? __fdiv_rn(clip, nrm) : 1.0f;
        bc1 = bc_sh[0];  // written before the sum's barriers
        bc2 = bc_sh[1];
    }
    for (; i < n; i += stride) {
        adam_update(pi, mi, vi, __fmul_rn(gi, scale), lr, beta1, beta2, ob1, ob2, bc1, bc2, eps);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        const size_t j = i + stride;
        if (j < n) {
            pi = p[j];
            mi = m[j];
            vi = v[j];
            gi = g[j];
        }
    }
}

}  // namespace

void bias_silu(const float *pre, float *act, const float *bias, size_t rows, int cols,
               cudaStream_t s, int Z, size_t zbias) {
    const bool vec = cols % 4 == 0 && zbias % 4 == 0 && (uintptr_t)pre % 16 == 0 &&
                     (uintptr_t)act % 16 == 0 && (uintptr_t)bias % 16 == 0;
    const size_t n = rows * cols;
    const dim3 grid(grid_for(vec ? n / 4 : n, kThreads, 32768), Z);
    if (vec) {
        FH_LAUNCH(k_bias_silu<float4>, grid, kThreads, 0, s, (const float4 *)pre, (float4 *)act,
                  (const float4 *)bias, n / 4, cols / 4, zbias / 4);
    } else {
        FH_LAUNCH(k_bias_silu<float>, grid, kThreads, 0, s, pre, act, bias, n, cols, zbias);
    }
}

void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s) {
    FH_LAUNCH(k_adam<false>, grid_for(n), kThreads, 0, s, p, m, v, g, n, lr, beta1, beta2, eps,
              step, NormPartials{}, 0.0f);
}

void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s, const NormPartials &norm,
          float clip) {
    if (norm.nb < 1 || norm.nb > kRedFinalThreads)
        fail(FH_ERR_INTERNAL, "adam: %d norm partials", norm.nb);
    FH_LAUNCH(k_adam<true>, grid_for(n), kThreads, 0, s, p, m, v, g, n, lr, beta1, beta2, eps, step,
              norm, clip);
}

}  // namespace fh::cuda
