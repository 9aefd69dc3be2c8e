// The tasks of the CUDA step on CudaStep (moving to one file per task).
#include "common.hpp"
#include "cuda_step.hpp"
#include "kernels.cuh"
#include "reduce.cuh"

namespace fh::cuda {

namespace {

void colsum(const LaneCtx &l, const float *X, int M, int N, const float *row_scale, float *out) {
    colsum_partial(X, M, N, row_scale, l.col, l.stream);
    colsum_final(l.col, M, N, out, false, l.stream);
}

void reduce_to(const LaneCtx &l, const double *x, size_t n, float *out, double div,
               double mul = 1.0) {
    reduce_f64(x, n, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(n), out, 0, div, l.stream, mul);
}

}  // namespace

void her_relabel(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const fh_config &cfg = st.cfg;
    kern::HerArgs a{};
    a.B = d.B; a.O = d.O; a.G = d.G; a.D = d.D; a.NB = d.NB;
    a.seed = cfg.seed;
    a.step = st.step;
    a.her_ratio = cfg.her_ratio;
    a.her_epsilon = cfg.her_epsilon;
    a.sparse = cfg.her_reward == FH_HER_REWARD_SPARSE;
    a.terminal_on_success = cfg.her_terminal_on_success;
    a.obs = st.in.at<float>(st.in.obs);
    a.next_obs = st.in.at<float>(st.in.next_obs);
    a.reward = st.in.at<float>(st.in.reward);
    a.goal = st.in.at<float>(st.in.goal);
    a.nag = st.in.at<float>(st.in.nag);
    a.her_goal = st.in.at<float>(st.in.her_goal);
    a.action = st.in.at<int32_t>(st.in.action);
    a.regime = st.in.at<int32_t>(st.in.regime);
    a.done = st.in.at<uint8_t>(st.in.done);
    a.x2 = st.x2;
    a.r = st.r;
    a.done_f = st.done_f;
    a.relabelled = st.relab;
    a.action_out = st.action;
    a.regime_out = st.regime;
    kern::her(a, l.stream);
    reduce_f32(st.relab, d.B, 0, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(d.B), &st.dm->relabelled, 0, 1.0, l.stream);
}

void spectral_power(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int H = (int)d.H;
    const size_t off[2] = {st.L.q.W1, st.L.q.W2};
    const int cols[2] = {(int)d.D, H};
    const bool sn[2] = {d.sn1, d.sn2};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        const float *W = st.buf[BUF_Q] + off[k], *Wt = st.buf[BUF_Q_TARGET] + off[k];
        float *u = st.buf[BUF_SN_U] + (size_t)k * H;
        kern::power_iteration(W, Wt, H, cols[k], u, u, st.sn_v[k], st.sn_row, &st.dm->sigma[k],
                              &st.dm->sigma_t[k], l.stream);
        kern::sn_scale(W, &st.dm->sigma[k], st.weff[k], Wt, &st.dm->sigma_t[k], st.weff_t[k],
                       (size_t)H * cols[k], l.stream);
    }
}

void q_forward_trunk(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                     const float *x, QCache &c) {
    const int M = c.M, H = (int)d.H, D = (int)d.D;
    gemm_nt(l.blas, M, H, D, x, w.W1, c.pre1, 0.0f, "trunk x W1^T");
    kern::bias_silu(c.pre1, c.h1, w.p + L.q.b1, M, H, l.stream);
    gemm_nt(l.blas, M, H, H, c.h1, w.W2, c.pre2, 0.0f, "trunk h1 W2^T");
    kern::bias_silu(c.pre2, c.h2, w.p + L.q.b2, M, H, l.stream);
}

void q_forward_branch(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                      QCache &c, int b, float q_clip) {
    const int M = c.M, H = (int)d.H, HB = (int)d.HB, A = (int)d.A;
    float *preg = c.preg + (size_t)b * M * HB, *g = c.g + (size_t)b * M * HB;
    float *z = c.z + (size_t)b * M * A, *q = c.q + (size_t)b * M * A;
    gemm_nt(l.blas, M, HB, H, c.h2, w.p + L.q.V[b], preg, 0.0f, "branch h2 V^T");
    kern::bias_silu(preg, g, w.p + L.q.c[b], M, HB, l.stream);
    gemm_nt(l.blas, M, A, HB, g, w.p + L.q.U[b], z, 0.0f, "branch g U^T");
    kern::bias_clamp(z, q, w.p + L.q.e[b], M, A, q_clip, l.stream);
}

void ddqn_online_next(CudaStep &st, const LaneCtx &l) {
    const QView w = st.online_view();
    q_forward_trunk(l, st.d, st.L, w, st.inputs().xn, st.next);
    for (uint32_t b = 0; b < st.d.NB; ++b)
        q_forward_branch(l, st.d, st.L, w, st.next, (int)b, st.cfg.q_clip);
    kern::argmax(st.next.q, (int)st.d.B, (int)st.d.NB, (int)st.d.A, st.a_star, l.stream);
}

