// The auxiliary learners' scratch, kept between steps: allocating and faulting in ~1.5 GB of
// buffers every step cost more than half of the aux child's time at the default size.
#include "aux_learners.hpp"

namespace fh::cpu {

AuxWork &aux_work(CpuStep &s) {
    if (!s.aux_work) s.aux_work = std::make_shared<AuxWork>();
    return *s.aux_work;
}

}  // namespace fh::cpu
