#include "nn.cuh"

#include <cstdint>

#include "common.hpp"
#include "device_math.cuh"

namespace fh::cuda {

namespace {

// z += b, returns SiLU(z): one float, or four.
__device__ __forceinline__ float add_silu(float &z, float b) {
    z = __fadd_rn(z, b);
    return dev_silu(z);
}
__device__ __forceinline__ float4 add_silu(float4 &z, float4 b) {
    z.x = __fadd_rn(z.x, b.x);
    z.y = __fadd_rn(z.y, b.y);
    z.z = __fadd_rn(z.z, b.z);
    z.w = __fadd_rn(z.w, b.w);
    return make_float4(dev_silu(z.x), dev_silu(z.y), dev_silu(z.z), dev_silu(z.w));
}

// Matrix blockIdx.y: n elements (V = float4: four columns each), rows of N, its bias zbias
// elements after the previous one's.
template <class V>
__global__ void k_bias_silu(V *pre, V *act, const V *b, size_t n, int N, size_t zbias) {
    pre += blockIdx.y * n;
    act += blockIdx.y * n;
    b += blockIdx.y * zbias;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        V z = pre[i];
        const V a = add_silu(z, b[i % N]);
        pre[i] = z;
        act[i] = a;
    }
}

}  // namespace

void bias_silu(float *pre, float *act, const float *bias, size_t rows, int cols, cudaStream_t s,
               int Z, size_t zbias) {
    const bool vec = cols % 4 == 0 && zbias % 4 == 0 && (uintptr_t)pre % 16 == 0 &&
                     (uintptr_t)act % 16 == 0 && (uintptr_t)bias % 16 == 0;
    const size_t n = rows * cols;
    if (vec)
        k_bias_silu<float4><<<dim3(grid_for(n / 4, kThreads, 32768), Z), kThreads, 0, s>>>(
            (float4 *)pre, (float4 *)act, (const float4 *)bias, n / 4, cols / 4, zbias / 4);
    else
        k_bias_silu<float><<<dim3(grid_for(n, kThreads, 32768), Z), kThreads, 0, s>>>(
            pre, act, bias, n, cols, zbias);
    FH_LAUNCHED("k_bias_silu");
}

}  // namespace fh::cuda
