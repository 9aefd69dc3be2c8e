// Finite-difference checks of every gradient of the auxiliary learners (SPEC §5.5): both IQL
// value nets, IQN (ψ, φ, merge, head), the attention reward model (token and goal embeddings,
// positional table, Q, K, V, output projection, reward head), the CQL gradient on the branch
// heads (with clamped logits), and the confidence head fed by the ensemble variance.
//
// Each learner's loss + gradient is a function of its flat parameter buffer (aux_learners.hpp),
// so every coordinate of every tensor is checked twice:
//  (a) "f64": against central differences (h = 1e-6) of an independent float64 implementation
//      of the SPEC formulas (test_aux_ref.hpp). This checks that the analytic float32 gradient
//      is the gradient of the SPEC's loss; the error left is float32 rounding of the library's
//      backward. Tolerance: per tensor ‖g − fd‖₂ / max(‖fd‖₂, floor) ≤ 1e-4, where floor is
//      1e-2 × (RMS of the whole gradient) × √(tensor size), so that a tensor whose true gradient
//      is ~0 (attn.bk) is judged against the scale of the others instead of against 0. Every
//      other tensor must have ‖fd‖₂ above the floor (else the check would be vacuous).
//  (b) "f32": against central differences with ε = 1e-3 of the library's own float32 loss
//      (the difference quotient evaluated in float64). This checks the backward against the
//      forward actually executed; float32 rounding of the forward, divided by 2ε, is the noise.
//      Tolerance 1e-2 with the same floor.
// The library's loss values must also match the float64 implementation (relative 1e-5).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "batch.hpp"
#include "cpu/aux_learners.hpp"
#include "cpu/cpu_step.hpp"
#include "init.hpp"
#include "layout.hpp"
#include "philox.hpp"
#include "test_aux_ref.hpp"
#include "testutil.h"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

using namespace fh;
using auxref::dvec;
using auxref::to_d;

