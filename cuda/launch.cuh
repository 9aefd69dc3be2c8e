// How every kernel of cuda/ is launched: programmatic dependent launch (PDL, sm_90; CUDA 12.3+
// captures it into graphs as programmatic edges).
//
// Why: a step is ~140 kernels, most of them short, chained on a few lanes. With a plain graph
// edge a kernel is launched only once its predecessor has finished and its writes are flushed;
// with PDL the launch is prepared while the predecessor's last blocks drain, and the kernel waits
// on the device instead (cudaGridDependencySynchronize). On the H200 that took 0.498 → 0.473 ms
// off a step at B = 1024 multi-stream and 0.791 → 0.780 single-stream, 1.617 → 1.604 at
// B = 16384 multi-stream (bench/results/h200-2026-12-03-pdl-before-after.json).
//
// The contract, which every kernel of cuda/ keeps: its first statement is pdl_enter(), which
// waits until every kernel it depends on has completed with its writes visible (a no-op when
// launched without PDL). A kernel that read or wrote global memory before it would race with its
// predecessor. Kernels do not trigger their dependents early
// (cudaTriggerProgrammaticLaunchCompletion): measured side by side, dependents launched at the
// start of their predecessor sat on SM resources that the other lanes' kernels needed, and made
// the default step 2 % slower multi-stream (1.620 → 1.656 ms) while saving 3 to 5 % at B = 1024.
// cuBLAS's and NCCL's kernels are launched by their libraries; the edge after one of them is
// correct either way, because pdl_enter() waits for completion.
#pragma once
#include <utility>

#include "common.hpp"

// The host sets the PDL attribute on every launch, so device code without the wait (compiled for
// an architecture before sm_90, even if JIT-compiled onto a Hopper later) would race: refuse it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "foxhunt's kernels need sm_90 or newer (programmatic dependent launch); set CMAKE_CUDA_ARCHITECTURES to 90 or above"
#endif
#if CUDART_VERSION < 12030
#error "foxhunt's CUDA backend needs CUDA 12.3 or newer (programmatic dependent launch in graphs)"
#endif

namespace fh::cuda {

__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__)
    cudaGridDependencySynchronize();
#endif
}

inline cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     cudaLaunchAttribute *attr) {
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

template <typename... P, typename... A>
cudaError_t launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       A &&...args) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(grid, block, smem, s, &attr);
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

// A kernel chosen at run time (a `const void *` from a table), its arguments as pointers.
inline cudaError_t launch_pdl(const void *kernel, dim3 grid, dim3 block, size_t smem,
                              cudaStream_t s, void **args) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(grid, block, smem, s, &attr);
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

}  // namespace fh::cuda

// Launches `kernel` (parenthesised if its template arguments hold a comma) on `stream` with
// PDL; a launch error throws fh::Error{FH_ERR_CUDA} naming the kernel and file:line.
#define FH_LAUNCH(kernel, grid, block, smem, stream, ...)                                     \
    do {                                                                                      \
        cudaError_t fh_e_ =                                                                   \
            ::fh::cuda::launch_pdl(kernel, grid, block, smem, stream, __VA_ARGS__);           \
        if (fh_e_ != cudaSuccess) ::fh::cuda::throw_cuda(fh_e_, #kernel, __FILE__, __LINE__); \
    } while (0)
