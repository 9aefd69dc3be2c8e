// The non-gradient parts of the Q learner's step against hand-computed float64 values:
// HER relabelling (SPEC §5.1), double-DQN targets (§5.3), regime scaling (§5.5 step 8),
// Polyak averaging (step 1), global-norm clipping and Adam (§5.6).
#include <algorithm>
#include <cmath>
#include <vector>

#include "batch.hpp"
#include "cpu/cpu_step.hpp"
#include "cpu/nn.hpp"
#include "init.hpp"
#include "philox.hpp"
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
    fh_config cfg;
    Layout L;
    HostBuffers buf;
    HostBatch batch;
    cpu::CpuStep *s;
    Setup(fh_config c, uint64_t seed, uint64_t step) : cfg(c), L(make_layout(make_dims(c))) {
        buf = initial_state(L, c.seed);
        fh_test_batch tb;
        fh_test_batch_make(&tb, &cfg, seed);
        batch = copy_batch(L.dims, &tb.batch);
        fh_test_batch_free(&tb);
        s = new cpu::CpuStep(cfg, L, buf);
        s->batch = &batch;
        s->step = step;
    }
    ~Setup() { delete s; }
};
}  // namespace

static void check_her(int reward_kind, int terminal) {
    fh_config c = fh_test_small_config();
    c.batch_size = 512;
    c.her_reward = reward_kind;
    c.her_terminal_on_success = terminal;
    Setup t(c, 4, 9);
    cpu::her_relabel(*t.s);
    const Dims &d = t.L.dims;
    uint32_t relabelled = 0, reached = 0;
    for (uint32_t i = 0; i < d.B; ++i) {
        const bool rel = uniform24(philox(c.seed, i, 0, 9, PURPOSE_HER).w[0]) < c.her_ratio;
        const float *g = rel ? &t.batch.her_goal[i * d.G] : &t.batch.goal[i * d.G];
        for (uint32_t j = 0; j < d.G; ++j) {
            assert_true(t.s->x[i * d.D + d.O + j] == g[j]);
            assert_true(t.s->xn[i * d.D + d.O + j] == g[j]);
        }
        for (uint32_t j = 0; j < d.O; ++j) {
            assert_true(t.s->x[i * d.D + j] == t.batch.obs[i * d.O + j]);
            assert_true(t.s->xn[i * d.D + j] == t.batch.next_obs[i * d.O + j]);
        }
        double dist = 0;
        for (uint32_t j = 0; j < d.G; ++j) {
            const double e = (double)t.batch.next_achieved_goal[i * d.G + j] - g[j];
            dist += e * e;
        }
        dist = std::sqrt(dist);
        if (!rel) {
            assert_true(t.s->r[i] == t.batch.reward[i]);
            assert_true(t.s->done[i] == t.batch.done[i]);
            continue;
        }
        ++relabelled;
        const bool hit = dist <= c.her_epsilon;
        reached += hit;
        if (reward_kind == FH_HER_REWARD_SPARSE) {
            assert_float_equal(t.s->r[i], hit ? 0.0 : -1.0, 0);
            assert_float_equal(t.s->done[i], (hit && terminal) ? 1.0 : t.batch.done[i], 0);
        } else {
            assert_float_equal(t.s->r[i], -dist, 1e-6);
            assert_float_equal(t.s->done[i], t.batch.done[i], 0);
        }
    }
    assert_int_equal(t.s->relabelled, relabelled);
    // About her_ratio of 512, and both reward values occur.
    assert_true(relabelled > 0.7 * 512 && relabelled < 0.9 * 512);
    assert_true(reached > 0 && reached < relabelled);
}

static void test_her_sparse_terminal(void **) { check_her(FH_HER_REWARD_SPARSE, 1); }
static void test_her_sparse_not_terminal(void **) { check_her(FH_HER_REWARD_SPARSE, 0); }
static void test_her_dense(void **) { check_her(FH_HER_REWARD_DENSE, 1); }

static void test_ddqn_targets(void **) {
    fh_config c = fh_test_small_config();
    Setup t(c, 8, 0);
    // Make online and target differ so the double-DQN choice matters.
    for (float &w : t.buf[BUF_Q_TARGET]) w *= 1.5f;
    cpu::her_relabel(*t.s);
    cpu::spectral_power(*t.s);
    cpu::ddqn_online_next(*t.s);
    cpu::ddqn_target(*t.s);
    cpu::ddqn_join(*t.s);
    const Dims &d = t.L.dims;
    for (uint32_t i = 0; i < d.B; ++i) {
        double qsa = 0;
        for (uint32_t b = 0; b < d.NB; ++b) {
            const float *qo = &t.s->next.q[b][i * d.A];
            const int a = (int)(std::max_element(qo, qo + d.A) - qo);  // first maximum
            assert_int_equal(t.s->a_star[i * d.NB + b], a);
            const double qn = t.s->target.q[b][(d.B + i) * d.A + a];
            const double y = t.s->r[i] + (double)c.gamma * (1 - t.s->done[i]) * qn;
            assert_float_equal(t.s->y[i * d.NB + b], y, 1e-6 * (1 + std::fabs(y)));
            qsa += t.s->target.q[b][i * d.A + t.batch.action[i * d.NB + b]];
        }
        assert_float_equal(t.s->qbar_sa[i], qsa / d.NB, 1e-6);
    }
}