namespace {

constexpr double kTol64 = 1e-4, kTol32 = 1e-2, kH64 = 1e-6, kEps32 = 1e-3;

struct Slice {
    std::string name;
    size_t off, n;  // within the flat vector under test
};

// The tensors of `buf` whose offsets lie in [base, base + total), relative to base.
std::vector<Slice> slices(const Layout &L, Buf buf, size_t base, size_t total) {
    std::vector<Slice> s;
    for (const TensorEntry &t : L.tensors)
        if (t.buf == buf && t.spec_id >= 0 && t.offset >= base && t.offset < base + total)
            s.push_back({t.name, t.offset - base, t.count()});
    return s;
}

struct Worst {
    double e64 = 0, e32 = 0;
};

// Checks `analytic` (dL/dp for the flat float32 parameters pf) against central differences of
// loss64 (float64 reference) and loss32 (the library's float32 loss), tensor by tensor.
Worst check_gradient(const char *what, const std::vector<Slice> &ts, std::vector<float> &pf,
                     const std::vector<float> &analytic,
                     const std::function<double(const dvec &)> &loss64,
                     const std::function<double(const std::vector<float> &)> &loss32,
                     const std::vector<std::string> &zero_grad = {}) {
    const size_t n = pf.size();
    dvec fd64(n, 0.0), fd32(n, 0.0);
    dvec pd = to_d(pf);
    for (const Slice &t : ts)
        for (size_t k = t.off; k < t.off + t.n; ++k) {
            const double keep = pd[k];
            pd[k] = keep + kH64;
            const double lp = loss64(pd);
            pd[k] = keep - kH64;
            const double lm = loss64(pd);
            pd[k] = keep;
            fd64[k] = (lp - lm) / (2 * kH64);

            const float kf = pf[k];
            const float up = (float)(kf + kEps32), dn = (float)(kf - kEps32);
            pf[k] = up;
            const double fp = loss32(pf);
            pf[k] = dn;
            const double fm = loss32(pf);
            pf[k] = kf;
            fd32[k] = (fp - fm) / ((double)up - (double)dn);
        }
    size_t count = 0;
    double all = 0;
    for (const Slice &t : ts)
        for (size_t k = t.off; k < t.off + t.n; ++k) all += fd64[k] * fd64[k], ++count;
    const double rms = std::sqrt(all / count);
    Worst w;
    for (const Slice &t : ts) {
        double n64 = 0, n32 = 0, ref = 0;
        for (size_t k = t.off; k < t.off + t.n; ++k) {
            n64 += (analytic[k] - fd64[k]) * (analytic[k] - fd64[k]);
            n32 += (analytic[k] - fd32[k]) * (analytic[k] - fd32[k]);
            ref += fd64[k] * fd64[k];
        }
        const double floor = 1e-2 * rms * std::sqrt((double)t.n);
        const double den = std::max(std::sqrt(ref), floor);
        const double e64 = std::sqrt(n64) / den, e32 = std::sqrt(n32) / den;
        const bool zero = std::find(zero_grad.begin(), zero_grad.end(), t.name) != zero_grad.end();
        printf("  %-8s %-12s n=%4zu |fd|=%.3e  err_f64=%.2e  err_f32=%.2e%s\n", what,
               t.name.c_str(), t.n, std::sqrt(ref), e64, e32, zero ? "  (true gradient 0)" : "");
        if (!(e64 <= kTol64)) fail_msg("%s %s: f64 FD error %.3g > %.1g", what, t.name.c_str(), e64, kTol64);
        // Where the true gradient is 0, float32 differences of the loss are rounding noise
        // (about 1e-8 / 2e-3 per coordinate), so only the float64 check means anything there.
        if (!zero && !(e32 <= kTol32))
            fail_msg("%s %s: f32 FD error %.3g > %.1g", what, t.name.c_str(), e32, kTol32);
        // Every tensor must take part: a gradient that is identically zero where the loss
        // depends on the tensor would pass a relative test only by the floor.
        if (!zero && !(std::sqrt(ref) > floor))
            fail_msg("%s %s: finite-difference gradient is ~0 (%.3g); test setup too weak", what,
                     t.name.c_str(), std::sqrt(ref));
        w.e64 = std::max(w.e64, e64);
        w.e32 = std::max(w.e32, e32);
    }
    printf("%s: worst f64 %.2e, worst f32 %.2e over %zu coordinates\n", what, w.e64, w.e32, count);
    return w;
}

// Parameters moved off their initial values (biases are 0 there) so no gradient is trivially
// zero, and inputs at unit scale.
struct Setup {
    fh_config cfg;
    Layout L;
    HostBuffers buf;
    auxref::Rng rng;
    Setup(fh_config c, uint64_t seed) : cfg(c), L(make_layout(make_dims(c))), rng(seed) {
        buf = initial_state(L, c.seed);
        for (Buf b : {BUF_Q, BUF_IQL, BUF_IQN, BUF_ATTN})
            for (float &x : buf[b]) x = 1.5f * x + 0.1f * (float)rng.normal();
        buf[BUF_Q_TARGET] = buf[BUF_Q];
        buf[BUF_IQN_TARGET] = buf[BUF_IQN];
    }
    std::vector<float> normals(size_t n, double scale = 1.0, double shift = 0.0) {
        std::vector<float> v(n);
        for (float &x : v) x = (float)(shift + scale * rng.normal());
        return v;
    }
};

const uint32_t kM = 6;  // rows in the gradient checks

}  // namespace

static void test_iql_gradients(void **) {
    Setup s(fh_test_small_config(), 1);
    const Dims &d = s.L.dims;
    const IqlOffsets &o = s.L.iql;
    std::vector<float> x = s.normals((size_t)kM * d.D), target = s.normals(kM, 1.0, 0.2);
    const dvec xd = to_d(x), td = to_d(target);
    const float taus[2] = {s.cfg.iql_tau_hi, s.cfg.iql_tau_lo};
    for (int net = 0; net < 2; ++net) {
        std::vector<float> p(s.buf[BUF_IQL].begin() + net * o.total,
                             s.buf[BUF_IQL].begin() + (net + 1) * o.total);
        std::vector<float> g(o.total), v(kM);
        const double loss = cpu::iql_loss_grad(d, o, p.data(), x.data(), target.data(), kM,
                                               taus[net], g.data(), v.data());
        const double ref = auxref::iql_loss(d, o, to_d(p), xd, td, kM, taus[net]);
        AUX_ASSERT_CLOSE(loss, ref, 1e-5 * ref);
        for (uint32_t i = 0; i < kM; ++i)
            AUX_ASSERT_CLOSE(v[i], auxref::iql_value(d, o, to_d(p), &xd[(size_t)i * d.D]), 1e-5);
        // Both branches of the expectile weight occur.
        int neg = 0;
        for (uint32_t i = 0; i < kM; ++i) neg += target[i] < v[i];
        assert_true(neg > 0 && neg < (int)kM);
        check_gradient(net == 0 ? "iql_hi" : "iql_lo", slices(s.L, BUF_IQL, net * o.total, o.total),
                       p, g,
                       [&](const dvec &q) { return auxref::iql_loss(d, o, q, xd, td, kM, taus[net]); },
                       [&](const std::vector<float> &q) {
                           return cpu::iql_loss_grad(d, o, q.data(), x.data(), target.data(), kM,
                                                     taus[net], nullptr, nullptr);
                       });
    }
}

