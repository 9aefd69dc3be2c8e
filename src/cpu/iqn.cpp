// SPEC §5.5 step 3: the implicit quantile network (Dabney, Ostrovski, Silver & Munos 2018,
// "Implicit Quantile Networks for Distributional Reinforcement Learning", §3). Z(x, τ) is the
// τ-quantile of the return; the net is
//     ψ = SiLU(x Wψᵀ + bψ),  φ(τ)_j = SiLU(Σ_{k=0}^{C−1} cos(π k τ) Wφ[j,k] + bφ[j])  (§3.1),
//     m = ψ ⊙ φ(τ),          Z(x, τ) = SiLU(m Wmᵀ + bm) · w_z + b_z,
// (SPEC §4 uses SiLU where the paper uses ReLU), trained with the paper's sampled quantile
// Huber loss (their §3, built on the quantile Huber loss of their §2):
//     T_im = r̃_i + γ (1 − d̃_i) Z̄(x̃'_i, τ'_im),          (target net, after this step's EMA)
//     L = mean_i Σ_{n<N} (1/N') Σ_{m<N'} ρ^κ_{τ_in}(T_im − Z(x̃_i, τ_in)),
//     ρ^κ_τ(u) = |τ − 1(u < 0)| huber_κ(u) / κ.
// τ_in and τ'_im are Philox draws (SPEC §3, purposes 2 and 3). The target is a constant of
// the loss (no gradient into the target net). Forward, loss, backward, then the task.
#include <algorithm>
#include <cmath>

#include "../philox.hpp"
#include "aux_learners.hpp"

namespace fh::cpu {

static constexpr double kPi = 3.14159265358979323846;

void iqn_draw_taus(uint64_t seed, uint64_t step, uint32_t purpose, uint32_t M, uint32_t N,
                   float *tau, uint32_t row0) {
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t n = 0; n < N; ++n)
            tau[(size_t)i * N + n] =
                uniform24(philox(seed, row0 + i, n, (uint32_t)step, purpose).w[0]);
}

void iqn_forward(const Dims &d, const IqnOffsets &o, const float *p, const float *x, uint32_t M,
                 const float *tau, uint32_t N, IqnCache &c) {
    const size_t MN = (size_t)M * N, Hq = d.Hq;
    c.M = M;
    c.N = N;
    c.pre_psi.resize((size_t)M * Hq); c.psi.resize((size_t)M * Hq);
    c.cosf.resize(MN * d.C);
    c.pre_phi.resize(MN * Hq); c.phi.resize(MN * Hq); c.merged.resize(MN * Hq);
    c.pre_h.resize(MN * Hq); c.h.resize(MN * Hq); c.z.resize(MN);

    linear_silu(M, Hq, d.D, x, p + o.Wpsi, p + o.bpsi, c.pre_psi.data(), c.psi.data());
    // Cosine features, k = 0..C−1 (k = 0 is the constant 1, as in the paper's indexing).
    // cos(π k τ) is evaluated in double and rounded once: the most accurate float32 value, so
    // the oracle does not inherit a float32 cosf's error at large k·τ.
    for (size_t r = 0; r < MN; ++r)
        for (uint32_t k = 0; k < d.C; ++k)
            c.cosf[r * d.C + k] = (float)std::cos(kPi * (double)k * (double)tau[r]);
    linear_silu(MN, Hq, d.C, c.cosf.data(), p + o.Wphi, p + o.bphi, c.pre_phi.data(),
                c.phi.data());
    // Merge: row i·N + n of φ is multiplied elementwise by row i of ψ (the state embedding is
    // shared by the N fractions of its transition).
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t n = 0; n < N; ++n) {
            const size_t r = (size_t)i * N + n;
            for (size_t j = 0; j < Hq; ++j)
                c.merged[r * Hq + j] = c.psi[(size_t)i * Hq + j] * c.phi[r * Hq + j];
        }
    linear_silu(MN, Hq, Hq, c.merged.data(), p + o.Wm, p + o.bm, c.pre_h.data(), c.h.data());
    gemm_nt(MN, 1, Hq, c.h.data(), p + o.w_z, c.z.data());  // Z = h · w_z + b_z
    for (size_t r = 0; r < MN; ++r) c.z[r] += p[o.b_z];
}

