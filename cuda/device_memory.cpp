// Free device memory, for the check fh_pipeline_create() makes before allocating
// (src/memory_plan.hpp).
#include <cuda_runtime.h>

#include "backend.hpp"
#include "common.hpp"

namespace fh {

uint64_t cuda_free_bytes(int device) {
    int prev = -1;
    FH_CUDA(cudaGetDevice(&prev));
    if (prev != device) FH_CUDA(cudaSetDevice(device));
    size_t free_b = 0, total_b = 0;
    const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (prev != device) cudaSetDevice(prev);
    FH_CUDA(e);
    return free_b;
}

}  // namespace fh
