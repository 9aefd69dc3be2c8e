// Loss values of the auxiliary learners (SPEC §5.5) on a tiny batch (B = 3) against numbers
// computed by hand (written out in the comments) and against an independent float64
// evaluation: the expectile loss and advantage weights (IQL, with the Adam step it drives), the
// quantile Huber loss with TD errors of both signs and on both sides of κ (IQN), logsumexp with
// q at and near q_clip = 100 (CQL; exp(100) overflows float32), and the ensemble mean and
// population variance. The nets are set up so their outputs are known constants: with every
// weight 0, SiLU(0) = 0 and the output is the last bias.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cpu/aux_learners.hpp"
#include "cpu/cpu_step.hpp"
#include "init.hpp"
#include "layout.hpp"
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

namespace {
fh_config tiny_config() {
    fh_config c = fh_test_small_config();
    c.batch_size = 3;
    return c;
}
struct Setup {
    fh_config cfg;
    Layout L;
    HostBuffers buf;
    cpu::CpuStep *s;
    explicit Setup(fh_config c) : cfg(c), L(make_layout(make_dims(c))) {
        buf = initial_state(L, c.seed);
        s = new cpu::CpuStep(cfg, L, buf);
    }
    ~Setup() { delete s; }
};
}  // namespace

// IQL: V_hi ≡ 0.25 and V_lo ≡ −0.5 (only b3 non-zero), Q̄sa = {2.25, −0.75, 0.75}.
//   hi: ũ = {2, −1, 0.5}, τ = 0.9: L = (0.9·4 + 0.1·1 + 0.9·0.25)/3 = 3.925/3 = 1.308333…
//       dL/db3 = −(2/3)(0.9·2 − 0.1·1 + 0.9·0.5) = −1.433333…
//   lo: ũ = {2.75, −0.25, 1.25}, τ = 0.1: L = (0.1·7.5625 + 0.9·0.0625 + 0.1·1.5625)/3
//       = 0.96875/3 = 0.3229166…
//   ω = min(exp(3 ũ_hi), 100) = {min(e⁶ = 403.4, 100) = 100, e⁻³ = 0.0497871, e^1.5 = 4.481689}
static void test_expectile_loss_and_weights(void **) {
    Setup t(tiny_config());
    const IqlOffsets &o = t.L.iql;
    cpu::CpuStep &s = *t.s;
    std::fill(t.buf[BUF_IQL].begin(), t.buf[BUF_IQL].end(), 0.0f);
    t.buf[BUF_IQL][o.b3] = 0.25f;
    t.buf[BUF_IQL][o.total + o.b3] = -0.5f;
    const float qbar[3] = {2.25f, -0.75f, 0.75f};
    std::copy(qbar, qbar + 3, s.qbar_sa.begin());
    for (float &x : s.x) x = 0.3f;  // any input: the nets are constant
    s.step = 0;
    cpu::iql(s);
    AUX_ASSERT_CLOSE(s.iql_loss[0], 3.925 / 3, 1e-7);
    AUX_ASSERT_CLOSE(s.iql_loss[1], 0.96875 / 3, 1e-7);
    // The float64 evaluation of the expectile loss agrees.
    double lh = 0, ll = 0;
    for (int i = 0; i < 3; ++i) {
        lh += auxref::expectile(qbar[i] - 0.25, 0.9);
        ll += auxref::expectile(qbar[i] + 0.5, 0.1);
    }
    AUX_ASSERT_CLOSE(s.iql_loss[0], lh / 3, 1e-6);
    AUX_ASSERT_CLOSE(s.iql_loss[1], ll / 3, 1e-6);
    for (int i = 0; i < 3; ++i) {
        assert_true(s.v_hi[i] == 0.25f);  // values before the update
        assert_true(s.v_lo[i] == -0.5f);
    }
    AUX_ASSERT_CLOSE(s.omega[0], 100.0, 0);
    AUX_ASSERT_CLOSE(s.omega[1], std::exp(-3.0), 1e-7);
    AUX_ASSERT_CLOSE(s.omega[2], std::exp(1.5), 1e-5);
    // The gradient through iql_loss_grad: only b3 has one (h2 = 0, w3 = 0).
    std::vector<float> p(o.total, 0.0f), g(o.total);
    p[o.b3] = 0.25f;
    cpu::iql_loss_grad(t.L.dims, o, p.data(), s.x.data(), qbar, 3, 0.9f, g.data(), nullptr);
    for (size_t k = 0; k < o.total; ++k)
        AUX_ASSERT_CLOSE(g[k], k == o.b3 ? -2.15 * 2 / 3 : 0.0, 1e-6);
    // Adam (t = 1) moves b3 by lr against the gradient's sign and nothing else (zero gradients
    // give zero steps): hi up, lo (dL/db3 = −(2/3)(0.1·2.75 − 0.9·0.25 + 0.1·1.25) < 0) up.
    const double lr = t.cfg.lr_aux;
    for (size_t k = 0; k < 2 * o.total; ++k) {
        const double want = k == o.b3 ? 0.25 + lr : k == o.total + o.b3 ? -0.5 + lr : 0.0;
        AUX_ASSERT_CLOSE(t.buf[BUF_IQL][k], want, 1e-3 * lr);
    }
    // Cap and overflow: exp(3·1000) is +inf in float32, the cap still applies.
    AUX_ASSERT_CLOSE(cpu::awr_weight(1000.0f, 0.0f, 3.0f, 100.0f), 100.0, 0);
    AUX_ASSERT_CLOSE(cpu::awr_weight(0.5f, 0.0f, 3.0f, 100.0f), std::exp(1.5), 1e-5);
}

