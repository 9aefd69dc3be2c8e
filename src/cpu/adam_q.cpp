// SPEC §5.6: global-norm clipping of the Q-net gradient (TD + CQL + confidence), then Adam.
#include <cmath>

#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

void adam_q(CpuStep &s) {
    const fh_config &c = s.cfg;
    const size_t n = s.L.q.total;
    const float norm = (float)std::sqrt(sum_squares(s.grad.data(), n));
    s.grad_norm = norm;
    // No epsilon: a zero gradient stays zero (scale 1).
    const float scale = norm > c.clip_norm ? c.clip_norm / norm : 1.0f;
    adam(s.buf[BUF_Q].data(), s.buf[BUF_Q_M].data(), s.buf[BUF_Q_V].data(), s.grad.data(), n,
         c.lr_q, c.adam_beta1, c.adam_beta2, c.adam_eps, s.step + 1, scale);
}

}  // namespace fh::cpu
