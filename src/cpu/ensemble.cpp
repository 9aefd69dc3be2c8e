// SPEC §5.5 step 6: the value ensemble. Per sample, four estimates of the value of x̃_i, all
// computed before this step's IQL and IQN updates (IQN with the same τ_in as its loss):
//     {Q̄sa_i, V_hi(x̃_i), V_lo(x̃_i), mean_n Z(x̃_i, τ_in)}
// their mean μ_i and population variance s²_i = (1/4) Σ_k (e_k − μ_i)² (divisor 4, not 3).
// s² is the local uncertainty that the confidence head propagates with the uncertainty Bellman
// equation (O'Donoghue et al. 2018; confidence.cpp). ensemble_std = mean_i √s²_i.
// Two-pass in double (mean first, then squared deviations), rounded to float32 once, so a large
// common offset of the four estimates does not cancel catastrophically.
#include <cmath>

#include "aux_learners.hpp"

namespace fh::cpu {

void ensemble(CpuStep &s) {
    const Dims &d = s.d;
    float *mean = s.buf[BUF_ENS_MEAN].data();
    float *var = s.buf[BUF_ENS_VAR].data();
    double std_sum = 0;
    for (uint32_t i = 0; i < d.B; ++i) {
        const double e[4] = {s.qbar_sa[i], s.v_hi[i], s.v_lo[i], s.z_mean[i]};
        const double mu = (e[0] + e[1] + e[2] + e[3]) / 4.0;
        double ss = 0;
        for (double x : e) ss += (x - mu) * (x - mu);
        mean[i] = (float)mu;
        var[i] = (float)(ss / 4.0);
        std_sum += std::sqrt((double)var[i]);  // of the stored (rounded) variance
    }
    s.ensemble_std = (float)(std_sum / d.Bg);
}

}  // namespace fh::cpu
