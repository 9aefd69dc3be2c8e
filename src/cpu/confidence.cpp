// SPEC §5.5 step 7: the recursive confidence head, trained with the uncertainty Bellman
// equation (O'Donoghue et al. 2018): u(s) ≈ s²(s) + γ²(1 − d) ū(s'), where s² is the ensemble
// variance and ū the target head on the target trunk features of s'. Gradient into w_u, b_u only.
#include <cmath>

#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

void confidence(CpuStep &s) {
    const Dims &d = s.d;
    const QOffsets &o = s.L.q;
    const float gamma = s.cfg.gamma;
    const float *wt = s.buf[BUF_Q_TARGET].data();  // the target head after this step's EMA
    const float *var = s.buf[BUF_ENS_VAR].data();
    float *conf = s.buf[BUF_CONFIDENCE].data();
    float *g = s.grad.data();
    Vec dpre(d.B);
    double loss = 0;
    for (uint32_t i = 0; i < d.B; ++i) {
        const float *h2n = &s.target.h2[((size_t)d.B + i) * d.H];  // h̄2(x~'), before the EMA
        double acc = 0;
        for (uint32_t j = 0; j < d.H; ++j) acc += (double)h2n[j] * wt[o.w_u + j];
        const float ubar = softplus((float)acc + wt[o.b_u]);
        const float t = var[i] + gamma * gamma * (1.0f - s.done[i]) * ubar;
        const float u = s.online.u[i];
        const float e = u - t;
        loss += 0.5 * (double)e * e;
        dpre[i] = e / (float)d.Bg * sigmoid(s.online.pre_u[i]);  // softplus' = sigmoid
        conf[i] = 1.0f / (1.0f + std::sqrt(u));
    }
    s.conf_loss = (float)(loss / d.Bg);
    gemm_tn(1, d.H, d.B, dpre.data(), s.online.h2.data(), g + o.w_u);  // dw_u = Σ_i dpre_i h2_i
    col_sum(dpre.data(), d.B, 1, g + o.b_u);
}

}  // namespace fh::cpu