static void test_regime_scale(void **) {
    fh_config c = fh_test_small_config();
    c.num_regimes = 4;  // regime 3 is absent below
    Setup t(c, 2, 0);
    const Dims &d = t.L.dims;
    for (uint32_t i = 0; i < d.B; ++i) {
        t.batch.regime[i] = (int32_t)(i % 3);
        for (uint32_t b = 0; b < d.NB; ++b) t.s->delta[i * d.NB + b] = 0.1f * (float)(i % 3 + 1) + 0.01f * b;
    }
    float *s = t.buf[BUF_REGIME].data();
    s[3] = 2.0f;  // absent regime keeps its s
    cpu::regime_scale(*t.s);
    double sk[4] = {1, 1, 1, 2};
    for (int k = 0; k < 3; ++k) {
        double m = 0;
        for (uint32_t b = 0; b < d.NB; ++b) { double e = 0.1 * (k + 1) + 0.01 * b; m += e * e; }
        m /= d.NB;
        sk[k] = 0.99 * 1.0 + 0.01 * m;
    }
    const double sbar = (sk[0] + sk[1] + sk[2] + sk[3]) / 4;
    for (int k = 0; k < 4; ++k) {
        assert_float_equal(s[k], sk[k], 1e-6);
        const double rho = std::min(std::max(std::sqrt(sbar / (sk[k] + 1e-8)), 0.25), 4.0);
        assert_float_equal(s[4 + k], rho, 1e-6);
    }
}

static void test_clip_and_adam(void **) {
    fh_config c = fh_test_small_config();
    Setup t(c, 3, 6);  // Adam t = 7
    const size_t n = t.L.q.total;
    std::vector<float> p0 = t.buf[BUF_Q];
    for (size_t i = 0; i < n; ++i) {
        t.s->grad[i] = (float)std::sin(0.37 * i) * 2.0f;
        t.buf[BUF_Q_M][i] = 0.01f * (float)std::cos(0.1 * i);
        t.buf[BUF_Q_V][i] = 0.001f * (float)(1 + i % 5);
    }
    std::vector<float> m0 = t.buf[BUF_Q_M], v0 = t.buf[BUF_Q_V];
    double norm = 0;
    for (size_t i = 0; i < n; ++i) norm += (double)t.s->grad[i] * t.s->grad[i];
    norm = std::sqrt(norm);
    assert_true(norm > c.clip_norm);  // clipping is active
    cpu::adam_q(*t.s);
    assert_float_equal(t.s->grad_norm, norm, 1e-6 * norm);
    const double scale = c.clip_norm / norm, b1 = c.adam_beta1, b2 = c.adam_beta2;
    const double bc1 = 1 - std::pow(b1, 7), bc2 = 1 - std::pow(b2, 7);
    for (size_t i = 0; i < n; ++i) {
        const double g = t.s->grad[i] * scale;
        const double m = b1 * m0[i] + (1 - b1) * g, v = b2 * v0[i] + (1 - b2) * g * g;
        const double step = c.lr_q * (m / bc1) / (std::sqrt(v / bc2) + c.adam_eps);
        const double p = p0[i] - step;
        // float32 storage of p costs up to an ulp of p; the update itself is good to 1e-5.
        const double ulp = std::nextafter(std::fabs((float)p), INFINITY) - std::fabs((float)p);
        if (!(std::fabs(p - t.buf[BUF_Q][i]) <= 2 * ulp + 1e-5 * std::fabs(step)))
            fail_msg("param %zu: adam gives %.9g, float64 %.9g", i, t.buf[BUF_Q][i], p);
        // Relative to the terms' sizes: b1·m0 and (1 − b1)·g may cancel.
        const double mscale = std::fabs(b1 * m0[i]) + std::fabs((1 - b1) * g);
        if (!(std::fabs(t.buf[BUF_Q_M][i] - m) <= 1e-6 * mscale)) fail_msg("m[%zu]", i);
        if (!(std::fabs(t.buf[BUF_Q_V][i] - v) <= 1e-6 * v)) fail_msg("v[%zu]", i);
    }
    // A zero gradient stays zero: no NaN from 0/0 in the clip.
    std::fill(t.s->grad.begin(), t.s->grad.end(), 0.0f);
    cpu::adam_q(*t.s);
    assert_float_equal(t.s->grad_norm, 0, 0);
    for (float x : t.buf[BUF_Q]) assert_true(std::isfinite(x));
}

static void test_polyak(void **) {
    fh_config c = fh_test_small_config();
    Setup t(c, 1, 0);
    for (float &w : t.buf[BUF_Q]) w += 1.0f;
    for (float &w : t.buf[BUF_IQN]) w -= 1.0f;
    std::vector<float> q = t.buf[BUF_Q], qt = t.buf[BUF_Q_TARGET], n = t.buf[BUF_IQN], nt = t.buf[BUF_IQN_TARGET];
    cpu::ema_targets(*t.s);
    const double tau = c.ema_tau;
    for (size_t i = 0; i < q.size(); ++i)
        assert_float_equal(t.buf[BUF_Q_TARGET][i], tau * q[i] + (1 - tau) * qt[i], 1e-6);
    for (size_t i = 0; i < n.size(); ++i)
        assert_float_equal(t.buf[BUF_IQN_TARGET][i], tau * n[i] + (1 - tau) * nt[i], 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_her_sparse_terminal),
        cmocka_unit_test(test_her_sparse_not_terminal),
        cmocka_unit_test(test_her_dense),
        cmocka_unit_test(test_ddqn_targets),
        cmocka_unit_test(test_regime_scale),
        cmocka_unit_test(test_clip_and_adam),
        cmocka_unit_test(test_polyak),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
