// Independent float64 re-implementations of the auxiliary learners' forward passes and losses
// (SPEC §4, §5.5), written as plain loops straight from the SPEC text, for the test_aux_* tests:
// the library's float32 values are compared with these, and the library's gradients with
// central differences of these.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "layout.hpp"


// |a − b| ≤ tol in double. (cmocka's assert_float_equal casts its arguments to float, and its
// macro's cast binds to the first token of an expression argument.) Needs cmocka.h included.
#define AUX_ASSERT_CLOSE(a, b, tol)                                                              \
    do {                                                                                         \
        const double a_ = (a), b_ = (b), t_ = (tol);                                             \
        if (!(std::fabs(a_ - b_) <= t_))                                                         \
            fail_msg("%s = %.12g, expected %.12g (|diff| %.3g > tol %.3g)", #a, a_, b_,          \
                     std::fabs(a_ - b_), t_);                                                    \
    } while (0)

namespace auxref {

using dvec = std::vector<double>;

inline double silu(double z) { return z / (1 + std::exp(-z)); }
inline double huber(double u, double k) {
    const double a = std::fabs(u);
    return a <= k ? 0.5 * u * u : k * (a - 0.5 * k);
}
inline double expectile(double u, double tau) { return (u < 0 ? 1 - tau : tau) * u * u; }
inline double quantile_huber(double u, double tau, double k) {
    return std::fabs(tau - (u < 0 ? 1.0 : 0.0)) * huber(u, k) / k;
}

template <class V>
dvec to_d(const V &v) { return dvec(v.begin(), v.end()); }

// y[N] = act(W[N, K] x[K] + b[N]); W at p[w], b at p[b].
inline dvec dense(const dvec &p, size_t w, size_t b, const double *x, size_t K, size_t N, bool act) {
    dvec y(N);
    for (size_t n = 0; n < N; ++n) {
        double acc = p[b + n];
        for (size_t k = 0; k < K; ++k) acc += p[w + n * K + k] * x[k];
        y[n] = act ? silu(acc) : acc;
    }
    return y;
}
inline double dot(const dvec &p, size_t w, const dvec &h) {
    double acc = 0;
    for (size_t k = 0; k < h.size(); ++k) acc += p[w + k] * h[k];
    return acc;
}

// V(x_i) of one IQL net (p = that net's slice).
inline double iql_value(const fh::Dims &d, const fh::IqlOffsets &o, const dvec &p, const double *x) {
    dvec h1 = dense(p, o.W1, o.b1, x, d.D, d.Hi, true);
    dvec h2 = dense(p, o.W2, o.b2, h1.data(), d.Hi, d.Hi, true);
    return dot(p, o.w3, h2) + p[o.b3];
}
inline double iql_loss(const fh::Dims &d, const fh::IqlOffsets &o, const dvec &p, const dvec &x,
                       const dvec &target, uint32_t M, double tau) {
    double l = 0;
    for (uint32_t i = 0; i < M; ++i)
        l += expectile(target[i] - iql_value(d, o, p, &x[(size_t)i * d.D]), tau);
    return l / M;
}

// Z(x, τ) of the IQN net.
inline double iqn_z(const fh::Dims &d, const fh::IqnOffsets &o, const dvec &p, const double *x,
                    double tau) {
    dvec psi = dense(p, o.Wpsi, o.bpsi, x, d.D, d.Hq, true);
    dvec cosf(d.C);
    for (uint32_t k = 0; k < d.C; ++k) cosf[k] = std::cos(3.14159265358979323846 * k * tau);
    dvec phi = dense(p, o.Wphi, o.bphi, cosf.data(), d.C, d.Hq, true);
    dvec m(d.Hq);
    for (uint32_t j = 0; j < d.Hq; ++j) m[j] = psi[j] * phi[j];
    dvec h = dense(p, o.Wm, o.bm, m.data(), d.Hq, d.Hq, true);
    return dot(p, o.w_z, h) + p[o.b_z];
}
// L = mean_i Σ_n (1/N') Σ_m ρ^κ_{τ_in}(T_im − Z(x_i, τ_in)), tau [M, N], T [M, N'].
inline double iqn_loss(const fh::Dims &d, const fh::IqnOffsets &o, const dvec &p, const dvec &x,
                       const dvec &tau, const dvec &T, uint32_t M, double kappa) {
    double l = 0;
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t n = 0; n < d.N; ++n) {
            const double t = tau[(size_t)i * d.N + n];
            const double z = iqn_z(d, o, p, &x[(size_t)i * d.D], t);
            for (uint32_t m = 0; m < d.Nt; ++m)
                l += quantile_huber(T[(size_t)i * d.Nt + m] - z, t, kappa) / d.Nt;
        }
    return l / M;
}

