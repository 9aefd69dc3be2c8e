// What fh_memory_plan() and fh_pipeline_create() ask of a CUDA device before anything is
// allocated (src/memory_plan.hpp): its free memory, and the attention learner's sizes that
// follow the device's occupancy.
#include <cuda_runtime.h>

#include "backend.hpp"
#include "common.hpp"
#include "learners.hpp"
#include "memory_plan.hpp"

namespace fh {

uint64_t cuda_free_bytes(int device) {
    cuda::DeviceGuard on(device);
    size_t free_b = 0, total_b = 0;
    FH_CUDA(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

AttentionSizes cuda_attention_sizes(const fh_config &c, const Dims &d) {
    cuda::DeviceGuard on(c.device);
    size_t rows = 0, scratch = 0;
    cuda::AttentionLearner::path_sizes(d, c, &rows, &scratch);
    return AttentionSizes{rows, scratch};
}

}  // namespace fh
