#pragma once
// Host stand-ins for the CUDA built-ins the emulated kernel code uses (tests/warp_emu/README.md):
// a warp is 32 std::threads; shuffles and tensor-core products meet at the warp's barrier.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

struct Dim3 {
    unsigned x, y, z;
};
// The built-ins, one definition for each emulation program.
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 blockDim{32, 1, 1}, gridDim{1, 1, 1};
typedef void *cudaStream_t;

struct alignas(8) float2 {  // CUDA's alignments: a misaligned access fails UBSan here
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
template <class T>
inline T __ldg(const T *p) {
    return *p;
}
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
inline void sincospif(float x, float *s, float *c) {
    *s = (float)std::sin(M_PI * (double)x);
    *c = (float)std::cos(M_PI * (double)x);
}

// One warp: its barrier and the slots its lanes exchange values through.
struct Warp {
    std::barrier<> bar{32};
    double fx[32];
    uint32_t A[32][4], B[32][2];
};
// One warpgroup (4 warps that run together: grid.h's run_grid with together = 4), for the
// warpgroup products' emulation (wgmma_emu.h): its barrier and its threads' A registers.
struct Warpgroup {
    std::barrier<> bar{128};
    uint32_t A[128][4];
};
inline thread_local Warp *gW;         // the calling thread's warp
inline thread_local Warpgroup *gWG;   // and its warpgroup, when warps run together
inline thread_local std::barrier<> *gBlk;  // the whole block's barrier, when all its warps do
inline float4 *gSmem;            // the running block's shared memory (prepare.py's sm4)
inline void __syncwarp(unsigned = 0xffffffffu) { gW->bar.arrive_and_wait(); }
// The running warps' barrier: the harnesses run one warp (or one warpgroup, or the whole block
// for a kernel whose warps share staged data: grid.h's together = its warps) of a block at a
// time (the IQN harness stages the whole block's shared memory before, so that the warps' own
// staging rewrites the same values; outside a warp, in that staging, it is a no-op).
inline void __syncthreads() {
    if (gBlk)
        gBlk->arrive_and_wait();
    else if (gWG)
        gWG->bar.arrive_and_wait();
    else if (gW)
        gW->bar.arrive_and_wait();
}
// Shared-state-space addresses: offsets into the running block's shared memory (the warpgroup
// products' descriptors hold 18 bits of one).
inline uint32_t __cvta_generic_to_shared(const void *p) {
    return (uint32_t)(reinterpret_cast<const char *>(p) - reinterpret_cast<const char *>(gSmem));
}
inline double shfl_from(double v, int src) {
    const int l = threadIdx.x & 31;
    gW->bar.arrive_and_wait();
    gW->fx[l] = v;
    gW->bar.arrive_and_wait();
    const double r = gW->fx[src];
    gW->bar.arrive_and_wait();
    return r;
}
inline float __shfl_xor_sync(unsigned, float v, int o) {
    return (float)shfl_from(v, (threadIdx.x & 31) ^ o);
}
inline double __shfl_xor_sync(unsigned, double v, int o) {
    return shfl_from(v, (threadIdx.x & 31) ^ o);
}
inline float __shfl_down_sync(unsigned, float v, int o) {
    const int l = threadIdx.x & 31;
    return (float)shfl_from(v, l + o < 32 ? l + o : l);
}
inline double __shfl_down_sync(unsigned, double v, int o) {
    const int l = threadIdx.x & 31;
    return shfl_from(v, l + o < 32 ? l + o : l);
}