// r̂(x) of the attention reward model, SPEC §4.
inline double attn_rhat(const fh::Dims &d, const fh::AttnOffsets &o, const dvec &p, const double *x) {
    const uint32_t T = d.T, dm = d.d;
    std::vector<dvec> E(T), Q(T), K(T), V(T);
    for (uint32_t t = 0; t < d.To; ++t) {
        E[t] = dense(p, o.Wt, o.bt, x + (size_t)t * d.td, d.td, dm, false);
        for (uint32_t j = 0; j < dm; ++j) E[t][j] += p[o.P + (size_t)t * dm + j];
    }
    if (d.G > 0) {
        E[d.To] = dense(p, o.Wg, o.bg, x + d.O, d.G, dm, false);
        for (uint32_t j = 0; j < dm; ++j) E[d.To][j] += p[o.P + (size_t)d.To * dm + j];
    }
    for (uint32_t t = 0; t < T; ++t) {
        Q[t] = dense(p, o.Wq, o.bq, E[t].data(), dm, dm, false);
        K[t] = dense(p, o.Wk, o.bk, E[t].data(), dm, dm, false);
        V[t] = dense(p, o.Wv, o.bv, E[t].data(), dm, dm, false);
    }
    std::vector<dvec> out(T, dvec(dm, 0.0));
    for (uint32_t h = 0; h < d.heads; ++h)
        for (uint32_t t = 0; t < T; ++t) {
            dvec s(T);
            for (uint32_t u = 0; u < T; ++u) {
                double acc = 0;
                for (uint32_t j = h * d.dh; j < (h + 1) * d.dh; ++j) acc += Q[t][j] * K[u][j];
                s[u] = acc / std::sqrt((double)d.dh);
            }
            const double mx = *std::max_element(s.begin(), s.end());
            double sum = 0;
            for (double &v : s) sum += (v = std::exp(v - mx));
            for (uint32_t u = 0; u < T; ++u)
                for (uint32_t j = h * d.dh; j < (h + 1) * d.dh; ++j) out[t][j] += s[u] / sum * V[u][j];
        }
    dvec pool(dm, 0.0);
    for (uint32_t t = 0; t < T; ++t) {
        dvec proj = dense(p, o.Wo, o.bo, out[t].data(), dm, dm, false);
        for (uint32_t j = 0; j < dm; ++j) pool[j] += (E[t][j] + proj[j]) / T;
    }
    dvec hr = dense(p, o.Wr1, o.br1, pool.data(), dm, d.hh, true);
    return dot(p, o.w_r2, hr) + p[o.b_r2];
}
inline double attn_loss(const fh::Dims &d, const fh::AttnOffsets &o, const dvec &p, const dvec &x,
                        const dvec &r, uint32_t M) {
    double l = 0;
    for (uint32_t i = 0; i < M; ++i) {
        const double e = attn_rhat(d, o, p, &x[(size_t)i * d.D]) - r[i];
        l += e * e;
    }
    return l / M;
}

// CQL on the branch heads: z_b = g_b U_bᵀ + e_b from the (given) branch features g_b [M, HB].
inline double cql_loss(const fh::Dims &d, const fh::QOffsets &o, const dvec &p,
                       const std::vector<dvec> &g, const int32_t *action, const dvec &omega,
                       uint32_t M, double alpha, double q_clip) {
    double l = 0;
    for (uint32_t b = 0; b < d.NB; ++b)
        for (uint32_t i = 0; i < M; ++i) {
            dvec q = dense(p, o.U[b], o.e[b], &g[b][(size_t)i * d.HB], d.HB, d.A, false);
            for (double &v : q) v = std::min(std::max(v, -q_clip), q_clip);
            const double mx = *std::max_element(q.begin(), q.end());
            double s = 0;
            for (double v : q) s += std::exp(v - mx);
            l += omega[i] * (mx + std::log(s) - q[action[(size_t)i * d.NB + b]]);
        }
    return alpha * l / ((double)M * d.NB);
}

// splitmix64-based uniforms and normals for test data.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 12345) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    double normal() {  // Box–Muller
        const double u1 = 1.0 - uniform(), u2 = uniform();
        return std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};

}  // namespace auxref
