// SPEC §5.4: the regime-weighted Huber TD loss on the branch heads and its backward through
// the branches and the trunk (with the spectral-norm correction of §5.2), plus d_states.
#include <cmath>

#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

void td_loss(CpuStep &s) {
    const Dims &d = s.d;
    const fh_config &c = s.cfg;
    const float *rho = s.buf[BUF_REGIME].data() + d.R;  // from the previous step
    const bool scaled = d.R > 1;                          // with R = 1, rho ≡ 1 (SPEC §5.5.8)
    const float scale = 1.0f / ((float)d.Bg * (float)d.NB);  // mean over W·B rows (SPEC §9)
    double loss = 0, qsum = 0;
    for (uint32_t b = 0; b < d.NB; ++b) s.dz[b].assign((size_t)d.B * d.A, 0.0f);
    for (uint32_t i = 0; i < d.B; ++i) {
        const float w = scaled ? rho[s.batch->regime[i]] : 1.0f;
        for (uint32_t b = 0; b < d.NB; ++b) {
            const size_t ib = (size_t)i * d.NB + b;
            const uint32_t a = (uint32_t)s.batch->action[ib];
            const size_t ia = (size_t)i * d.A + a;
            const float q = s.online.q[b][ia];
            const float delta = q - s.y[ib];
            s.delta[ib] = delta;
            qsum += q;
            loss += (double)w * huber(delta, c.huber_kappa);
            // d_logits_clamp: the clamp passes gradient only strictly inside (−q_clip, q_clip).
            const float z = s.online.z[b][ia];
            const bool inside = z > -c.q_clip && z < c.q_clip;
            s.dz[b][ia] = inside ? w * scale * dhuber(delta, c.huber_kappa) : 0.0f;
        }
    }
    s.td_loss = (float)(loss / ((double)d.Bg * d.NB));
    s.q_mean = (float)(qsum / ((double)d.Bg * d.NB));
}

void backward_branch(CpuStep &s, uint32_t b) {
    const Dims &d = s.d;
    const QOffsets &o = s.L.q;
    const QCache &c = s.online;
    const float *p = s.buf[BUF_Q].data();
    float *g = s.grad.data();
    const float *dz = s.dz[b].data();
    gemm_tn(d.A, d.HB, d.B, dz, c.g[b].data(), g + o.U[b]);  // dU_b = dzᵀ g_b
    col_sum(dz, d.B, d.A, g + o.e[b]);                       // de_b
    Vec dpre((size_t)d.B * d.HB);
    gemm_nn(d.B, d.HB, d.A, dz, p + o.U[b], dpre.data());    // dg_b = dz U_b
    silu_backward(dpre.data(), c.preg[b].data(), dpre.size());
    gemm_tn(d.HB, d.H, d.B, dpre.data(), c.h2.data(), g + o.V[b]);  // dV_b = dpreᵀ h2
    col_sum(dpre.data(), d.B, d.HB, g + o.c[b]);                    // dc_b
    s.dh2_b[b].resize((size_t)d.B * d.H);
    gemm_nn(d.B, d.H, d.HB, dpre.data(), p + o.V[b], s.dh2_b[b].data());  // dh2_b = dpre V_b
}

void backward_trunk(CpuStep &s) {
    const Dims &d = s.d;
    const QOffsets &o = s.L.q;
    const QCache &c = s.online;
    float *g = s.grad.data();
    const size_t BH = (size_t)d.B * d.H;
    Vec dpre2(s.dh2_b[0]);
    for (uint32_t b = 1; b < d.NB; ++b)  // fixed branch order
        for (size_t i = 0; i < BH; ++i) dpre2[i] += s.dh2_b[b][i];
    silu_backward(dpre2.data(), c.pre2.data(), BH);
    gemm_tn(d.H, d.H, d.B, dpre2.data(), c.h1.data(), g + o.W2);  // dW2sn
    col_sum(dpre2.data(), d.B, d.H, g + o.b2);
    Vec dpre1(BH);
    gemm_nn(d.B, d.H, d.H, dpre2.data(), s.w_eff[1].data(), dpre1.data());  // dh1 = dpre2 W2sn
    silu_backward(dpre1.data(), c.pre1.data(), BH);
    gemm_tn(d.H, d.D, d.B, dpre1.data(), c.x, g + o.W1);  // dW1sn
    col_sum(dpre1.data(), d.B, d.H, g + o.b1);
    // Input saliency d_states = dpre1 W1 (W1/σ1 under SN): readable after the step.
    gemm_nn(d.B, d.D, d.H, dpre1.data(), s.w_eff[0].data(), s.buf[BUF_D_STATES].data());
    const float *u = s.buf[BUF_SN_U].data();
    if (d.sn1) sn_backward(g + o.W1, s.w_eff[0].data(), u, s.sn_v[0].data(), d.H, d.D, s.sigma[0]);
    if (d.sn2)
        sn_backward(g + o.W2, s.w_eff[1].data(), u + d.H, s.sn_v[1].data(), d.H, d.H, s.sigma[1]);
}

}  // namespace fh::cpu
