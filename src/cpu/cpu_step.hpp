// The CPU reference executor's view of one step: the persistent buffers, the batch, and every
// intermediate a task produces for a later one. Each task of schedule.hpp is one function
// below, in a file named for it; cpu_backend.cpp runs them in the schedule's order.
#pragma once
#include <foxhunt.h>
#include <cstdint>
#include <memory>
#include <vector>

#include "../batch.hpp"
#include "../init.hpp"
#include "../layout.hpp"

namespace fh::cpu {

using Vec = std::vector<float>;

// The Q net's weights as one forward pass sees them: a flat buffer (online or target) with
// the trunk matrices replaced by their spectrally normalised copies where SN applies.
struct QView {
    const float *p;   // flat Q buffer (layout.q offsets)
    const float *W1;  // W1 or W1/sigma1
    const float *W2;  // W2 or W2/sigma2
};

// Forward caches of the Q net on M input rows (SPEC §4).
struct QCache {
    uint32_t M = 0;
    const float *x = nullptr;  // [M, D], not owned
    Vec pre1, h1, pre2, h2;    // [M, H]
    std::vector<Vec> preg, g;  // per branch [M, HB]
    std::vector<Vec> z, q;     // per branch [M, A]: logits, clamped q
    Vec pre_u, u;              // [M] confidence head: pre-activation, softplus
};

struct AuxWork;  // aux_learners.hpp

struct CpuStep {
    const fh_config &cfg;
    const Layout &L;
    const Dims &d;
    HostBuffers &buf;
    const HostBatch *batch = nullptr;
    uint64_t step = 0;  // steps completed before this one

    // §5.1 her
    Vec x, xn;          // [B, D] x~ and x~'
    Vec r, done;        // [B] r~ and d~ (0 or 1)
    uint32_t relabelled = 0;

    // §5.2 spectral: effective trunk weights, online [0] W1 [1] W2 and target
    Vec w_eff[2], w_eff_t[2];
    Vec sn_v[2];        // v of the last power iteration, [D] for W1, [H] for W2
    float sigma[2] = {0, 0}, sigma_t[2] = {0, 0};

    // §5.3 ddqn
    QCache next;        // online on x~'
    QCache target;      // target on [x~; x~'] (2B rows)
    Vec xx;             // [2B, D] the stacked target input
    std::vector<int32_t> a_star;  // [B, NB]
    Vec y;              // [B, NB]
    Vec qbar_sa;        // [B]

    // §5.4 forward
    QCache online;      // online on x~
    Vec delta;          // [B, NB]
    std::vector<Vec> dz;     // per branch [B, A]
    std::vector<Vec> dh2_b;  // per branch [B, H]
    Vec grad;           // [layout.q.total] Q-net gradient: TD, then + CQL, + confidence
    float td_loss = 0, q_mean = 0;

    // §5.5 aux
    Vec v_hi, v_lo;     // [B] IQL values of x~ before their update
    Vec omega;          // [B] advantage weights
    Vec z_mean;         // [B] mean_n Z(x~, tau_n) before the IQN update
    float iql_loss[2] = {0, 0}, iqn_loss = 0, attn_loss = 0, cql_loss = 0, conf_loss = 0;
    float ensemble_std = 0;
    // Scratch of the IQL, IQN and attention learners (aux_learners.hpp), reused from step
    // to step; created by their first call.
    std::shared_ptr<AuxWork> aux_work;

    // §5.6 adam
    float grad_norm = 0;

    CpuStep(const fh_config &c, const Layout &l, HostBuffers &b);
    // Frees what the first step allocates (caches, effective weights, scratch) after it failed.
    void release_scratch();
    QView online_view() const { return {buf[BUF_Q].data(), w_eff[0].data(), w_eff[1].data()}; }
    QView target_view() const {
        return {buf[BUF_Q_TARGET].data(), w_eff_t[0].data(), w_eff_t[1].data()};
    }
};

// qnet.cpp — SPEC §4 forward; the pieces of §5.4's backward.
void q_forward_trunk(const Dims &d, const Layout &L, const QView &w, const float *x, uint32_t M,
                     QCache &c);
void q_forward_branch(const Dims &d, const Layout &L, const QView &w, QCache &c, uint32_t b,
                      float q_clip);
void q_forward(const Dims &d, const Layout &L, const QView &w, const float *x, uint32_t M,
               QCache &c, float q_clip);

// her.cpp
void her_relabel(CpuStep &s);
// spectral.cpp: one power iteration; also used by act (with a scratch u).
void spectral_power(CpuStep &s);
void power_iteration(const float *W, size_t rows, size_t cols, float *u, float *v);
float sn_sigma(const float *W, size_t rows, size_t cols, const float *u, const float *v);
void sn_backward(float *dW, const float *Wsn, const float *u, const float *v, size_t rows,
                 size_t cols, float sigma);
// ddqn.cpp
void ddqn_online_next(CpuStep &s);
void ddqn_target(CpuStep &s);
void ddqn_join(CpuStep &s);
// td.cpp
void td_loss(CpuStep &s);
void backward_branch(CpuStep &s, uint32_t b);
void backward_trunk(CpuStep &s);
// ema.cpp, regime.cpp, confidence.cpp, adam_q.cpp
void ema_targets(CpuStep &s);
void regime_scale(CpuStep &s);
void confidence(CpuStep &s);
void adam_q(CpuStep &s);
// Auxiliary learners (SPEC §5.5), one file each.
void iql(CpuStep &s);
void iqn(CpuStep &s);
void attention(CpuStep &s);
// The Adam steps of IQN and attention on their tasks' gradients (the schedule runs them after
// the join: SPEC §9's step sums both gradients across ranks first).
void iqn_adam(CpuStep &s);
void attention_adam(CpuStep &s);
void cql(CpuStep &s);
void ensemble(CpuStep &s);

}  // namespace fh::cpu
