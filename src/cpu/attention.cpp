// SPEC §5.5 step 4: the attention reward model of SPEC §4, a one-block transformer encoder
// without LayerNorm (Vaswani et al. 2017, "Attention Is All You Need", §3.2: scaled dot-product
// attention, eq. 1, and multi-head attention) followed by mean pooling and an MLP head:
//     tokens: obs chunks x̃[i, t·td : (t+1)·td] for t < T_o, then the goal x̃[i, O:D] (if G > 0)
//     e_t = tok_t Wtᵀ + bt + P[t],   e_goal = g̃ Wgᵀ + bg + P[T_o]
//     q, k, v = e W·ᵀ + b·;  per head h (columns h·dh .. (h+1)·dh−1):
//     A_h = softmax(q_h k_hᵀ / √dh) over the T keys (no mask);  attn_out = [A_0 v_0 | A_1 v_1 | …]
//     e2 = e + (attn_out Woᵀ + bo);  pool = mean_t e2_t;  r̂ = SiLU(pool Wr1ᵀ + br1) · w_r2 + b_r2
// trained with L = mean_i (r̂(x̃_i) − r̃_i)² and one Adam step (lr_aux).
//
// Layout choices (the math does not depend on them): token rows are sample-major, row i·T + t
// of [M·T, d]; per (sample, head) the [T, dh] blocks of q, k, v are gathered into contiguous
// scratch so that the nn.hpp GEMMs apply; the softmax is not stored but recomputed in the
// backward by the same function (identical values, and no [M·heads·T·T] buffer).
//
// Note: the gradient of bk is exactly zero in exact arithmetic (q_t·bk is the same for every key
// of a query row, and softmax ignores a per-row shift); in float32 it is rounding noise, which
// Adam's normalisation turns into steps of order lr. bk has no effect on r̂, so this is harmless,
// but CPU and CUDA values of attn.bk will not agree after a step.
#include <algorithm>
#include <cmath>
#include <vector>

#include "aux_learners.hpp"

