// SPEC §5.5 step 8: per-regime loss scaling. Each regime keeps an EMA s_k of its mean squared
// TD error; rho_k = clamp(sqrt(mean_k s_k / (s_k + 1e-8)), min, max) weights the next step's TD
// loss, so regimes with small errors are not drowned by volatile ones.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_step.hpp"

namespace fh::cpu {

void regime_scale(CpuStep &s) {
    const Dims &d = s.d;
    const fh_config &c = s.cfg;
    float *sk = s.buf[BUF_REGIME].data();
    float *rho = sk + d.R;
    std::vector<double> sum(d.R, 0.0);
    std::vector<uint32_t> count(d.R, 0);
    for (uint32_t i = 0; i < d.B; ++i) {
        double e = 0;
        for (uint32_t b = 0; b < d.NB; ++b) {
            const float delta = s.delta[(size_t)i * d.NB + b];
            e += (double)delta * delta;
        }
        const int32_t z = s.batch->regime[i];
        sum[z] += e / d.NB;
        ++count[z];
    }
    for (uint32_t k = 0; k < d.R; ++k)
        if (count[k] > 0) {
            const float m = (float)(sum[k] / count[k]);
            sk[k] = c.regime_beta * sk[k] + (1.0f - c.regime_beta) * m;
        }
    double mean = 0;
    for (uint32_t k = 0; k < d.R; ++k) mean += sk[k];
    const float sbar = (float)(mean / d.R);
    for (uint32_t k = 0; k < d.R; ++k)
        rho[k] = std::min(std::max(std::sqrt(sbar / (sk[k] + 1e-8f)), c.regime_min), c.regime_max);
}

}  // namespace fh::cpu