static void check_iqn(float kappa, uint64_t seed) {
    Setup s(fh_test_small_config(), seed);
    const Dims &d = s.L.dims;
    const IqnOffsets &o = s.L.iqn;
    std::vector<float> x = s.normals((size_t)kM * d.D);
    std::vector<float> tau((size_t)kM * d.N);
    cpu::iqn_draw_taus(s.cfg.seed, 5, PURPOSE_IQN_ONLINE, kM, d.N, tau.data());
    // Targets around the current Z, spread 1.5 κ: TD errors of both signs and on both sides
    // of κ (counted below).
    std::vector<float> &p = s.buf[BUF_IQN];
    cpu::IqnCache fc;
    cpu::iqn_forward(d, o, p.data(), x.data(), kM, tau.data(), d.N, fc);
    double zbar = 0;
    for (float z : fc.z) zbar += z / fc.z.size();
    std::vector<float> T = s.normals((size_t)kM * d.Nt, 1.5 * kappa, zbar);
    const dvec xd = to_d(x), taud = to_d(tau), Td = to_d(T);
    std::vector<float> g(o.total), zm(kM);
    const double loss = cpu::iqn_loss_grad(d, o, p.data(), x.data(), kM, tau.data(), T.data(),
                                           kappa, g.data(), zm.data());
    const double ref = auxref::iqn_loss(d, o, to_d(p), xd, taud, Td, kM, kappa);
    AUX_ASSERT_CLOSE(loss, ref, 1e-5 * ref);
    // Errors T − Z of both signs and on both sides of κ.
    int pos_in = 0, pos_out = 0, neg_in = 0, neg_out = 0;
    for (uint32_t i = 0; i < kM; ++i) {
        double zsum = 0;
        for (uint32_t n = 0; n < d.N; ++n) {
            const double z = auxref::iqn_z(d, o, to_d(p), &xd[(size_t)i * d.D], tau[(size_t)i * d.N + n]);
            zsum += z;
            for (uint32_t m = 0; m < d.Nt; ++m) {
                const double u = T[(size_t)i * d.Nt + m] - z;
                (u > 0 ? (std::fabs(u) <= kappa ? pos_in : pos_out) : (std::fabs(u) <= kappa ? neg_in : neg_out))++;
            }
        }
        AUX_ASSERT_CLOSE(zm[i], zsum / d.N, 1e-5);
    }
    printf("iqn kappa=%g: errors +in %d +out %d -in %d -out %d\n", kappa, pos_in, pos_out, neg_in, neg_out);
    assert_true(pos_in > 0 && pos_out > 0 && neg_in > 0 && neg_out > 0);
    check_gradient("iqn", slices(s.L, BUF_IQN, 0, o.total), p, g,
                   [&](const dvec &q) { return auxref::iqn_loss(d, o, q, xd, taud, Td, kM, kappa); },
                   [&](const std::vector<float> &q) {
                       return cpu::iqn_loss_grad(d, o, q.data(), x.data(), kM, tau.data(), T.data(),
                                                 kappa, nullptr, nullptr);
                   });
}

static void test_iqn_gradients(void **) { check_iqn(1.0f, 2); }
static void test_iqn_gradients_small_kappa(void **) { check_iqn(0.3f, 3); }