namespace fh::cpu {

namespace {

// Block (sample i, head h) of a [M·T, d] matrix as a contiguous [T, dh] matrix, and back.
void gather_head(const Dims &d, const float *X, uint32_t i, uint32_t h, float *blk) {
    for (uint32_t t = 0; t < d.T; ++t)
        for (uint32_t j = 0; j < d.dh; ++j)
            blk[(size_t)t * d.dh + j] = X[((size_t)i * d.T + t) * d.d + (size_t)h * d.dh + j];
}
void scatter_head(const Dims &d, float *X, uint32_t i, uint32_t h, const float *blk) {
    for (uint32_t t = 0; t < d.T; ++t)
        for (uint32_t j = 0; j < d.dh; ++j)
            X[((size_t)i * d.T + t) * d.d + (size_t)h * d.dh + j] = blk[(size_t)t * d.dh + j];
}

float score_scale(const Dims &d) { return (float)(1.0 / std::sqrt((double)d.dh)); }

// A [T, T] = softmax over each row of (q_h k_hᵀ)·(1/√dh). Stable: the row maximum is
// subtracted before exp; exp and the row sum are in double, each probability rounded once.
// e: scratch of T doubles.
void head_probs(const Dims &d, const float *qh, const float *kh, float *A, std::vector<double> &e) {
    const uint32_t T = d.T;
    gemm_nt(T, T, d.dh, qh, kh, A);
    const float scale = score_scale(d);
    e.resize(T);
    for (uint32_t t = 0; t < T; ++t) {
        float *row = A + (size_t)t * T;
        for (uint32_t s = 0; s < T; ++s) row[s] *= scale;
        const float mx = *std::max_element(row, row + T);
        double sum = 0;
        for (uint32_t s = 0; s < T; ++s) sum += (e[s] = std::exp((double)row[s] - mx));
        for (uint32_t s = 0; s < T; ++s) row[s] = (float)(e[s] / sum);
    }
}

void attn_forward(const Dims &d, const AttnOffsets &o, const float *p, const float *x, uint32_t M,
                  AttnCache &c) {
    const uint32_t T = d.T, To = d.To, dm = d.d;
    const size_t MT = (size_t)M * T;
    // resize(), not assign(): the buffers are reused from call to call (AttnWork) and every
    // element is overwritten below.
    c.tok.resize((size_t)M * To * d.td);
    c.goal.resize((size_t)M * d.G);
    for (uint32_t i = 0; i < M; ++i) {
        const float *xi = x + (size_t)i * d.D;
        std::copy(xi, xi + d.O, c.tok.begin() + (size_t)i * d.O);  // T_o·td = O floats per sample
        std::copy(xi + d.O, xi + d.D, c.goal.begin() + (size_t)i * d.G);
    }
    // Embeddings: (tok Wtᵀ + bt) + P[t] for obs tokens, (g̃ Wgᵀ + bg) + P[T_o] for the goal.
    c.E.resize(MT * dm);
    {
        Vec &eo = c.eo;
        eo.resize((size_t)M * To * dm);
        gemm_nt((size_t)M * To, dm, d.td, c.tok.data(), p + o.Wt, eo.data());
        for (uint32_t i = 0; i < M; ++i)
            for (uint32_t t = 0; t < To; ++t)
                for (uint32_t j = 0; j < dm; ++j)
                    c.E[((size_t)i * T + t) * dm + j] =
                        (eo[((size_t)i * To + t) * dm + j] + p[o.bt + j]) + p[o.P + (size_t)t * dm + j];
        if (d.G > 0) {
            Vec &eg = c.eg;
            eg.resize((size_t)M * dm);
            gemm_nt(M, dm, d.G, c.goal.data(), p + o.Wg, eg.data());
            for (uint32_t i = 0; i < M; ++i)
                for (uint32_t j = 0; j < dm; ++j)
                    c.E[((size_t)i * T + To) * dm + j] =
                        (eg[(size_t)i * dm + j] + p[o.bg + j]) + p[o.P + (size_t)To * dm + j];
        }
    }
    // Projections.
    c.Q.resize(MT * dm); c.K.resize(MT * dm); c.V.resize(MT * dm);
    gemm_nt(MT, dm, dm, c.E.data(), p + o.Wq, c.Q.data());
    add_row_bias(c.Q.data(), MT, dm, p + o.bq);
    gemm_nt(MT, dm, dm, c.E.data(), p + o.Wk, c.K.data());
    add_row_bias(c.K.data(), MT, dm, p + o.bk);
    gemm_nt(MT, dm, dm, c.E.data(), p + o.Wv, c.V.data());
    add_row_bias(c.V.data(), MT, dm, p + o.bv);
    // Heads.
    c.attn.resize(MT * dm);
    const size_t blk = (size_t)T * d.dh;
    Vec qh(blk), kh(blk), vh(blk), oh(blk), A((size_t)T * T);
    std::vector<double> e(T);
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t h = 0; h < d.heads; ++h) {
            gather_head(d, c.Q.data(), i, h, qh.data());
            gather_head(d, c.K.data(), i, h, kh.data());
            gather_head(d, c.V.data(), i, h, vh.data());
            head_probs(d, qh.data(), kh.data(), A.data(), e);
            gemm_nn(T, d.dh, T, A.data(), vh.data(), oh.data());
            scatter_head(d, c.attn.data(), i, h, oh.data());
        }
    // Residual, mean pooling (over t in order, in double, rounded once), reward head.
    c.pool.resize((size_t)M * dm);
    {
        Vec &proj = c.proj;
        proj.resize(MT * dm);
        gemm_nt(MT, dm, dm, c.attn.data(), p + o.Wo, proj.data());
        add_row_bias(proj.data(), MT, dm, p + o.bo);
        for (uint32_t i = 0; i < M; ++i)
            for (uint32_t j = 0; j < dm; ++j) {
                double acc = 0;
                for (uint32_t t = 0; t < T; ++t) {
                    const size_t k = ((size_t)i * T + t) * dm + j;
                    acc += (double)(c.E[k] + proj[k]);  // e2 = e + (attn_out Woᵀ + bo)
                }
                c.pool[(size_t)i * dm + j] = (float)(acc / T);
            }
    }
    c.pre_r.resize((size_t)M * d.hh); c.hr.resize((size_t)M * d.hh); c.rhat.resize(M);
    linear_silu(M, d.hh, dm, c.pool.data(), p + o.Wr1, p + o.br1, c.pre_r.data(), c.hr.data());
    gemm_nt(M, 1, d.hh, c.hr.data(), p + o.w_r2, c.rhat.data());
    for (uint32_t i = 0; i < M; ++i) c.rhat[i] += p[o.b_r2];
}

}  // namespace