// IQN: Z ≡ 0.25 (only b_z non-zero), N = N' = 2, τ = {0.1, 0.7 | 0.25, 0.5 | 0.9, 0.3},
// T = {0.75, −1.75 | 3.25, 0 | 0.25, 1.75}: u = T − Z = {0.5, −2 | 3, −0.25 | 0, 1.5}.
//   κ = 1:   huber = {0.125, 1.5 | 2.5, 0.03125 | 0, 1}
//     (i,n) terms (1/2)Σ_m |τ − [u<0]| huber/κ:
//     0.68125, 0.26875 | 0.32421875, 0.6328125 | 0.45, 0.15   → L = 2.50703125/3
//     dL/db_z = −(1/6) Σ |τ−[u<0]| huber'(u)/κ = −(−0.85 + 0.05 + 0.0625 + 0.375 + 0.9 + 0.3)/6
//             = −0.8375/6
//   κ = 0.5: huber/κ = {0.25, 1.75 | 2.75, 0.0625 | 0, 1.25}
//     0.8, 0.35 | 0.3671875, 0.703125 | 0.5625, 0.1875        → L = 2.9703125/3
//     huber'/κ = {1, −1 | 1, −0.5 | 0, 1}: dL/db_z = −(−0.8 + 0.4 − 0.125 + 0.25 + 0.9 + 0.3)/6
//             = −0.925/6
static void check_quantile_huber(float kappa, double want_loss, double want_dbz) {
    fh_config c = tiny_config();
    c.iqn_n = 2;
    c.iqn_n_target = 2;
    const Layout L = make_layout(make_dims(c));
    const Dims &d = L.dims;
    const IqnOffsets &o = L.iqn;
    std::vector<float> p(o.total, 0.0f), g(o.total), zm(3), x((size_t)3 * d.D, -0.7f);
    p[o.b_z] = 0.25f;
    const float tau[6] = {0.1f, 0.7f, 0.25f, 0.5f, 0.9f, 0.3f};
    const float T[6] = {0.75f, -1.75f, 3.25f, 0.0f, 0.25f, 1.75f};
    const double loss = cpu::iqn_loss_grad(d, o, p.data(), x.data(), 3, tau, T, kappa, g.data(), zm.data());
    printf("quantile Huber kappa=%g: loss %.9f (hand %.9f), db_z %.9f (hand %.9f)\n", kappa,
           loss, want_loss, g[o.b_z], want_dbz);
    AUX_ASSERT_CLOSE(loss, want_loss, 1e-7);
    AUX_ASSERT_CLOSE(g[o.b_z], want_dbz, 1e-7);
    for (int i = 0; i < 3; ++i) AUX_ASSERT_CLOSE(zm[i], 0.25, 0);
    // Float64 evaluation of the same formula (auxref::quantile_huber) with the float τ.
    double ref = 0;
    for (int i = 0; i < 3; ++i)
        for (int n = 0; n < 2; ++n)
            for (int m = 0; m < 2; ++m) ref += auxref::quantile_huber(T[i * 2 + m] - 0.25, tau[i * 2 + n], kappa) / 2;
    AUX_ASSERT_CLOSE(loss, ref / 3, 1e-7);
    // Only the head bias has a gradient when every weight is 0... except w_z, whose gradient
    // is Σ dZ · h with h = SiLU(bm = 0) = 0: zero too.
    for (size_t k = 0; k < o.total; ++k)
        if (k != o.b_z) assert_true(g[k] == 0.0f);
}
static void test_quantile_huber_kappa_1(void **) { check_quantile_huber(1.0f, 2.50703125 / 3, -0.8375 / 6); }
static void test_quantile_huber_kappa_half(void **) { check_quantile_huber(0.5f, 2.9703125 / 3, -0.925 / 6); }

