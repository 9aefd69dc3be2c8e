// The auxiliary learners learn (SPEC §5.5): each learner's own step function (iql(), iqn(),
// attention(): forward, loss, backward and its Adam step) is run on fresh samples of a fixed
// synthetic problem whose answer is known, and the result is compared with that answer.
//  - IQL: Q̄sa = 0.5·x₀ + ε with ε ~ Exp(1) − 1, so V_τ(x) = 0.5·x₀ + e_τ − 1 where e_τ is the
//    τ-expectile of Exp(1), the root of τ e^{−e} = (1 − τ)(e − 1 + e^{−e}) (solved by bisection).
//  - IQN: terminal transitions (d̃ = 1), so T = r̃ = 0.5·x₀ + ε, and Z(x, τ) must approach the
//    τ-"quantile" of that distribution: with κ = 1 the minimiser of E ρ^κ_τ(r − z) (the Huber
//    quantile, solved numerically), and with a small κ the plain quantile −ln(1 − τ) − 1.
//  - attention: r = 2·m₀·g₀ + m₁ with m_j the mean over obs tokens of feature j and g the goal:
//    an interaction between tokens and the goal token. The loss must fall by a large factor.
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <functional>
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

struct Setup {
    fh_config cfg;  // the step reads it by reference: the tests lower lr_aux in a second phase
    Layout L;
    HostBuffers buf;
    cpu::CpuStep *s;
    auxref::Rng rng;
    explicit Setup(fh_config c, uint64_t seed) : cfg(c), L(make_layout(make_dims(c))), rng(seed) {
        buf = initial_state(L, c.seed);
        s = new cpu::CpuStep(cfg, L, buf);
    }
    ~Setup() { delete s; }
    double eps() { return -std::log(1.0 - rng.uniform()) - 1.0; }  // Exp(1) − 1
    void inputs(std::vector<float> &x, uint32_t rows) {
        for (size_t k = 0; k < (size_t)rows * L.dims.D; ++k) x[k] = (float)(2 * rng.uniform() - 1);
    }
};

// Root of f on [lo, hi] by bisection (f(lo) and f(hi) of opposite signs).
double bisect(const std::function<double(double)> &f, double lo, double hi) {
    const bool up = f(hi) > 0;
    for (int k = 0; k < 60; ++k) {
        const double mid = 0.5 * (lo + hi);
        ((f(mid) > 0) == up ? hi : lo) = mid;
    }
    return 0.5 * (lo + hi);
}

// τ-expectile of Exp(1): τ E(X − e)₊ = (1 − τ) E(e − X)₊ with E(X − e)₊ = e^{−e} and
// E(e − X)₊ = e − 1 + e^{−e}.
double exp1_expectile(double tau) {
    return bisect([tau](double e) { return (1 - tau) * (e - 1 + std::exp(-e)) - tau * std::exp(-e); },
                  0.0, 20.0);
}

// Minimiser z of E ρ^κ_τ(X − z) for X ~ Exp(1): the root of
// E[|τ − 1(X < z)| huber'_κ(X − z)] = 0, by midpoint-rule integration against e^{−x}.
double exp1_huber_quantile(double tau, double kappa) {
    auto g = [tau, kappa](double z) {
        double acc = 0;
        const double h = 1e-3;
        for (double xx = 0.5 * h; xx < 40; xx += h) {
            const double u = xx - z;
            const double hp = std::fabs(u) <= kappa ? u : (u > 0 ? kappa : -kappa);
            acc += std::fabs(tau - (u < 0 ? 1.0 : 0.0)) * hp * std::exp(-xx) * h;
        }
        return acc;  // decreasing in z
    };
    return bisect(g, 0.0, 10.0);
}

}  // namespace

static void test_iql_learns_expectiles(void **) {
    fh_config c = fh_test_small_config();
    c.batch_size = 256;
    c.obs_dim = 4;
    c.goal_dim = 0;
    c.attn_token_dim = 2;
    c.iql_hidden = 32;
    c.lr_aux = 3e-3f;
    Setup t(c, 11);
    cpu::CpuStep &s = *t.s;
    const Dims &d = t.L.dims;
    for (uint64_t k = 0; k < 3000; ++k) {
        if (k == 2000) t.cfg.lr_aux = 3e-4f;
        t.inputs(s.x, d.B);
        for (uint32_t i = 0; i < d.B; ++i) s.qbar_sa[i] = (float)(0.5 * s.x[(size_t)i * d.D] + t.eps());
        s.step = k;
        cpu::iql(s);
    }
    // Evaluate both nets on fresh inputs against the known answer.
    const uint32_t M = 512;
    std::vector<float> x((size_t)M * d.D);
    t.inputs(x, M);
    const float taus[2] = {c.iql_tau_hi, c.iql_tau_lo};
    for (int net = 0; net < 2; ++net) {
        const double e = exp1_expectile(taus[net]);
        cpu::IqlCache cache;
        cpu::iql_forward(d, t.L.iql, t.buf[BUF_IQL].data() + net * t.L.iql.total, x.data(), M, cache);
        double err = 0, bias = 0;
        for (uint32_t i = 0; i < M; ++i) {
            const double want = 0.5 * x[(size_t)i * d.D] + e - 1;
            err += std::fabs(cache.v[i] - want) / M;
            bias += (cache.v[i] - want) / M;
        }
        printf("IQL tau=%.1f: expectile of Exp(1)-1 = %.4f; mean |V - V*| = %.4f, mean bias %.4f\n",
               taus[net], e - 1, err, bias);
        assert_true(err < 0.05);
    }
    // The expectile ordering the advantage weights rely on: V_hi > V_lo by about e_0.9 − e_0.1.
    assert_true(exp1_expectile(0.9) - exp1_expectile(0.1) > 1.0);
}

