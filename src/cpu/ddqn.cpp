// SPEC §5.3: double DQN targets (van Hasselt et al. 2016) per branch: the online net picks
// a*_b on s', the target net evaluates it.
#include <cstring>

#include "cpu_step.hpp"

namespace fh::cpu {

void ddqn_online_next(CpuStep &s) {
    const Dims &d = s.d;
    q_forward(d, s.L, s.online_view(), s.xn.data(), d.B, s.next, s.cfg.q_clip);
    for (uint32_t i = 0; i < d.B; ++i)
        for (uint32_t b = 0; b < d.NB; ++b) {
            const float *q = &s.next.q[b][(size_t)i * d.A];
            uint32_t best = 0;  // ties: lowest index
            for (uint32_t a = 1; a < d.A; ++a)
                if (q[a] > q[best]) best = a;
            s.a_star[(size_t)i * d.NB + b] = (int32_t)best;
        }
}

void ddqn_target(CpuStep &s) {
    const Dims &d = s.d;
    const size_t BD = (size_t)d.B * d.D;
    memcpy(s.xx.data(), s.x.data(), BD * sizeof(float));
    memcpy(s.xx.data() + BD, s.xn.data(), BD * sizeof(float));
    q_forward(d, s.L, s.target_view(), s.xx.data(), 2 * d.B, s.target, s.cfg.q_clip);
}

void ddqn_join(CpuStep &s) {
    const Dims &d = s.d;
    const float gamma = s.cfg.gamma;
    for (uint32_t i = 0; i < d.B; ++i) {
        double qsa = 0;
        for (uint32_t b = 0; b < d.NB; ++b) {
            const size_t ib = (size_t)i * d.NB + b;
            // target rows 0..B-1 are x~, rows B..2B-1 are x~'
            const float qn = s.target.q[b][((size_t)d.B + i) * d.A + s.a_star[ib]];
            s.y[ib] = s.r[i] + gamma * (1.0f - s.done[i]) * qn;
            qsa += s.target.q[b][(size_t)i * d.A + s.batch->action[ib]];
        }
        s.qbar_sa[i] = (float)(qsa / d.NB);
    }
}

}  // namespace fh::cpu
