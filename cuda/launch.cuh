// How every kernel of cuda/ is launched: programmatic dependent launch (PDL, sm_90; CUDA 12.3+
// captures it into graphs as programmatic edges).
//
// Why: a step is ~140 kernels, most of them short, chained on a few lanes. With a plain graph
// edge a kernel's launch starts only after its predecessor has finished and flushed its
// writes; with PDL it is launched while the predecessor's last blocks still run, and it waits on
// the device instead (cudaGridDependencySynchronize), which hides most of the launch latency of
// each edge of the chain.
//
// The contract, which every kernel of cuda/ keeps: its first statement is pdl_enter(). That
// waits until every kernel it depends on has completed with its writes visible (a no-op when
// launched without PDL), and only then lets its own dependents launch, so at most one kernel
// per lane sits waiting on SM resources while its predecessor runs, never a chain of them. A
// kernel that read or wrote global memory before pdl_enter() would race with its
// predecessor. cuBLAS's and NCCL's kernels are launched by their libraries, without PDL; the
// edge after one of them is programmatic only if their kernels trigger it, and correct either
// way because pdl_enter() waits for completion.
#pragma once
#include <utility>

#include "common.hpp"

namespace fh::cuda {

#ifndef FH_PDL_TRIGGER
#define FH_PDL_TRIGGER 1
#endif
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#if FH_PDL_TRIGGER
    cudaTriggerProgrammaticLaunchCompletion();
#endif
#endif
}

// Trial switch (FOXHUNT_PDL=0 launches without the attribute), until the before/after table is
// in bench/results/.
bool pdl_enabled();

inline cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     cudaLaunchAttribute *attr) {
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
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
#define FH_LAUNCH(kernel, grid, block, smem, stream, ...)                           \
    do {                                                                            \
        cudaError_t fh_e_ =                                                         \
            ::fh::cuda::launch_pdl(kernel, grid, block, smem, stream, __VA_ARGS__); \
        if (fh_e_ != cudaSuccess)                                                   \
            ::fh::cuda::throw_cuda(fh_e_, #kernel, __FILE__, __LINE__);             \
    } while (0)