static void check_iqn_quantiles(float kappa, bool huber_quantile, double tol) {
    fh_config c = fh_test_small_config();
    c.batch_size = 64;
    c.obs_dim = 4;
    c.goal_dim = 0;
    c.attn_token_dim = 2;
    c.iqn_hidden = 32;
    c.iqn_cos = 16;
    c.iqn_n = 8;
    c.iqn_n_target = 8;
    c.huber_kappa = kappa;
    c.lr_aux = 2e-3f;
    Setup t(c, 12);
    cpu::CpuStep &s = *t.s;
    const Dims &d = t.L.dims;
    std::fill(s.done.begin(), s.done.end(), 1.0f);  // terminal: T = r̃
    for (uint64_t k = 0; k < 3000; ++k) {
        if (k == 2000) t.cfg.lr_aux = 2e-4f;
        t.inputs(s.x, d.B);
        t.inputs(s.xn, d.B);
        for (uint32_t i = 0; i < d.B; ++i) s.r[i] = (float)(0.5 * s.x[(size_t)i * d.D] + t.eps());
        s.step = k;
        cpu::iqn(s);
        cpu::iqn_adam(s);
    }
    const uint32_t M = 256, NT = 5;
    const float grid[NT] = {0.1f, 0.25f, 0.5f, 0.75f, 0.9f};
    std::vector<float> x((size_t)M * d.D), tau((size_t)M * NT);
    t.inputs(x, M);
    for (uint32_t i = 0; i < M; ++i)
        for (uint32_t n = 0; n < NT; ++n) tau[(size_t)i * NT + n] = grid[n];
    cpu::IqnCache cache;
    cpu::iqn_forward(d, t.L.iqn, t.buf[BUF_IQN].data(), x.data(), M, tau.data(), NT, cache);
    double worst = 0;
    for (uint32_t n = 0; n < NT; ++n) {
        const double q = (huber_quantile ? exp1_huber_quantile(grid[n], kappa) : -std::log(1.0 - grid[n])) - 1;
        double err = 0;
        for (uint32_t i = 0; i < M; ++i)
            err += std::fabs(cache.z[(size_t)i * NT + n] - (0.5 * x[(size_t)i * d.D] + q)) / M;
        printf("IQN kappa=%g tau=%.2f: target %s %.4f, mean |Z - Z*| = %.4f\n", kappa, grid[n],
               huber_quantile ? "Huber quantile" : "quantile", q, err);
        worst = std::max(worst, err);
    }
    assert_true(worst < tol);
}

static void test_iqn_learns_huber_quantiles(void **) { check_iqn_quantiles(1.0f, true, 0.08); }
static void test_iqn_learns_quantiles_small_kappa(void **) { check_iqn_quantiles(0.02f, false, 0.1); }

static void test_attention_learns_token_reward(void **) {
    fh_config c = fh_test_small_config();  // O = 8, td = 2 (4 obs tokens), G = 2 (goal token)
    c.batch_size = 128;
    c.attn_d_model = 16;
    c.attn_heads = 2;
    c.attn_head_hidden = 32;
    c.lr_aux = 3e-3f;
    Setup t(c, 13);
    cpu::CpuStep &s = *t.s;
    const Dims &d = t.L.dims;
    auto reward = [&](const float *x) {
        double m0 = 0, m1 = 0;
        for (uint32_t k = 0; k < d.To; ++k) {
            m0 += x[k * d.td] / d.To;
            m1 += x[k * d.td + 1] / d.To;
        }
        return (float)(2 * m0 * x[d.O] + m1);
    };
    // A fixed evaluation batch.
    const uint32_t M = 1024;
    std::vector<float> xe((size_t)M * d.D), re(M);
    t.inputs(xe, M);
    double mean = 0, var = 0;
    for (uint32_t i = 0; i < M; ++i) mean += (re[i] = reward(&xe[(size_t)i * d.D])) / M;
    for (uint32_t i = 0; i < M; ++i) var += (re[i] - mean) * (re[i] - mean) / M;
    auto eval = [&]() {
        return cpu::attn_loss_grad(d, t.L.attn, t.buf[BUF_ATTN].data(), xe.data(), re.data(), M,
                                   nullptr, nullptr);
    };
    const double before = eval();
    for (uint64_t k = 0; k < 3000; ++k) {
        if (k == 2000) t.cfg.lr_aux = 3e-4f;
        t.inputs(s.x, d.B);
        for (uint32_t i = 0; i < d.B; ++i) s.r[i] = reward(&s.x[(size_t)i * d.D]);
        s.step = k;
        cpu::attention(s);
        cpu::attention_adam(s);
    }
    const double after = eval();
    printf("attention: eval MSE %.5f -> %.5f (reward variance %.5f), factor %.0f\n", before, after,
           var, before / after);
    assert_true(after < before / 20);
    assert_true(after < var / 10);  // far better than predicting the mean
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);  // e.g. '*iqn*'
    // The CPU learners allocate their temporaries per call, like the rest of the CPU backend.
    // Thousands of small steps would otherwise return the heap top to the kernel after every
    // step and page-fault it back in on the next (most of the run time on a VM); keep it.
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iql_learns_expectiles),
        cmocka_unit_test(test_iqn_learns_huber_quantiles),
        cmocka_unit_test(test_iqn_learns_quantiles_small_kappa),
        cmocka_unit_test(test_attention_learns_token_reward),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