void ddqn_target(CudaStep &st, const LaneCtx &l) {
    const QView w = st.target_view();
    q_forward_trunk(l, st.d, st.L, w, st.x2, st.tgt);
    for (uint32_t b = 0; b < st.d.NB; ++b)
        q_forward_branch(l, st.d, st.L, w, st.tgt, (int)b, st.cfg.q_clip);
}

void ddqn_join(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    kern::ddqn_join(st.tgt.q, st.a_star, st.action, st.r, st.done_f, (int)d.B, (int)d.NB,
                    (int)d.A, st.cfg.gamma, st.y, st.qbar_sa, l.stream);
}

void forward_trunk(CudaStep &st, const LaneCtx &l) {
    const QView w = st.online_view();
    q_forward_trunk(l, st.d, st.L, w, st.x2, st.on);
    kern::conf_head(st.on.h2, w.p + st.L.q.w_u, w.p + st.L.q.b_u, (int)st.d.B, (int)st.d.H,
                    st.on.pre_u, st.on.u, l.stream);
}

void forward_branch(CudaStep &st, const LaneCtx &l, int b) {
    q_forward_branch(l, st.d, st.L, st.online_view(), st.on, b, st.cfg.q_clip);
}

void td_loss(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, NB = (int)d.NB;
    kern::td_loss(st.on.q, st.on.z, st.y, st.action, st.regime, st.buf[BUF_REGIME] + d.R, B, NB,
                  (int)d.A, st.cfg.huber_kappa, st.cfg.q_clip, st.delta, st.dz, st.td_elt,
                  st.q_elt, l.stream);
    reduce_to(l, st.td_elt, (size_t)B * NB, &st.dm->td_loss, (double)B * NB);
    reduce_to(l, st.q_elt, (size_t)B * NB, &st.dm->q_mean, (double)B * NB);
}

// SPEC §5.4 backward of branch b (CPU: td.cpp backward_branch).
void backward_branch(CudaStep &st, const LaneCtx &l, int b) {
    const Dims &d = st.d;
    const int B = (int)d.B, H = (int)d.H, HB = (int)d.HB, A = (int)d.A;
    const QOffsets &o = st.L.q;
    const float *p = st.buf[BUF_Q];
    float *g = st.grad_q;
    const float *dz = st.dz + (size_t)b * B * A;
    const float *gb = st.on.g + (size_t)b * B * HB, *preg = st.on.preg + (size_t)b * B * HB;
    float *dpre = st.dpreg + (size_t)b * B * HB, *dh2 = st.dh2 + (size_t)b * B * H;
    gemm_tn(l.blas, A, HB, B, dz, gb, g + o.U[b], 0.0f, "dU = dz^T g");
    colsum(l, dz, B, A, nullptr, g + o.e[b]);
    gemm_nn(l.blas, B, HB, A, dz, p + o.U[b], dpre, 0.0f, "dg = dz U");
    PtrList in{};
    in.p[0] = dpre;
    in.n = 1;
    silu_bwd_colsum_partial(in, preg, B, HB, dpre, l.col, l.stream);
    colsum_final(l.col, B, HB, g + o.c[b], false, l.stream);
    gemm_tn(l.blas, HB, H, B, dpre, st.on.h2, g + o.V[b], 0.0f, "dV = dpre^T h2");
    gemm_nn(l.blas, B, H, HB, dpre, p + o.V[b], dh2, 0.0f, "dh2_b = dpre V");
}

// SPEC §5.4 trunk backward (CPU: td.cpp backward_trunk).
void backward_trunk(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, H = (int)d.H, D = (int)d.D;
    const QOffsets &o = st.L.q;
    float *g = st.grad_q;
    const QView w = st.online_view();
    PtrList in{};
    for (uint32_t b = 0; b < d.NB; ++b) in.p[b] = st.dh2 + (size_t)b * B * H;
    in.n = (int)d.NB;
    silu_bwd_colsum_partial(in, st.on.pre2, B, H, st.dpre2, l.col, l.stream);
    colsum_final(l.col, B, H, g + o.b2, false, l.stream);
    gemm_tn(l.blas, H, H, B, st.dpre2, st.on.h1, g + o.W2, 0.0f, "dW2sn = dpre2^T h1");
    gemm_nn(l.blas, B, H, H, st.dpre2, w.W2, st.dpre1, 0.0f, "dh1 = dpre2 W2sn");
    in.p[0] = st.dpre1;
    in.n = 1;
    silu_bwd_colsum_partial(in, st.on.pre1, B, H, st.dpre1, l.col, l.stream);
    colsum_final(l.col, B, H, g + o.b1, false, l.stream);
    gemm_tn(l.blas, H, D, B, st.dpre1, st.x2, g + o.W1, 0.0f, "dW1sn = dpre1^T x");
    gemm_nn(l.blas, B, D, H, st.dpre1, w.W1, st.buf[BUF_D_STATES], 0.0f,
            "d_states = dpre1 W1sn");
    const float *u = st.buf[BUF_SN_U];
    const size_t off[2] = {o.W1, o.W2};
    const int cols[2] = {D, H};
    const bool sn[2] = {d.sn1, d.sn2};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        const size_t n = (size_t)H * cols[k];
        reduce_dot(g + off[k], st.weff[k], n, l.red, l.stream);
        reduce_final(l.red, reduce_blocks(n), &st.dm->sn_ip[k], 0, 1.0, l.stream);
        kern::sn_backward(g + off[k], &st.dm->sn_ip[k], u + (size_t)k * H, st.sn_v[k],
                          &st.dm->sigma[k], H, cols[k], l.stream);
    }
}