static void check_attention(fh_config c, uint64_t seed) {
    Setup s(c, seed);
    const Dims &d = s.L.dims;
    const AttnOffsets &o = s.L.attn;
    std::vector<float> x = s.normals((size_t)kM * d.D), r = s.normals(kM);
    const dvec xd = to_d(x), rd = to_d(r);
    std::vector<float> &p = s.buf[BUF_ATTN];
    std::vector<float> g(o.total), rhat(kM);
    const double loss = cpu::attn_loss_grad(d, o, p.data(), x.data(), r.data(), kM, g.data(), rhat.data());
    const double ref = auxref::attn_loss(d, o, to_d(p), xd, rd, kM);
    AUX_ASSERT_CLOSE(loss, ref, 1e-5 * ref);
    for (uint32_t i = 0; i < kM; ++i)
        AUX_ASSERT_CLOSE(rhat[i], auxref::attn_rhat(d, o, to_d(p), &xd[(size_t)i * d.D]), 1e-5);
    const Worst w = check_gradient(
        d.G > 0 ? "attn" : "attn_G0", slices(s.L, BUF_ATTN, 0, o.total), p, g,
        [&](const dvec &q) { return auxref::attn_loss(d, o, q, xd, rd, kM); },
        [&](const std::vector<float> &q) {
            return cpu::attn_loss_grad(d, o, q.data(), x.data(), r.data(), kM, nullptr, nullptr);
        },
        {"attn.bk"});
    (void)w;
    // bk shifts every score of a query row equally: its true gradient is 0, the float32 one is
    // rounding noise far below the gradient scale.
    double nbk = 0, nall = 0;
    for (uint32_t j = 0; j < d.d; ++j) nbk += (double)g[o.bk + j] * g[o.bk + j];
    for (float v : g) nall += (double)v * v;
    printf("  |d bk| = %.2e vs |grad| = %.2e\n", std::sqrt(nbk), std::sqrt(nall));
    assert_true(std::sqrt(nbk) < 1e-5 * std::sqrt(nall));
}

static void test_attention_gradients_with_goal(void **) {
    fh_config c = fh_test_small_config();  // O = 8, td = 2: T_o = 4 obs tokens + goal = 5
    check_attention(c, 4);
}

static void test_attention_gradients_no_goal(void **) {
    fh_config c = fh_test_small_config();
    c.goal_dim = 0;  // no goal token: T = T_o = 4, no Wg, bg
    c.attn_heads = 4;  // d_head = 2
    check_attention(c, 5);
}