double iqn_loss_grad(const Dims &d, const IqnOffsets &o, const float *p, const float *x,
                     uint32_t M, const float *tau, const float *T, float kappa, float *grad,
                     float *z_mean, IqnWork *work, uint64_t rows) {
    const uint32_t N = d.N, Nt = d.Nt;
    const size_t MN = (size_t)M * N, Hq = d.Hq;
    IqnWork local;
    IqnWork &w = work ? *work : local;
    IqnCache &c = w.c;
    iqn_forward(d, o, p, x, M, tau, N, c);

    // Loss and dL/dZ_in = −(1/(rows N')) Σ_m ρ'(T_im − Z_in): the TD error u = T − Z falls as Z
    // rises. Terms are float32, sums over m (and the loss over i, n, m) in order in double.
    Vec &dz = w.dz;
    dz.resize(MN);
    double loss = 0;
    const double scale = 1.0 / ((double)(rows ? rows : M) * Nt);
    for (uint32_t i = 0; i < M; ++i) {
        double zsum = 0;
        for (uint32_t n = 0; n < N; ++n) {
            const size_t r = (size_t)i * N + n;
            const float zin = c.z[r], t = tau[r];
            zsum += zin;
            double dsum = 0;
            for (uint32_t m = 0; m < Nt; ++m) {
                const float u = T[(size_t)i * Nt + m] - zin;
                loss += (double)quantile_huber(u, t, kappa);
                dsum += (double)dquantile_huber(u, t, kappa);
            }
            dz[r] = (float)(-dsum * scale);
        }
        if (z_mean) z_mean[i] = (float)(zsum / N);
    }
    loss *= scale;
    if (!grad) return loss;

    // Head: Z = h · w_z + b_z.
    gemm_tn(1, Hq, MN, dz.data(), c.h.data(), grad + o.w_z);
    col_sum(dz.data(), MN, 1, grad + o.b_z);
    Vec &dpre_h = w.dpre_h;
    dpre_h.resize(MN * Hq);
    gemm_nn(MN, Hq, 1, dz.data(), p + o.w_z, dpre_h.data());  // dh = dZ ⊗ w_z
    silu_backward(dpre_h.data(), c.pre_h.data(), dpre_h.size());
    // Merge layer: h = SiLU(m Wmᵀ + bm).
    gemm_tn(Hq, Hq, MN, dpre_h.data(), c.merged.data(), grad + o.Wm);
    col_sum(dpre_h.data(), MN, Hq, grad + o.bm);
    Vec &dm = w.dm;
    dm.resize(MN * Hq);
    gemm_nn(MN, Hq, Hq, dpre_h.data(), p + o.Wm, dm.data());
    // m = ψ_i ⊙ φ_in: dφ_in = dm_in ⊙ ψ_i; dψ_i = Σ_n dm_in ⊙ φ_in (n in order, in double).
    Vec &dpre_phi = w.dpre_phi, &dpre_psi = w.dpre_psi;
    dpre_phi.resize(MN * Hq);
    dpre_psi.resize((size_t)M * Hq);
    for (uint32_t i = 0; i < M; ++i)
        for (size_t j = 0; j < Hq; ++j) {
            double acc = 0;
            for (uint32_t n = 0; n < N; ++n) {
                const size_t rj = ((size_t)i * N + n) * Hq + j;
                dpre_phi[rj] = dm[rj] * c.psi[(size_t)i * Hq + j];
                acc += (double)dm[rj] * c.phi[rj];
            }
            dpre_psi[(size_t)i * Hq + j] = (float)acc;
        }
    // φ = SiLU(cosf Wφᵀ + bφ) and ψ = SiLU(x Wψᵀ + bψ).
    silu_backward(dpre_phi.data(), c.pre_phi.data(), dpre_phi.size());
    gemm_tn(Hq, d.C, MN, dpre_phi.data(), c.cosf.data(), grad + o.Wphi);
    col_sum(dpre_phi.data(), MN, Hq, grad + o.bphi);
    silu_backward(dpre_psi.data(), c.pre_psi.data(), dpre_psi.size());
    gemm_tn(Hq, d.D, M, dpre_psi.data(), x, grad + o.Wpsi);
    col_sum(dpre_psi.data(), M, Hq, grad + o.bpsi);
    return loss;
}

void iqn(CpuStep &s) {
    const Dims &d = s.d;
    const fh_config &c = s.cfg;
    const IqnOffsets &o = s.L.iqn;
    AuxWork &w = aux_work(s);
    Vec &tau = w.iqn_tau, &tau_t = w.iqn_tau_t, &T = w.iqn_T, &grad = w.iqn_grad;
    tau.resize((size_t)d.B * d.N);
    tau_t.resize((size_t)d.B * d.Nt);
    T.resize((size_t)d.B * d.Nt);
    grad.resize(o.total);
    iqn_draw_taus(c.seed, s.step, PURPOSE_IQN_ONLINE, d.B, d.N, tau.data(), d.row0);
    iqn_draw_taus(c.seed, s.step, PURPOSE_IQN_TARGET, d.B, d.Nt, tau_t.data(), d.row0);

    // Targets from the target net (already EMA-updated this step) on x̃'; written the same way
    // as ddqn_join's y so the two bootstraps round alike.
    IqnCache &tc = w.iqn_target;
    iqn_forward(d, o, s.buf[BUF_IQN_TARGET].data(), s.xn.data(), d.B, tau_t.data(), d.Nt, tc);
    for (uint32_t i = 0; i < d.B; ++i)
        for (uint32_t m = 0; m < d.Nt; ++m) {
            const size_t im = (size_t)i * d.Nt + m;
            T[im] = s.r[i] + c.gamma * (1.0f - s.done[i]) * tc.z[im];
        }

    s.iqn_loss = (float)iqn_loss_grad(d, o, s.buf[BUF_IQN].data(), s.x.data(), d.B, tau.data(),
                                      T.data(), c.huber_kappa, grad.data(), s.z_mean.data(),
                                      &w.iqn, d.Bg);
}

void iqn_adam(CpuStep &s) { aux_adam(s, BUF_IQN, BUF_IQN_M, BUF_IQN_V, aux_work(s).iqn_grad); }

}  // namespace fh::cpu
