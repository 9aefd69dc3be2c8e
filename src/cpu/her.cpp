// SPEC §5.1: hindsight experience replay (Andrychowicz et al. 2017) with the goal chosen by the
// caller (her_goal, a future achieved goal of the episode), relabelled with probability
// her_ratio by a Philox draw (purpose 1) so both backends relabel the same transitions.
#include <cmath>
#include <cstring>

#include "../philox.hpp"
#include "cpu_step.hpp"

namespace fh::cpu {

void her_relabel(CpuStep &s) {
    const Dims &d = s.d;
    const HostBatch &b = *s.batch;
    const fh_config &c = s.cfg;
    s.relabelled = 0;
    for (uint32_t i = 0; i < d.B; ++i) {
        float *x = &s.x[(size_t)i * d.D];
        float *xn = &s.xn[(size_t)i * d.D];
        memcpy(x, &b.obs[(size_t)i * d.O], d.O * sizeof(float));
        memcpy(xn, &b.next_obs[(size_t)i * d.O], d.O * sizeof(float));
        s.r[i] = b.reward[i];
        s.done[i] = b.done[i] ? 1.0f : 0.0f;
        if (d.G == 0) continue;

        const float u =
            uniform24(philox(c.seed, d.row0 + i, 0, (uint32_t)s.step, PURPOSE_HER).w[0]);
        const bool relabel = u < c.her_ratio;
        const float *g = relabel ? &b.her_goal[(size_t)i * d.G] : &b.goal[(size_t)i * d.G];
        memcpy(x + d.O, g, d.G * sizeof(float));
        memcpy(xn + d.O, g, d.G * sizeof(float));
        if (!relabel) continue;

        ++s.relabelled;
        const float *ag = &b.next_achieved_goal[(size_t)i * d.G];
        double ss = 0;
        for (uint32_t j = 0; j < d.G; ++j) ss += (double)(ag[j] - g[j]) * (ag[j] - g[j]);
        const float dist = (float)std::sqrt(ss);
        const bool reached = dist <= c.her_epsilon;
        if (c.her_reward == FH_HER_REWARD_SPARSE) {
            s.r[i] = reached ? 0.0f : -1.0f;
            if (reached && c.her_terminal_on_success) s.done[i] = 1.0f;
        } else {
            s.r[i] = -dist;
        }
    }
}

}  // namespace fh::cpu
