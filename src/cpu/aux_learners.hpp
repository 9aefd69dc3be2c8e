// The auxiliary learners of SPEC §5.5 factored for testing: each learner's forward and
// loss + gradient is a pure function of its flat parameter buffer (no Adam, no CpuStep), so the
// tests can check every gradient against finite differences. The CpuStep tasks in iql.cpp,
// iqn.cpp, attention.cpp, cql.cpp and ensemble.cpp are thin wrappers: gather the inputs, call
// these, apply Adam (IQN's and attention's in iqn_adam and attention_adam, after the join). (Not named aux.hpp: AUX is a reserved file name on Windows.)
//
// The losses are means over `rows` rows (the last argument): the rows of the whole step, W·B
// (Dims::Bg, SPEC §9), of which the call sees M; 0, the default, means M. The CPU backend is
// one rank, so its tasks' M = B = Bg; tests/test_data_parallel_cpu.cpp runs them as two.
//
// Scratch: each loss+gradient function takes an optional *Work struct holding its temporaries.
// The tasks pass the ones kept in CpuStep::aux_work, so the large [B·…] buffers are allocated
// once and reused every step (allocating and page-faulting them anew each step was more than
// half of the aux child's CPU time); with nullptr a function uses a local one. Every buffer is
// fully overwritten before it is read, so reuse cannot carry values from one call to the next.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "../config.hpp"
#include "../layout.hpp"
#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

// ---- Scalar losses (shared by the learners and their tests) --------------------------------

// Expectile loss L₂^τ(u) = |τ − [u < 0]| u² (Kostrikov et al. 2021, §4).
inline float expectile_weight(float u, float tau) { return u < 0.0f ? 1.0f - tau : tau; }
inline float expectile_loss(float u, float tau) { return expectile_weight(u, tau) * u * u; }

// Quantile Huber loss ρ^κ_τ(u) = |τ − [u < 0]| huber_κ(u) / κ (Dabney et al. 2018, §2–3).
inline float quantile_weight(float u, float tau) { return std::fabs(tau - (u < 0.0f ? 1.0f : 0.0f)); }
inline float quantile_huber(float u, float tau, float kappa) {
    return quantile_weight(u, tau) * huber(u, kappa) / kappa;
}
// dρ/du (the derivative of the loss w.r.t. the TD error u, not w.r.t. Z).
inline float dquantile_huber(float u, float tau, float kappa) {
    return quantile_weight(u, tau) * dhuber(u, kappa) / kappa;
}

// ---- IQL value nets (iql.cpp) ---------------------------------------------------------------

// Forward caches of one value net V: D → Hi → Hi → 1 (SiLU hidden layers, linear output).
struct IqlCache {
    Vec pre1, h1, pre2, h2;  // [M, Hi]
    Vec v;                   // [M]
};

// V(x) for M rows; p points at one net (hi: buf[BUF_IQL], lo: buf[BUF_IQL] + L.iql.total).
void iql_forward(const Dims &d, const IqlOffsets &o, const float *p, const float *x, uint32_t M,
                 IqlCache &c);

struct IqlWork {
    IqlCache c;
    Vec dv, dpre1, dpre2;
};

// L_τ = mean_i L₂^τ(target_i − V(x_i)) as double (terms in float32, summed in order in
// double). If grad is not null, dL/dp is written to grad[0 .. o.total) (overwritten). If v_out
// is not null, V(x) [M] is written there.
double iql_loss_grad(const Dims &d, const IqlOffsets &o, const float *p, const float *x,
                     const float *target, uint32_t M, float tau, float *grad, float *v_out,
                     IqlWork *work = nullptr, uint64_t rows = 0);

// ω_i = min(exp(β (Q̄sa_i − V_hi(x_i))), ω_max)
float awr_weight(float qbar, float v_hi, float beta, float omega_max);

// ---- IQN (iqn.cpp) ------------------------------------------------------------------------

// Forward caches of the IQN net on M rows × N quantile fractions (row r = i·N + n).
struct IqnCache {
    uint32_t M = 0, N = 0;
    Vec pre_psi, psi;  // [M, Hq]      ψ = SiLU(x Wψᵀ + bψ)
    Vec cosf;          // [M·N, C]     cos(π k τ), k = 0..C−1
    Vec pre_phi, phi;  // [M·N, Hq]    φ = SiLU(cosf Wφᵀ + bφ)
    Vec merged;        // [M·N, Hq]    ψ_i ⊙ φ_in
    Vec pre_h, h;      // [M·N, Hq]    SiLU(merged Wmᵀ + bm)
    Vec z;             // [M·N]        Z = h · w_z + b_z
};

