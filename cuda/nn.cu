#include "nn.cuh"

#include <cstdint>

#include "common.hpp"
#include "device_math.cuh"

namespace fh::cuda {

namespace {

__global__ void k_bias_silu(float *pre, float *act, const float *b, int M, int N) {
    const size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float z = __fadd_rn(pre[i], b[i % N]);
        pre[i] = z;
        act[i] = dev_silu(z);
    }
}

__global__ void k_bias_silu4(float4 *pre, float4 *act, const float4 *b, int M, int N4) {
    const size_t n = (size_t)M * N4;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 z = pre[i];
        const float4 bb = b[i % N4];
        z.x = __fadd_rn(z.x, bb.x);
        z.y = __fadd_rn(z.y, bb.y);
        z.z = __fadd_rn(z.z, bb.z);
        z.w = __fadd_rn(z.w, bb.w);
        pre[i] = z;
        act[i] = make_float4(dev_silu(z.x), dev_silu(z.y), dev_silu(z.z), dev_silu(z.w));
    }
}

}  // namespace

void bias_silu(float *pre, float *act, const float *b, int M, int N, cudaStream_t s) {
    const bool vec = N % 4 == 0 && ((uintptr_t)pre % 16 == 0) && ((uintptr_t)act % 16 == 0) &&
                     ((uintptr_t)b % 16 == 0);
    if (vec) {
        const size_t n4 = (size_t)M * (N / 4);
        k_bias_silu4<<<grid_for(n4, kThreads, 32768), kThreads, 0, s>>>(
            (float4 *)pre, (float4 *)act, (const float4 *)b, M, N / 4);
    } else {
        k_bias_silu<<<grid_for((size_t)M * N, kThreads, 32768), kThreads, 0, s>>>(pre, act, b,
                                                                                    M, N);
    }
    FH_LAUNCHED("k_bias_silu");
}

}  // namespace fh::cuda
