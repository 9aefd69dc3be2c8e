// SPEC §5.5 step 1: Polyak averaging of the target nets, θ̄ ← τθ + (1−τ)θ̄, for the Q net
// (confidence head included) and the IQN net, with the online weights before this step's Adam.
#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

void ema_targets(CpuStep &s) {
    const float tau = s.cfg.ema_tau;
    polyak(s.buf[BUF_Q_TARGET].data(), s.buf[BUF_Q].data(), s.L.q.total, tau);
    polyak(s.buf[BUF_IQN_TARGET].data(), s.buf[BUF_IQN].data(), s.L.iqn.total, tau);
}

}  // namespace fh::cpu
