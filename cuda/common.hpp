// Shared pieces of the CUDA backend: return-code checks that throw fh::Error{FH_ERR_CUDA, ...}
// naming the call, the status and file:line; the device-side kernels' small helpers.
//
// Every CUDA runtime and cuBLAS call of cuda/ goes through FH_CUDA or FH_CUBLAS, and every kernel
// launch through FH_LAUNCH (launch.cuh), which checks it, so that an error names its origin and
// never passes silently.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "error.hpp"

namespace fh::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char *call, const char *file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char *call, const char *file, int line);

// Launch geometry of the grid-stride elementwise kernels: kThreads per block, enough blocks
// for n elements, at most `cap`.
constexpr int kThreads = 256;
inline int grid_for(size_t n, int threads = kThreads, int cap = 8192) {
    size_t g = (n + threads - 1) / threads;
    if (g < 1) g = 1;
    return (int)(g < (size_t)cap ? g : (size_t)cap);
}

}  // namespace fh::cuda

#define FH_CUDA(call)                                                                      \
    do {                                                                                   \
        cudaError_t fh_e_ = (call);                                                        \
        if (fh_e_ != cudaSuccess) ::fh::cuda::throw_cuda(fh_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define FH_CUBLAS(call)                                                                        \
    do {                                                                                       \
        cublasStatus_t fh_s_ = (call);                                                         \
        if (fh_s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            ::fh::cuda::throw_cublas(fh_s_, #call, __FILE__, __LINE__);                        \
    } while (0)

namespace fh::cuda {

// The current device's streaming multiprocessors (at least 1), for grids sized to whole waves.
int sm_count();

// Launches `probe`, a kernel void(int *), on one thread of the current device, waits, and
// returns the int it wrote: which code the driver loaded for the probe's module
// (wgmma.cuh's wgmma_probe_kernel). Blocking the first time per device and probe; the answer is
// kept for the process (the loaded code cannot change), so later pipelines launch nothing.
int run_probe(const void *probe);

// Makes `d` the current device for a scope (a pipeline's calls may come from a thread whose
// current device is another), restoring the previous one.
struct DeviceGuard {
    int prev = -1, want;
    explicit DeviceGuard(int d) : want(d) {
        FH_CUDA(cudaGetDevice(&prev));
        if (prev != want) FH_CUDA(cudaSetDevice(want));
    }
    ~DeviceGuard() {
        if (prev >= 0 && prev != want) cudaSetDevice(prev);
    }
};

}  // namespace fh::cuda