static void test_cql_gradients(void **) {
    fh_config c = fh_test_small_config();
    c.sn_layers = 0;
    c.q_clip = 0.8f;  // some logits clamped: their gradient must be masked
    Setup s(c, 6);
    const Dims &d = s.L.dims;
    const QOffsets &o = s.L.q;
    std::vector<float> x = s.normals((size_t)kM * d.D);
    std::vector<float> &p = s.buf[BUF_Q];
    for (uint32_t b = 0; b < d.NB; ++b)  // larger head weights: logits spread past ±q_clip
        for (size_t k = 0; k < (size_t)d.A * d.HB; ++k) p[o.U[b] + k] *= 4.0f;
    std::vector<int32_t> act((size_t)kM * d.NB);
    for (size_t k = 0; k < act.size(); ++k) act[k] = (int32_t)(s.rng.next() % d.A);
    std::vector<float> omega(kM);
    for (uint32_t i = 0; i < kM; ++i) omega[i] = 0.3f + 2.0f * (float)s.rng.uniform();
    const float alpha = 0.7f;
    auto forward = [&](const std::vector<float> &q, cpu::QCache &cache) {
        cpu::q_forward(d, s.L, cpu::QView{q.data(), q.data() + o.W1, q.data() + o.W2}, x.data(),
                       kM, cache, c.q_clip);
    };
    cpu::QCache cache;
    forward(p, cache);
    size_t clamped = 0;
    for (uint32_t b = 0; b < d.NB; ++b)
        for (float z : cache.z[b]) clamped += std::fabs(z) >= c.q_clip;
    printf("cql: %zu of %u logits clamped\n", clamped, kM * d.NB * d.A);
    assert_true(clamped > 0);
    // The gradient is ADDED: start from a known non-zero "TD part" and subtract it afterwards.
    std::vector<float> g(o.total), td(o.total);
    for (size_t k = 0; k < o.total; ++k) td[k] = g[k] = 0.01f * (float)((k * 7919) % 13) - 0.06f;
    const double loss = cpu::cql_loss_grad(d, o, cache, act.data(), omega.data(), alpha, c.q_clip, g.data());
    std::vector<dvec> gb(d.NB);
    for (uint32_t b = 0; b < d.NB; ++b) gb[b] = to_d(cache.g[b]);
    const dvec od = to_d(omega);
    const double ref = auxref::cql_loss(d, o, to_d(p), gb, act.data(), od, kM, alpha, c.q_clip);
    AUX_ASSERT_CLOSE(loss, ref, 1e-5 * ref);
    // Only U_b and e_b change; the rest of the gradient is untouched bit for bit.
    std::vector<bool> head(o.total, false);
    for (uint32_t b = 0; b < d.NB; ++b) {
        for (size_t k = 0; k < (size_t)d.A * d.HB; ++k) head[o.U[b] + k] = true;
        for (size_t k = 0; k < d.A; ++k) head[o.e[b] + k] = true;
    }
    for (size_t k = 0; k < o.total; ++k) {
        if (!head[k]) assert_true(g[k] == td[k]);
        g[k] -= td[k];
    }
    std::vector<Slice> ts;
    for (const Slice &t : slices(s.L, BUF_Q, 0, o.total))
        if (t.name.rfind("q.U.", 0) == 0 || t.name.rfind("q.e.", 0) == 0) ts.push_back(t);
    check_gradient("cql", ts, p, g,
                   [&](const dvec &q) { return auxref::cql_loss(d, o, q, gb, act.data(), od, kM, alpha, c.q_clip); },
                   [&](const std::vector<float> &q) {
                       cpu::QCache cc;
                       forward(q, cc);
                       return cpu::cql_loss_grad(d, o, cc, act.data(), omega.data(), alpha, c.q_clip, nullptr);
                   });
}

// The confidence head (confidence.cpp, SPEC §5.5 step 7) trained on the variance produced by
// this file's learners: the whole aux chain up to it runs, then the head's gradient is checked
// against central differences of the library's own conf_loss (ε = 1e-3, float32 forward).
// test_grad_q.cpp checks the same gradient against a float64 re-implementation.
static void test_confidence_gradient_after_ensemble(void **) {
    fh_config c = fh_test_small_config();
    Setup s(c, 7);
    const Dims &d = s.L.dims;
    const QOffsets &o = s.L.q;
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 7);
    HostBatch batch = copy_batch(d, &tb.batch);
    fh_test_batch_free(&tb);
    cpu::CpuStep st(c, s.L, s.buf);
    st.batch = &batch;
    st.step = 2;
    cpu::her_relabel(st);
    cpu::spectral_power(st);
    cpu::ddqn_online_next(st);
    cpu::ddqn_target(st);
    cpu::ddqn_join(st);
    cpu::q_forward(d, s.L, st.online_view(), st.x.data(), d.B, st.online, c.q_clip);
    cpu::ema_targets(st);
    cpu::iql(st);
    cpu::iqn(st);
    cpu::ensemble(st);
    double vs = 0;
    for (uint32_t i = 0; i < d.B; ++i) vs += s.buf[BUF_ENS_VAR][i];
    assert_true(vs > 0);
    std::fill(st.grad.begin(), st.grad.end(), 0.0f);
    cpu::confidence(st);
    const std::vector<float> g = st.grad;
    auto loss = [&]() {
        cpu::q_forward_trunk(d, s.L, st.online_view(), st.x.data(), d.B, st.online);
        cpu::confidence(st);
        return (double)st.conf_loss;
    };
    double num = 0, den = 0;
    for (size_t k = o.w_u; k <= o.b_u; ++k) {  // w_u [H] then b_u [1], contiguous
        float &w = s.buf[BUF_Q][k];
        const float keep = w, up = keep + 1e-3f, dn = keep - 1e-3f;
        w = up;
        const double lp = loss();
        w = dn;
        const double lm = loss();
        w = keep;
        const double fd = (lp - lm) / ((double)up - (double)dn);
        num += (g[k] - fd) * (g[k] - fd);
        den += fd * fd;
    }
    const double e = std::sqrt(num / den);
    printf("confidence head: |fd| = %.3e, f32 FD relative error %.2e\n", std::sqrt(den), e);
    assert_true(e <= kTol32);
}

