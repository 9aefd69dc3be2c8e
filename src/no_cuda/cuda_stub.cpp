// Built when the library has no CUDA backend: AUTO resolves to the CPU, CUDA is refused.
#include "backend.hpp"
#include "error.hpp"

namespace fh {

bool cuda_available(int) { return false; }

uint64_t cuda_free_bytes(int) { return 0; }

std::unique_ptr<Backend> make_cuda_backend(const fh_config &, const Layout &, HostBuffers) {
    fail(FH_ERR_NO_CUDA, "this build of libfoxhunt has no CUDA backend (built with FOXHUNT_CUDA=OFF "
         "or without nvcc)");
}

}  // namespace fh