double attn_loss_grad(const Dims &d, const AttnOffsets &o, const float *p, const float *x,
                      const float *r, uint32_t M, float *grad, float *rhat, AttnWork *work,
                      uint64_t rows) {
    const uint64_t n = rows ? rows : M;  // the mean's count
    AttnWork local;
    AttnWork &w = work ? *work : local;
    AttnCache &c = w.c;
    attn_forward(d, o, p, x, M, c);
    if (rhat) std::copy(c.rhat.begin(), c.rhat.end(), rhat);
    Vec &dr = w.dr;
    dr.resize(M);
    double loss = 0;
    for (uint32_t i = 0; i < M; ++i) {
        const float e = c.rhat[i] - r[i];
        loss += (double)(e * e);
        dr[i] = 2.0f * e / (float)n;  // dL/dr̂_i
    }
    loss /= (double)n;
    if (!grad) return loss;

    const uint32_t T = d.T, To = d.To, dm = d.d;
    const size_t MT = (size_t)M * T;
    // Reward head.
    gemm_tn(1, d.hh, M, dr.data(), c.hr.data(), grad + o.w_r2);
    col_sum(dr.data(), M, 1, grad + o.b_r2);
    Vec &dpre_r = w.dpre_r;
    dpre_r.resize((size_t)M * d.hh);
    gemm_nn(M, d.hh, 1, dr.data(), p + o.w_r2, dpre_r.data());  // dhr = dr ⊗ w_r2
    silu_backward(dpre_r.data(), c.pre_r.data(), dpre_r.size());
    gemm_tn(d.hh, dm, M, dpre_r.data(), c.pool.data(), grad + o.Wr1);
    col_sum(dpre_r.data(), M, d.hh, grad + o.br1);
    Vec &dpool = w.dpool;
    dpool.resize((size_t)M * dm);
    gemm_nn(M, dm, d.hh, dpre_r.data(), p + o.Wr1, dpool.data());
    // Mean pooling: every token's e2 gets dpool / T.
    Vec &de2 = w.de2;
    de2.resize(MT * dm);
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t t = 0; t < T; ++t)
            for (uint32_t j = 0; j < dm; ++j)
                de2[((size_t)i * T + t) * dm + j] = dpool[(size_t)i * dm + j] / (float)T;
    // Output projection: e2 = e + attn Woᵀ + bo.
    gemm_tn(dm, dm, MT, de2.data(), c.attn.data(), grad + o.Wo);
    col_sum(de2.data(), MT, dm, grad + o.bo);
    Vec &dattn = w.dattn;
    dattn.resize(MT * dm);
    gemm_nn(MT, dm, dm, de2.data(), p + o.Wo, dattn.data());
    // Heads: O = A V with A = softmax(S), S = (Q Kᵀ)·scale.
    //   dA = dO Vᵀ, dV = Aᵀ dO, dS_ts = A_ts (dA_ts − Σ_s' A_ts' dA_ts') (row sum in double),
    //   dQ = (dS·scale) K, dK = (dS·scale)ᵀ Q.
    Vec &dQ = w.dQ, &dK = w.dK, &dV = w.dV;
    dQ.resize(MT * dm);
    dK.resize(MT * dm);
    dV.resize(MT * dm);
    const size_t blk = (size_t)T * d.dh;
    const float scale = score_scale(d);
    Vec qh(blk), kh(blk), vh(blk), doh(blk), dqh(blk), dkh(blk), dvh(blk);
    Vec A((size_t)T * T), dA((size_t)T * T);
    std::vector<double> e(T);
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t h = 0; h < d.heads; ++h) {
            gather_head(d, c.Q.data(), i, h, qh.data());
            gather_head(d, c.K.data(), i, h, kh.data());
            gather_head(d, c.V.data(), i, h, vh.data());
            gather_head(d, dattn.data(), i, h, doh.data());
            head_probs(d, qh.data(), kh.data(), A.data(), e);  // recomputed, as in the forward
            gemm_nt(T, T, d.dh, doh.data(), vh.data(), dA.data());
            gemm_tn(T, d.dh, T, A.data(), doh.data(), dvh.data());
            for (uint32_t t = 0; t < T; ++t) {
                const float *a = &A[(size_t)t * T];
                float *g = &dA[(size_t)t * T];  // becomes dS·scale in place
                double dot = 0;
                for (uint32_t s = 0; s < T; ++s) dot += (double)a[s] * g[s];
                for (uint32_t s = 0; s < T; ++s) g[s] = (float)(a[s] * ((double)g[s] - dot)) * scale;
            }
            gemm_nn(T, d.dh, T, dA.data(), kh.data(), dqh.data());
            gemm_tn(T, d.dh, T, dA.data(), qh.data(), dkh.data());
            scatter_head(d, dQ.data(), i, h, dqh.data());
            scatter_head(d, dK.data(), i, h, dkh.data());
            scatter_head(d, dV.data(), i, h, dvh.data());
        }
    // Projections q, k, v = e W·ᵀ + b·, and dE = de2 (residual) + dQ Wq + dK Wk + dV Wv, added
    // in that order.
    gemm_tn(dm, dm, MT, dQ.data(), c.E.data(), grad + o.Wq);
    gemm_tn(dm, dm, MT, dK.data(), c.E.data(), grad + o.Wk);
    gemm_tn(dm, dm, MT, dV.data(), c.E.data(), grad + o.Wv);
    col_sum(dQ.data(), MT, dm, grad + o.bq);
    col_sum(dK.data(), MT, dm, grad + o.bk);
    col_sum(dV.data(), MT, dm, grad + o.bv);
    Vec &dE = w.dE;
    dE = de2;
    gemm_nn(MT, dm, dm, dQ.data(), p + o.Wq, dE.data(), 1.0f);
    gemm_nn(MT, dm, dm, dK.data(), p + o.Wk, dE.data(), 1.0f);
    gemm_nn(MT, dm, dm, dV.data(), p + o.Wv, dE.data(), 1.0f);
    // Positional table: dP[t] = Σ_i dE[i, t] (dE viewed as M rows of T·d).
    col_sum(dE.data(), M, (size_t)T * dm, grad + o.P);
    // Token and goal embeddings (their rows of dE gathered into contiguous matrices).
    Vec &dEo = w.dEo;
    dEo.resize((size_t)M * To * dm);
    for (uint32_t i = 0; i < M; ++i)
        std::copy(dE.begin() + (size_t)i * T * dm, dE.begin() + ((size_t)i * T + To) * dm,
                  dEo.begin() + (size_t)i * To * dm);
    gemm_tn(dm, d.td, (size_t)M * To, dEo.data(), c.tok.data(), grad + o.Wt);
    col_sum(dEo.data(), (size_t)M * To, dm, grad + o.bt);
    if (d.G > 0) {
        Vec &dEg = w.dEg;
        dEg.resize((size_t)M * dm);
        for (uint32_t i = 0; i < M; ++i)
            std::copy(dE.begin() + ((size_t)i * T + To) * dm, dE.begin() + ((size_t)i * T + T) * dm,
                      dEg.begin() + (size_t)i * dm);
        gemm_tn(dm, d.G, M, dEg.data(), c.goal.data(), grad + o.Wg);
        col_sum(dEg.data(), M, dm, grad + o.bg);
    }
    return loss;
}

void attention(CpuStep &s) {
    const Dims &d = s.d;
    const AttnOffsets &o = s.L.attn;
    AuxWork &w = aux_work(s);
    Vec &grad = w.attn_grad;
    grad.resize(o.total);
    s.attn_loss = (float)attn_loss_grad(d, o, s.buf[BUF_ATTN].data(), s.x.data(), s.r.data(), d.B,
                                        grad.data(), nullptr, &w.attn, d.Bg);
}

void attention_adam(CpuStep &s) {
    aux_adam(s, BUF_ATTN, BUF_ATTN_M, BUF_ATTN_V, aux_work(s).attn_grad);
}

}  // namespace fh::cpu
