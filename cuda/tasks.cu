// The tasks of the CUDA step on CudaStep (moving to one file per task).
#include "common.hpp"
#include "cuda_step.hpp"
#include "kernels.cuh"
#include "reduce.cuh"

namespace fh::cuda {













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
    sum_to(st.cql_elt, (size_t)B * NB, &st.dm->cql_loss, (double)B * NB, l.red, s,
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
    sum_to(st.std_elt, B, &st.dm->ensemble_std, (double)B, l.red, l.stream);
}

void confidence(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B, H = (int)st.d.H;
    const QOffsets &o = st.L.q;
    const float *wt = st.buf[BUF_Q_TARGET];
    kern::confidence(st.tgt.h2 + (size_t)B * H, wt + o.w_u, wt + o.b_u, st.buf[BUF_ENS_VAR],
                     st.done_f, st.on.u, st.on.pre_u, B, H, st.cfg.gamma, st.dpre_u, st.conf_elt,
                     st.buf[BUF_CONFIDENCE], l.stream);
    sum_to(st.conf_elt, B, &st.dm->conf_loss, (double)B, l.red, l.stream);
    colsum(st.on.h2, B, H, st.dpre_u, st.grad_q + o.w_u, l.col, l.stream);
    colsum(st.dpre_u, B, 1, nullptr, st.grad_q + o.b_u, l.col, l.stream);
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
