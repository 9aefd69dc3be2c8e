// SPEC §5.5 step 5: the conservative Q-learning penalty (Kumar, Zhou, Tucker & Levine 2020,
// "Conservative Q-Learning for Offline Reinforcement Learning", the CQL(H) regulariser, their
// eq. 4: α E_s[log Σ_a exp Q(s, a) − E_{a∼π_β}[Q(s, a)]]), applied per action branch, weighted
// per sample by IQL's advantage weights ω (SPEC's "advantage-weighted" variant), and on the
// branch heads only:
//     L_cql = α (1/(B·NB)) Σ_i ω_i Σ_b [logsumexp_a q_b(x̃_i) − q_b(x̃_i)[a_ib]]
// on the clamped online q of the forward child. Gradient w.r.t. the logits z_b:
//     dz_b[i, a] = α ω_i/(B·NB) (softmax_a(q_b(x̃_i))[a] − [a = a_ib]) · [−q_clip < z_b[i,a] < q_clip]
// (the strict clamp mask of SPEC §5.4), then dU_b += dz_bᵀ g_b and de_b += Σ_i dz_b[i] are
// added to the Q-net gradient that already holds the TD part. ω is a constant here (it is an
// output of the IQL nets, not of θ), and nothing is back-propagated into V_b, c_b or the trunk.
#include <algorithm>
#include <cmath>
#include <vector>

#include "aux_learners.hpp"

namespace fh::cpu {

double logsumexp(const float *q, uint32_t n) {
    // Subtract the maximum: exp(q − max) ≤ 1, so q near q_clip = 100 cannot overflow
    // (exp(100) is beyond float32's range). Sum in double.
    const float mx = *std::max_element(q, q + n);
    double sum = 0;
    for (uint32_t a = 0; a < n; ++a) sum += std::exp((double)q[a] - mx);
    return (double)mx + std::log(sum);
}

double cql_loss_grad(const Dims &d, const QOffsets &o, const QCache &c, const int32_t *action,
                     const float *omega, float alpha, float q_clip, float *grad,
                     uint64_t rows) {
    // (Small buffers: [M, A] and [A, HB]; not worth a scratch struct.)
    const uint32_t M = c.M, A = d.A;
    const uint64_t n = rows ? rows : M;  // the mean's count
    // Same per-sample factor as td_loss's: 1/(W·B·NB) rounded to float32 once.
    const float scale = 1.0f / ((float)n * (float)d.NB);
    double loss = 0;
    Vec dz((size_t)M * A), dU((size_t)A * d.HB), de(A);
    for (uint32_t b = 0; b < d.NB; ++b) {
        for (uint32_t i = 0; i < M; ++i) {
            const float *q = &c.q[b][(size_t)i * A];
            const float *z = &c.z[b][(size_t)i * A];
            const uint32_t a_i = (uint32_t)action[(size_t)i * d.NB + b];
            const double lse = logsumexp(q, A);
            loss += (double)omega[i] * (lse - (double)q[a_i]);
            const float w = alpha * omega[i] * scale;
            for (uint32_t a = 0; a < A; ++a) {
                const float prob = (float)std::exp((double)q[a] - lse);  // softmax_a, ≤ 1
                const float g = w * (prob - (a == a_i ? 1.0f : 0.0f));
                const bool inside = z[a] > -q_clip && z[a] < q_clip;
                dz[(size_t)i * A + a] = inside ? g : 0.0f;
            }
        }
        if (!grad) continue;
        // Computed apart, then added elementwise, so that the sum is (TD part) + (CQL part)
        // with one float32 rounding, whatever the GEMM does internally.
        gemm_tn(A, d.HB, M, dz.data(), c.g[b].data(), dU.data());
        col_sum(dz.data(), M, A, de.data());
        for (size_t k = 0; k < dU.size(); ++k) grad[o.U[b] + k] += dU[k];
        for (uint32_t a = 0; a < A; ++a) grad[o.e[b] + a] += de[a];
    }
    return (double)alpha * loss / ((double)n * d.NB);
}

void cql(CpuStep &s) {
    const Dims &d = s.d;
    s.cql_loss = (float)cql_loss_grad(d, s.L.q, s.online, s.batch->action.data(), s.omega.data(),
                                      s.cfg.cql_alpha, s.cfg.q_clip, s.grad.data(), d.Bg);
}

}  // namespace fh::cpu
