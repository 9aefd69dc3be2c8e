// The auxiliary learners' scratch, kept between steps: allocating and faulting in ~1.5 GB of
// buffers every step cost more than half of the aux child's time at the default size. It also
// carries the IQN and attention gradients from their tasks to their Adam steps (after the join).
#include "aux_learners.hpp"

namespace fh::cpu {

AuxWork &aux_work(CpuStep &s) {
    if (!s.aux_work) s.aux_work = std::make_shared<AuxWork>();
    return *s.aux_work;
}

void aux_adam(CpuStep &s, Buf p, Buf m, Buf v, const Vec &grad) {
    const fh_config &c = s.cfg;
    adam(s.buf[p].data(), s.buf[m].data(), s.buf[v].data(), grad.data(), grad.size(), c.lr_aux,
         c.adam_beta1, c.adam_beta2, c.adam_eps, s.step + 1);
}

}  // namespace fh::cpu