// τ for M rows × N samples of one purpose (PURPOSE_IQN_ONLINE or PURPOSE_IQN_TARGET):
// tau[i·N + n] = uniform24(philox(seed, row0 + i, n, (uint32_t)step, purpose).w[0]) (row0:
// the first row's global index, SPEC §9).
void iqn_draw_taus(uint64_t seed, uint64_t step, uint32_t purpose, uint32_t M, uint32_t N,
                   float *tau, uint32_t row0 = 0);

// Z(x_i, τ_in) for tau [M, N]; the result is c.z [M·N].
void iqn_forward(const Dims &d, const IqnOffsets &o, const float *p, const float *x, uint32_t M,
                 const float *tau, uint32_t N, IqnCache &c);

struct IqnWork {
    IqnCache c;
    Vec dz, dpre_h, dm, dpre_phi, dpre_psi;
};

// L = mean_i Σ_n (1/N') Σ_m ρ^κ_{τ_in}(T_im − Z(x_i, τ_in)) as double, for tau [M, d.N] and the
// (constant) targets T [M, d.Nt]. grad (if not null) is overwritten with dL/dp [o.total];
// z_mean (if not null) gets mean_n Z(x_i, τ_in) [M].
double iqn_loss_grad(const Dims &d, const IqnOffsets &o, const float *p, const float *x,
                     uint32_t M, const float *tau, const float *T, float kappa, float *grad,
                     float *z_mean, IqnWork *work = nullptr, uint64_t rows = 0);

// ---- Attention reward model (attention.cpp) ----------------------------------------------

// Forward caches over M samples; token rows are sample-major (row i·T + t of [M·T, d]).
struct AttnCache {
    Vec tok;         // [M·T_o, td] the obs tokens, gathered
    Vec goal;        // [M, G]
    Vec eo, eg;      // [M·T_o, d], [M, d] tok Wtᵀ and g̃ Wgᵀ
    Vec E;           // [M·T, d] token embeddings e
    Vec Q, K, V;     // [M·T, d]
    Vec attn;        // [M·T, d] concatenated head outputs
    Vec proj;        // [M·T, d] attn Woᵀ + bo
    Vec pool;        // [M, d]
    Vec pre_r, hr;   // [M, hh]
    Vec rhat;        // [M]
};
struct AttnWork {
    AttnCache c;
    Vec dr, dpre_r, dpool, de2, dattn, dQ, dK, dV, dE, dEo, dEg;
};

// L = mean_i (r̂(x_i) − r_i)² as double; grad (if not null) overwritten with dL/dp
// [o.total]; rhat (if not null) gets r̂ [M].
double attn_loss_grad(const Dims &d, const AttnOffsets &o, const float *p, const float *x,
                      const float *r, uint32_t M, float *grad, float *rhat,
                      AttnWork *work = nullptr, uint64_t rows = 0);

// ---- CQL (cql.cpp) ------------------------------------------------------------------------

// L_cql = α (1/(rows·NB)) Σ_i ω_i Σ_b [logsumexp_a q_b(x_i) − q_b(x_i)[a_ib]] on the clamped q
// of the cache c (its c.M rows; rows = 0 means c.M), as double. If grad (a flat Q-net gradient,
// layout q offsets) is not null, the gradient w.r.t. U_b and e_b is ADDED to its U_b, e_b
// slices, branch by branch.
double cql_loss_grad(const Dims &d, const QOffsets &o, const QCache &c, const int32_t *action,
                     const float *omega, float alpha, float q_clip, float *grad,
                     uint64_t rows = 0);

// log Σ_a exp(q_a) of n values, stable for large q (the maximum is subtracted first).
double logsumexp(const float *q, uint32_t n);

// ---- Scratch kept between steps (CpuStep::aux_work) ----------------------------------------

struct AuxWork {
    IqlWork iql[2];       // hi, lo
    Vec iql_grad;         // [2·iql.total] = [hi | lo], like BUF_IQL
    IqnWork iqn;
    IqnCache iqn_target;  // target net on x̃'
    Vec iqn_tau, iqn_tau_t, iqn_T, iqn_grad;
    AttnWork attn;
    Vec attn_grad;
};
// s.aux_work, created on first use.
AuxWork &aux_work(CpuStep &s);
// Adam (lr_aux, t = step + 1) of the learner with parameters p and moments m, v (buffers of
// the layout) over the whole of grad.
void aux_adam(CpuStep &s, Buf p, Buf m, Buf v, const Vec &grad);

}  // namespace fh::cpu
