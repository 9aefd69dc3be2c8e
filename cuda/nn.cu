#include "nn.cuh"

#include <cstdint>

#include "common.hpp"
#include "device_math.cuh"

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
    pre += blockIdx.y * n;
    act += blockIdx.y * n;
    b += blockIdx.y * zbias;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        act[i] = add_silu(pre[i], b[i % N]);
    }
}

__global__ void k_adam(float *p, float *m, float *v, const float *g, size_t n, float lr,
                       float beta1, float beta2, float eps, const uint64_t *step,
                       const float *norm, float clip) {
    const double t = (double)(*step + 1);
    const float bc1 = (float)(1.0 - pow((double)beta1, t));
    const float bc2 = (float)(1.0 - pow((double)beta2, t));
    // No epsilon: a zero gradient stays zero (scale 1); g · 1 is g, bit for bit.
    const float scale = norm && *norm > clip ? __fdiv_rn(clip, *norm) : 1.0f;
    const float ob1 = __fadd_rn(1.0f, -beta1), ob2 = __fadd_rn(1.0f, -beta2);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adam_update(p[i], m[i], v[i], __fmul_rn(g[i], scale), lr, beta1, beta2, ob1, ob2, bc1,
                    bc2, eps);
}

}  // namespace

void bias_silu(const float *pre, float *act, const float *bias, size_t rows, int cols,
               cudaStream_t s, int Z, size_t zbias) {
    const bool vec = cols % 4 == 0 && zbias % 4 == 0 && (uintptr_t)pre % 16 == 0 &&
                     (uintptr_t)act % 16 == 0 && (uintptr_t)bias % 16 == 0;
    const size_t n = rows * cols;
    const dim3 grid(grid_for(vec ? n / 4 : n, kThreads, 32768), Z);
    if (vec) {
        k_bias_silu<float4><<<grid, kThreads, 0, s>>>((const float4 *)pre, (float4 *)act,
                                                      (const float4 *)bias, n / 4, cols / 4,
                                                      zbias / 4);
    } else {
        k_bias_silu<float><<<grid, kThreads, 0, s>>>(pre, act, bias, n, cols, zbias);
    }
    FH_LAUNCHED("k_bias_silu");
}

void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s, const float *grad_norm,
          float clip) {
    k_adam<<<grid_for(n), kThreads, 0, s>>>(p, m, v, g, n, lr, beta1, beta2, eps, step, grad_norm,
                                            clip);
    FH_LAUNCHED("k_adam");
}

}  // namespace fh::cuda