void ema_targets(CudaStep &st, const LaneCtx &l) {
    kern::polyak(st.buf[BUF_Q_TARGET], st.buf[BUF_Q], st.L.q.total, st.cfg.ema_tau, l.stream);
    kern::polyak(st.buf[BUF_IQN_TARGET], st.buf[BUF_IQN], st.L.iqn.total, st.cfg.ema_tau,
                 l.stream);
}

void cql(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, NB = (int)d.NB, A = (int)d.A, HB = (int)d.HB;
    const QOffsets &o = st.L.q;
    cudaStream_t s = l.stream;
    // As the CPU (cql.cpp): the CQL part of dU_b, de_b is computed apart, then added to
    // the TD part elementwise (one float rounding of the sum).
    kern::cql(st.on.q, st.on.z, st.action, st.omega, B, NB, A, st.cfg.cql_alpha, st.cfg.q_clip,
              st.dzc, st.cql_elt, s);
    reduce_to(l, st.cql_elt, (size_t)B * NB, &st.dm->cql_loss, (double)B * NB,
              (double)st.cfg.cql_alpha);
    // The branches' blocks in the flat Q buffer are equally spaced (V, c, U, e per branch),
    // so the column sums and the adds of all branches are one launch each. The GEMMs stay
    // one per branch: as one strided-batched call cuBLAS gives up split-K and runs the
    // K = B reduction on 8 CTAs (measured on the H200: 148 us for the batch instead of
    // ~4 x 10 us).
    const size_t br = NB > 1 ? o.U[1] - o.U[0] : 0;
    for (int b = 0; b < NB; ++b)
        gemm_tn(l.blas, A, HB, B, st.dzc + (size_t)b * B * A, st.on.g + (size_t)b * B * HB,
                st.cql_dU + (size_t)b * A * HB, 0.0f, "dU_cql = dzc^T g");
    colsum_partial(st.dzc, B, A, nullptr, st.cql_part, s, NB, (size_t)B * A);
    colsum_final(st.cql_part, B, A, st.cql_de, false, s, NB, (size_t)A);
    kern::add_inplace(st.grad_q + o.U[0], st.cql_dU, (size_t)A * HB, s, NB, br, (size_t)A * HB);
    kern::add_inplace(st.grad_q + o.e[0], st.cql_de, (size_t)A, s, NB, br, (size_t)A);
}

void ensemble(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B;
    kern::ensemble(st.qbar_sa, st.v_hi, st.v_lo, st.z_mean, B, st.buf[BUF_ENS_MEAN],
                   st.buf[BUF_ENS_VAR], st.std_elt, l.stream);
    reduce_to(l, st.std_elt, B, &st.dm->ensemble_std, (double)B);
}

void confidence(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B, H = (int)st.d.H;
    const QOffsets &o = st.L.q;
    const float *wt = st.buf[BUF_Q_TARGET];
    kern::confidence(st.tgt.h2 + (size_t)B * H, wt + o.w_u, wt + o.b_u, st.buf[BUF_ENS_VAR],
                     st.done_f, st.on.u, st.on.pre_u, B, H, st.cfg.gamma, st.dpre_u, st.conf_elt,
                     st.buf[BUF_CONFIDENCE], l.stream);
    reduce_to(l, st.conf_elt, B, &st.dm->conf_loss, (double)B);
    colsum(l, st.on.h2, B, H, st.dpre_u, st.grad_q + o.w_u);
    colsum(l, st.dpre_u, B, 1, nullptr, st.grad_q + o.b_u);
}

void regime_scale(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const fh_config &c = st.cfg;
    kern::regime_scale(st.delta, st.regime, (int)d.B, (int)d.NB, (int)d.R, c.regime_beta,
                       c.regime_min, c.regime_max, st.regime_scr, st.buf[BUF_REGIME], l.stream);
}

void adam_q(CudaStep &st, const LaneCtx &l) {
    const fh_config &c = st.cfg;
    const size_t n = st.L.q.total;
    reduce_f32(st.grad_q, n, 1, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(n), &st.dm->grad_norm, 1, 1.0, l.stream);
    kern::adam_prep(&st.dm->grad_norm, c.clip_norm, st.step, c.adam_beta1, c.adam_beta2,
                    &st.dm->adam, l.stream);
    kern::adam(st.buf[BUF_Q], st.buf[BUF_Q_M], st.buf[BUF_Q_V], st.grad_q, n, c.lr_q,
               c.adam_beta1, c.adam_beta2, c.adam_eps, &st.dm->adam, l.stream);
    kern::inc_u64(st.step, l.stream);
}

void set_step_counter(uint64_t *counter, uint64_t v, cudaStream_t s) { kern::set_u64(counter, v, s); }

}  // namespace fh::cuda
