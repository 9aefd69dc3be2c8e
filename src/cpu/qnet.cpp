// SPEC §4: the branching Q network (Tavakoli et al. 2018): a shared two-layer SiLU trunk, one
// SiLU hidden layer and a linear head per action branch, outputs clamped to ±q_clip, and the
// softplus confidence head on the trunk.
#include <algorithm>

#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

static void ensure(Vec &v, size_t n) { if (v.size() != n) v.assign(n, 0.0f); }

void q_forward_trunk(const Dims &d, const Layout &L, const QView &w, const float *x, uint32_t M,
                     QCache &c) {
    const size_t MH = (size_t)M * d.H;
    c.M = M;
    c.x = x;
    ensure(c.pre1, MH); ensure(c.h1, MH); ensure(c.pre2, MH); ensure(c.h2, MH);
    ensure(c.pre_u, M); ensure(c.u, M);
    c.preg.resize(d.NB); c.g.resize(d.NB); c.z.resize(d.NB); c.q.resize(d.NB);
    linear_silu(M, d.H, d.D, x, w.W1, w.p + L.q.b1, c.pre1.data(), c.h1.data());
    linear_silu(M, d.H, d.H, c.h1.data(), w.W2, w.p + L.q.b2, c.pre2.data(), c.h2.data());
    // u(x) = softplus(h2 · w_u + b_u)
    gemm_nt(M, 1, d.H, c.h2.data(), w.p + L.q.w_u, c.pre_u.data());
    for (uint32_t i = 0; i < M; ++i) {
        c.pre_u[i] += w.p[L.q.b_u];
        c.u[i] = softplus(c.pre_u[i]);
    }
}

void q_forward_branch(const Dims &d, const Layout &L, const QView &w, QCache &c, uint32_t b,
                      float q_clip) {
    const uint32_t M = c.M;
    ensure(c.preg[b], (size_t)M * d.HB); ensure(c.g[b], (size_t)M * d.HB);
    ensure(c.z[b], (size_t)M * d.A); ensure(c.q[b], (size_t)M * d.A);
    linear_silu(M, d.HB, d.H, c.h2.data(), w.p + L.q.V[b], w.p + L.q.c[b], c.preg[b].data(),
                c.g[b].data());
    gemm_nt(M, d.A, d.HB, c.g[b].data(), w.p + L.q.U[b], c.z[b].data());
    add_row_bias(c.z[b].data(), M, d.A, w.p + L.q.e[b]);
    for (size_t i = 0; i < (size_t)M * d.A; ++i)
        c.q[b][i] = std::min(std::max(c.z[b][i], -q_clip), q_clip);
}

void q_forward(const Dims &d, const Layout &L, const QView &w, const float *x, uint32_t M,
               QCache &c, float q_clip) {
    q_forward_trunk(d, L, w, x, M, c);
    for (uint32_t b = 0; b < d.NB; ++b) q_forward_branch(d, L, w, c, b, q_clip);
}

}  // namespace fh::cpu
