// What sm_90's ptxas makes of three float32 -> TF32 conversions: cvt.rna (ties away), cvt.rn
// (ties to even, cuda/mma_tf32.cuh's to_tf32 since 2026-12-06) and the add of half a TF32 ulp,
// each once straight into an mma.sync operand and once into memory. Read with cuobjdump -sass
// (bench/run_device_quick.sh ab-build, AB_PROBE=bench/repro/tf32_cvt.cu). Run (nvcc
// -arch=sm_90a bench/repro/tf32_cvt.cu -o /tmp/tf32_cvt && /tmp/tf32_cvt), it prints the bits
// each conversion stores for a few inputs (cvt.rn's low 13 bits are zero on the H100,
// bench/results/h100-2026-12-06-tf32-operand-trial.txt).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "../../cuda/mma_tf32.cuh"  // mma1: one mma.sync m16n8k8 TF32

__device__ __forceinline__ uint32_t rna(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ uint32_t rn(float x) {
    uint32_t r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ uint32_t half_ulp(float x) { return __float_as_uint(x) + 0x1000u; }

#define PROBE(NAME, F)                                                                      \
    __global__ void NAME##_operand(const float4 *x, float4 *y) {                             \
        const float4 v = x[threadIdx.x];                                                     \
        const uint32_t a[4] = {F(v.x), F(v.y), F(v.z), F(v.w)};                              \
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                               \
        fh::cuda::mma::mma1(c, a[0], a[1], a[2], a[3], a[0], a[1]);                          \
        y[threadIdx.x] = make_float4(c[0], c[1], c[2], c[3]);                                \
    }                                                                                        \
    __global__ void NAME##_memory(const float *x, uint32_t *y) {                             \
        y[threadIdx.x] = F(x[threadIdx.x]);                                                  \
    }

PROBE(cvt_rna, rna)
PROBE(cvt_rn, rn)
PROBE(add_half_ulp, half_ulp)

int main() {
    const float in[8] = {1.0f + 0x1p-11f,  1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f,
                         -1.2345678f,      3.14159265f,         1e-30f,
                         __builtin_inff(), __builtin_nanf("")};
    float *x = nullptr;
    uint32_t *y = nullptr;
    if (cudaMalloc(&x, sizeof in) != cudaSuccess || cudaMalloc(&y, 3 * sizeof in) != cudaSuccess)
        return 1;
    cudaMemcpy(x, in, sizeof in, cudaMemcpyHostToDevice);
    cvt_rna_memory<<<1, 8>>>(x, y);
    cvt_rn_memory<<<1, 8>>>(x, y + 8);
    add_half_ulp_memory<<<1, 8>>>(x, y + 16);
    uint32_t out[24];
    if (cudaMemcpy(out, y, sizeof out, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    printf("%-12s %-10s %-10s %-10s %s\n", "input", "cvt.rna", "cvt.rn", "add", "(bits)");
    for (int i = 0; i < 8; ++i) {
        uint32_t b;
        memcpy(&b, &in[i], 4);
        printf("%08x     %08x   %08x   %08x\n", b, out[i], out[8 + i], out[16 + i]);
    }
    return 0;
}