// CQL with q at and near q_clip = 100: NB = 1, A = 4, HB = 3 and g_b = identity rows, so that
// dU_b[a, i] = dz[i, a] shows each logit's gradient.
static void test_logsumexp_near_q_clip(void **) {
    fh_config c = tiny_config();
    c.num_branches = 1;
    c.actions_per_branch = 4;
    c.branch_hidden = 3;
    const Layout L = make_layout(make_dims(c));
    const Dims &d = L.dims;
    const float qc = 100.0f, alpha = 0.1f;
    const float z[3][4] = {{99.5f, 99.0f, 100.5f, -99.0f},    // a = 2 clamped to 100, masked
                           {99.9f, 99.9f, 99.9f, 99.9f},      // ties: lse = 99.9 + ln 4
                           {-100.5f, 50.0f, 99.99f, 0.0f}};   // a = 0 clamped to −100, masked
    const int32_t act[3] = {1, 0, 3};
    const float omega[3] = {1.0f, 2.0f, 0.5f};
    cpu::QCache cache;
    cache.M = 3;
    cache.z.assign(1, cpu::Vec(12));
    cache.q.assign(1, cpu::Vec(12));
    cache.g.assign(1, cpu::Vec(9, 0.0f));
    for (int i = 0; i < 3; ++i) {
        for (int a = 0; a < 4; ++a) {
            cache.z[0][i * 4 + a] = z[i][a];
            cache.q[0][i * 4 + a] = std::min(std::max(z[i][a], -qc), qc);
        }
        cache.g[0][i * 3 + i] = 1.0f;
    }
    assert_true(std::isinf(std::exp(100.0f)));  // the naive sum would overflow
    std::vector<float> grad(L.q.total, 0.0f);
    const double loss = cpu::cql_loss_grad(d, L.q, cache, act, omega, alpha, qc, grad.data());
    // Float64 by hand: lse_i = max_i + ln Σ_a exp(q_ia − max_i).
    double want = 0;
    double lse[3];
    for (int i = 0; i < 3; ++i) {
        double q[4], mx = -1e300, sum = 0;
        for (int a = 0; a < 4; ++a) mx = std::max(mx, q[a] = std::min(std::max((double)z[i][a], -100.0), 100.0));
        for (int a = 0; a < 4; ++a) sum += std::exp(q[a] - mx);
        lse[i] = mx + std::log(sum);
        want += omega[i] * (lse[i] - q[act[i]]);
    }
    want *= alpha / 3.0;
    // Row 1 by hand: 99.9 + ln 4 − 99.9 = 1.3862944, weighted by ω = 2.
    AUX_ASSERT_CLOSE(lse[1] - 99.9f, std::log(4.0), 1e-12);
    printf("cql loss %.9f, float64 %.9f\n", loss, want);
    assert_true(std::isfinite(loss));
    AUX_ASSERT_CLOSE(loss, want, 1e-6 * want);
    for (int i = 0; i < 3; ++i)
        for (int a = 0; a < 4; ++a) {
            const double q = std::min(std::max((double)z[i][a], -100.0), 100.0);
            const bool inside = z[i][a] > -qc && z[i][a] < qc;
            const double dz = inside ? alpha * omega[i] / 3.0 * (std::exp(q - lse[i]) - (a == act[i])) : 0.0;
            const float got = grad[L.q.U[0] + (size_t)a * 3 + i];
            assert_true(std::isfinite(got));
            if (!inside) assert_true(got == 0.0f);
            AUX_ASSERT_CLOSE(got, dz, 1e-7);
        }
    for (int a = 0; a < 4; ++a) {  // de = Σ_i dz[i, a]
        double s = 0;
        for (int i = 0; i < 3; ++i) s += grad[L.q.U[0] + (size_t)a * 3 + i];
        AUX_ASSERT_CLOSE(grad[L.q.e[0] + a], s, 1e-7);
    }
}

// Ensemble over {Q̄sa, V_hi, V_lo, z_mean}:
//   {1, 2, 3, 4}:                    μ = 2.5,       s² = (2.25 + 0.25 + 0.25 + 2.25)/4 = 1.25
//   {1000.25, 1000.5, 1000.75, 1001}: μ = 1000.625,  s² = 0.3125/4 = 0.078125 (a large common
//                                    offset: a one-pass float32 E[x²] − μ² would lose it)
//   {−3, −3, −3, −3}:                μ = −3,        s² = 0
//   ensemble_std = (√1.25 + √0.078125 + 0)/3
static void test_ensemble_mean_and_variance(void **) {
    Setup t(tiny_config());
    cpu::CpuStep &s = *t.s;
    const float e[3][4] = {{1, 2, 3, 4}, {1000.25f, 1000.5f, 1000.75f, 1001.0f}, {-3, -3, -3, -3}};
    for (int i = 0; i < 3; ++i) {
        s.qbar_sa[i] = e[i][0];
        s.v_hi[i] = e[i][1];
        s.v_lo[i] = e[i][2];
        s.z_mean[i] = e[i][3];
    }
    cpu::ensemble(s);
    const float *mu = t.buf[BUF_ENS_MEAN].data(), *var = t.buf[BUF_ENS_VAR].data();
    assert_true(mu[0] == 2.5f && mu[1] == 1000.625f && mu[2] == -3.0f);
    assert_true(var[0] == 1.25f && var[1] == 0.078125f && var[2] == 0.0f);
    AUX_ASSERT_CLOSE(s.ensemble_std, (std::sqrt(1.25) + std::sqrt(0.078125)) / 3, 1e-7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expectile_loss_and_weights),
        cmocka_unit_test(test_quantile_huber_kappa_1),
        cmocka_unit_test(test_quantile_huber_kappa_half),
        cmocka_unit_test(test_logsumexp_near_q_clip),
        cmocka_unit_test(test_ensemble_mean_and_variance),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
