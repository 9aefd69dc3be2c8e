// Built when the library has no CUDA backend: AUTO resolves to the CPU, CUDA is refused.
#include "backend.hpp"
#include "error.hpp"
#include "memory_plan.hpp"

namespace fh {

bool cuda_available(int) { return false; }

uint64_t cuda_free_bytes(int) { return 0; }

AttentionSizes cuda_attention_sizes(const fh_config &, const Dims &) {
    fail(FH_ERR_NO_CUDA, "this build of libfoxhunt has no CUDA backend: no CUDA memory plan");
}

std::unique_ptr<Backend> make_cuda_backend(const fh_config &, const Layout &, HostBuffers) {
    fail(FH_ERR_NO_CUDA, "this build of libfoxhunt has no CUDA backend (built with FOXHUNT_CUDA=OFF "
         "or without nvcc)");
}

void nccl_rank_world(void *, int, uint32_t *, uint32_t *) {
    fail(FH_ERR_UNSUPPORTED, "config.nccl_comm is set, but this build of libfoxhunt has no CUDA "
         "backend, so no data-parallel step (SPEC §9)");
}

}  // namespace fh