// The tasks reuse their scratch (AuxWork) from step to step. A call with a work struct that a
// larger call has filled must give bit-identical results to a call with fresh scratch.
static void test_scratch_reuse_is_exact(void **) {
    Setup s(fh_test_small_config(), 8);
    const Dims &d = s.L.dims;
    const uint32_t big = 11;
    std::vector<float> xb = s.normals((size_t)big * d.D), yb = s.normals(big);
    std::vector<float> x = s.normals((size_t)kM * d.D), y = s.normals(kM);
    std::vector<float> tb((size_t)big * d.N), t((size_t)kM * d.N);
    cpu::iqn_draw_taus(1, 2, PURPOSE_IQN_ONLINE, big, d.N, tb.data());
    cpu::iqn_draw_taus(1, 3, PURPOSE_IQN_ONLINE, kM, d.N, t.data());
    std::vector<float> Tb = s.normals((size_t)big * d.Nt), T = s.normals((size_t)kM * d.Nt);
    auto same = [](const std::vector<float> &a, const std::vector<float> &b) {
        assert_int_equal(a.size(), b.size());
        assert_memory_equal(a.data(), b.data(), a.size() * sizeof(float));
    };
    {
        const IqlOffsets &o = s.L.iql;
        const float *p = s.buf[BUF_IQL].data();
        std::vector<float> g0(o.total), g1(o.total), v0(kM), v1(kM), gb(o.total), vb(big);
        cpu::IqlWork w;
        cpu::iql_loss_grad(d, o, p, xb.data(), yb.data(), big, 0.9f, gb.data(), vb.data(), &w);
        const double l1 = cpu::iql_loss_grad(d, o, p, x.data(), y.data(), kM, 0.9f, g1.data(), v1.data(), &w);
        const double l0 = cpu::iql_loss_grad(d, o, p, x.data(), y.data(), kM, 0.9f, g0.data(), v0.data());
        assert_true(l0 == l1);
        same(g0, g1);
        same(v0, v1);
    }
    {
        const IqnOffsets &o = s.L.iqn;
        const float *p = s.buf[BUF_IQN].data();
        std::vector<float> g0(o.total), g1(o.total), z0(kM), z1(kM), gb(o.total), zb(big);
        cpu::IqnWork w;
        cpu::iqn_loss_grad(d, o, p, xb.data(), big, tb.data(), Tb.data(), 1.0f, gb.data(), zb.data(), &w);
        const double l1 = cpu::iqn_loss_grad(d, o, p, x.data(), kM, t.data(), T.data(), 1.0f, g1.data(), z1.data(), &w);
        const double l0 = cpu::iqn_loss_grad(d, o, p, x.data(), kM, t.data(), T.data(), 1.0f, g0.data(), z0.data());
        assert_true(l0 == l1);
        same(g0, g1);
        same(z0, z1);
    }
    {
        const AttnOffsets &o = s.L.attn;
        const float *p = s.buf[BUF_ATTN].data();
        std::vector<float> g0(o.total), g1(o.total), r0(kM), r1(kM), gb(o.total), rb(big);
        cpu::AttnWork w;
        cpu::attn_loss_grad(d, o, p, xb.data(), yb.data(), big, gb.data(), rb.data(), &w);
        const double l1 = cpu::attn_loss_grad(d, o, p, x.data(), y.data(), kM, g1.data(), r1.data(), &w);
        const double l0 = cpu::attn_loss_grad(d, o, p, x.data(), y.data(), kM, g0.data(), r0.data());
        assert_true(l0 == l1);
        same(g0, g1);
        same(r0, r1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iql_gradients),
        cmocka_unit_test(test_iqn_gradients),
        cmocka_unit_test(test_iqn_gradients_small_kappa),
        cmocka_unit_test(test_attention_gradients_with_goal),
        cmocka_unit_test(test_attention_gradients_no_goal),
        cmocka_unit_test(test_cql_gradients),
        cmocka_unit_test(test_confidence_gradient_after_ensemble),
        cmocka_unit_test(test_scratch_reuse_is_exact),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
