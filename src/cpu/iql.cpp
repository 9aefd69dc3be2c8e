// SPEC §5.5 step 2: the two IQL value nets (Kostrikov, Nair & Levine 2021, "Offline
// Reinforcement Learning with Implicit Q-Learning", §4): expectile regression of V_τ(s) onto the
// target Q values of the logged actions,
//     L_τ = mean_i L₂^τ(ũ_i),   ũ_i = Q̄sa_i − V_τ(x̃_i),   L₂^τ(u) = |τ − 1(u < 0)| u²,
// with τ = iql_tau_hi for V_hi and iql_tau_lo for V_lo, and the advantage weights of their
// policy-extraction step (advantage-weighted regression), capped:
//     ω_i = min(exp(β (Q̄sa_i − V_hi(x̃_i))), ω_max).
// V: D → Hi → Hi → 1, SiLU on the two hidden layers and a linear output (SPEC §4).
// Forward, loss and backward are below, then the task: both nets, ω, one Adam step (lr_aux).
#include <algorithm>
#include <cmath>
#include <memory>

#include "aux_learners.hpp"

namespace fh::cpu {

void iql_forward(const Dims &d, const IqlOffsets &o, const float *p, const float *x, uint32_t M,
                 IqlCache &c) {
    const size_t MH = (size_t)M * d.Hi;
    c.pre1.resize(MH); c.h1.resize(MH); c.pre2.resize(MH); c.h2.resize(MH); c.v.resize(M);
    linear_silu(M, d.Hi, d.D, x, p + o.W1, p + o.b1, c.pre1.data(), c.h1.data());
    linear_silu(M, d.Hi, d.Hi, c.h1.data(), p + o.W2, p + o.b2, c.pre2.data(), c.h2.data());
    gemm_nt(M, 1, d.Hi, c.h2.data(), p + o.w3, c.v.data());  // V = h2 · w3 + b3
    for (uint32_t i = 0; i < M; ++i) c.v[i] += p[o.b3];
}

double iql_loss_grad(const Dims &d, const IqlOffsets &o, const float *p, const float *x,
                     const float *target, uint32_t M, float tau, float *grad, float *v_out,
                     IqlWork *work, uint64_t rows) {
    const uint64_t n = rows ? rows : M;  // the mean's count
    IqlWork local;
    IqlWork &w = work ? *work : local;
    IqlCache &c = w.c;
    iql_forward(d, o, p, x, M, c);
    if (v_out) std::copy(c.v.begin(), c.v.end(), v_out);

    // Loss and dL/dV_i = −2 |τ − [ũ_i < 0]| ũ_i / n (ũ = target − V, so dũ/dV = −1).
    // ũ = 0 exactly takes the weight τ; its gradient is 0 either way.
    Vec &dv = w.dv;
    dv.resize(M);
    double loss = 0;
    for (uint32_t i = 0; i < M; ++i) {
        const float u = target[i] - c.v[i];
        const float wt = expectile_weight(u, tau);
        loss += (double)(wt * u * u);
        dv[i] = -2.0f * wt * u / (float)n;
    }
    loss /= (double)n;
    if (!grad) return loss;

    const size_t MH = (size_t)M * d.Hi;
    gemm_tn(1, d.Hi, M, dv.data(), c.h2.data(), grad + o.w3);  // dw3 = Σ_i dv_i h2_i
    col_sum(dv.data(), M, 1, grad + o.b3);                       // db3 = Σ_i dv_i
    Vec &dpre2 = w.dpre2, &dpre1 = w.dpre1;
    dpre2.resize(MH);
    dpre1.resize(MH);
    gemm_nn(M, d.Hi, 1, dv.data(), p + o.w3, dpre2.data());      // dh2 = dv ⊗ w3
    silu_backward(dpre2.data(), c.pre2.data(), MH);
    gemm_tn(d.Hi, d.Hi, M, dpre2.data(), c.h1.data(), grad + o.W2);
    col_sum(dpre2.data(), M, d.Hi, grad + o.b2);
    gemm_nn(M, d.Hi, d.Hi, dpre2.data(), p + o.W2, dpre1.data());  // dh1 = dpre2 W2
    silu_backward(dpre1.data(), c.pre1.data(), MH);
    gemm_tn(d.Hi, d.D, M, dpre1.data(), x, grad + o.W1);
    col_sum(dpre1.data(), M, d.Hi, grad + o.b1);
    return loss;
}

float awr_weight(float qbar, float v_hi, float beta, float omega_max) {
    // exp may overflow to +inf for a large advantage; min() then returns the cap, as intended.
    return std::min(std::exp(beta * (qbar - v_hi)), omega_max);
}

void iql(CpuStep &s) {
    const Dims &d = s.d;
    const fh_config &c = s.cfg;
    const IqlOffsets &o = s.L.iql;
    AuxWork &w = aux_work(s);
    float *p = s.buf[BUF_IQL].data();
    // One gradient buffer [hi | lo] mirroring the parameter buffer, so one Adam call serves both
    // nets (Adam is elementwise: the same as two calls).
    Vec &grad = w.iql_grad;
    grad.resize(2 * o.total);
    const float tau[2] = {c.iql_tau_hi, c.iql_tau_lo};
    float *v_out[2] = {s.v_hi.data(), s.v_lo.data()};
    for (int net = 0; net < 2; ++net)
        s.iql_loss[net] = (float)iql_loss_grad(d, o, p + net * o.total, s.x.data(),
                                               s.qbar_sa.data(), d.B, tau[net],
                                               grad.data() + net * o.total, v_out[net],
                                               &w.iql[net], d.Bg);
    // Advantage weights from V_hi before its update (v_hi was computed by the forward above).
    for (uint32_t i = 0; i < d.B; ++i)
        s.omega[i] = awr_weight(s.qbar_sa[i], s.v_hi[i], c.awr_beta, c.awr_max);
    aux_adam(s, BUF_IQL, BUF_IQL_M, BUF_IQL_V, grad);
}

}  // namespace fh::cpu
