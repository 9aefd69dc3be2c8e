// Finite-difference checks of the Q learner's gradients (SPEC §5.4, §5.2, §5.5 step 7) against
// an independent float64 re-implementation of the forward pass and the losses: the TD gradient
// of every trunk and branch tensor (through spectral normalisation of W1 and W2, with u and v
// held constant as Miyato et al. eq. 12 prescribe), the clamp mask, d_states, and the
// confidence head's gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "batch.hpp"
#include "cpu/cpu_step.hpp"
#include "init.hpp"
#include "layout.hpp"
#include "testutil.h"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

using namespace fh;
using dvec = std::vector<double>;

namespace {

// The library's step up to the end of the forward child (and the aux pieces the test needs).
struct Fixture {
    fh_config cfg;
    Layout L;
    HostBuffers buf;
    HostBatch batch;
    cpu::CpuStep *s;
    Fixture(fh_config c, uint64_t seed) : cfg(c), L(make_layout(make_dims(c))) {
        buf = initial_state(L, c.seed);
        // Perturb the parameters and state away from their initial values so that no
        // gradient is trivially zero (biases start at 0, regime scales at 1).
        uint64_t r = seed * 31 + 7;
        auto rnd = [&r]() { r = r * 6364136223846793005ull + 1442695040888963407ull;
                            return (double)(r >> 11) / 9007199254740992.0 * 2 - 1; };
        for (float &x : buf[BUF_Q]) x += 0.05f * (float)rnd();
        buf[BUF_Q_TARGET] = buf[BUF_Q];
        for (float &x : buf[BUF_Q_TARGET]) x += 0.02f * (float)rnd();
        const uint32_t R = L.dims.R;
        for (uint32_t k = 0; k < R; ++k) buf[BUF_REGIME][R + k] = 0.5f + (float)k * 0.7f;
        fh_test_batch tb;
        fh_test_batch_make(&tb, &cfg, seed);
        batch = copy_batch(L.dims, &tb.batch);
        fh_test_batch_free(&tb);
        s = new cpu::CpuStep(cfg, L, buf);
        s->batch = &batch;
        s->step = 3;
        cpu::her_relabel(*s);
        cpu::spectral_power(*s);
        cpu::ddqn_online_next(*s);
        cpu::ddqn_target(*s);
        cpu::ddqn_join(*s);
        cpu::q_forward(L.dims, L, s->online_view(), s->x.data(), L.dims.B, s->online, cfg.q_clip);
        cpu::td_loss(*s);
        for (uint32_t b = 0; b < L.dims.NB; ++b) cpu::backward_branch(*s, b);
        cpu::backward_trunk(*s);
    }
    ~Fixture() { delete s; }
};

double silu(double z) { return z / (1 + std::exp(-z)); }
double softplus(double z) { return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)); }
double huber(double u, double k) { double a = std::fabs(u); return a <= k ? 0.5 * u * u : k * (a - 0.5 * k); }

// Float64 forward of the online Q net on x with SN's u, v held fixed; returns L_td, or with
// `h2_out` the trunk features (for the confidence head).
struct Ref {
    const Fixture &f;
    const Dims &d;
    explicit Ref(const Fixture &fx) : f(fx), d(fx.L.dims) {}

    // W/sigma with sigma = uᵀ W v for fixed u, v (SPEC §5.2), or W itself without SN.
    dvec effective(const dvec &p, size_t off, size_t rows, size_t cols, bool sn, int k) const {
        dvec W(p.begin() + off, p.begin() + off + rows * cols);
        if (!sn) return W;
        const float *u = f.buf[BUF_SN_U].data() + (size_t)k * d.H;
        const std::vector<float> &v = f.s->sn_v[k];
        double sigma = 0;
        for (size_t i = 0; i < rows; ++i)
            for (size_t j = 0; j < cols; ++j) sigma += u[i] * W[i * cols + j] * v[j];
        for (double &w : W) w /= sigma;
        return W;
    }

    dvec linear(const dvec &x, size_t M, size_t K, const dvec &W, const double *b, size_t N,
                bool act) const {
        dvec y(M * N);
        for (size_t i = 0; i < M; ++i)
            for (size_t n = 0; n < N; ++n) {
                double acc = b ? b[n] : 0;
                for (size_t k = 0; k < K; ++k) acc += x[i * K + k] * W[n * K + k];
                y[i * N + n] = act ? silu(acc) : acc;
            }
        return y;
    }

    dvec trunk(const dvec &p, const dvec &x) const {
        const QOffsets &o = f.L.q;
        dvec W1 = effective(p, o.W1, d.H, d.D, d.sn1, 0), W2 = effective(p, o.W2, d.H, d.H, d.sn2, 1);
        dvec h1 = linear(x, d.B, d.D, W1, &p[o.b1], d.H, true);
        return linear(h1, d.B, d.H, W2, &p[o.b2], d.H, true);
    }

    double td_loss(const dvec &p, const dvec &x) const {
        const QOffsets &o = f.L.q;
        const float qc = f.cfg.q_clip, kappa = f.cfg.huber_kappa;
        dvec h2 = trunk(p, x);
        double loss = 0;
        for (uint32_t b = 0; b < d.NB; ++b) {
            dvec V(p.begin() + o.V[b], p.begin() + o.V[b] + (size_t)d.HB * d.H);
            dvec U(p.begin() + o.U[b], p.begin() + o.U[b] + (size_t)d.A * d.HB);
            dvec g = linear(h2, d.B, d.H, V, &p[o.c[b]], d.HB, true);
            dvec z = linear(g, d.B, d.HB, U, &p[o.e[b]], d.A, false);
            for (uint32_t i = 0; i < d.B; ++i) {
                const size_t ib = (size_t)i * d.NB + b;
                const double q = std::clamp(z[(size_t)i * d.A + f.batch.action[ib]], -(double)qc, (double)qc);
                const double w = f.buf[BUF_REGIME][d.R + f.batch.regime[i]];
                loss += w * huber(q - f.s->y[ib], kappa);
            }
        }
        return loss / ((double)d.B * d.NB);
    }
};

dvec to_d(const std::vector<float> &v) { return dvec(v.begin(), v.end()); }

// Relative error of the library's gradient slice against central differences of `loss`.
template <class F>
double fd_rel_err(const float *analytic, dvec &p, size_t off, size_t n, F loss, double h) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        const double keep = p[off + i];
        p[off + i] = keep + h;
        const double lp = loss(p);
        p[off + i] = keep - h;
        const double lm = loss(p);
        p[off + i] = keep;
        const double g = (lp - lm) / (2 * h);
        num += (analytic[i] - g) * (analytic[i] - g);
        den += g * g;
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void check_td_gradients(fh_config c, double tol) {
    Fixture f(c, 11);
    Ref ref(f);
    const Dims &d = f.L.dims;
    dvec p = to_d(f.buf[BUF_Q]);
    const dvec x = to_d(f.s->x);
    // The float64 loss agrees with the library's float32 one.
    assert_float_equal(ref.td_loss(p, x), f.s->td_loss, 1e-5 * std::fabs(f.s->td_loss) + 1e-7);
    auto loss = [&](const dvec &q) { return ref.td_loss(q, x); };
    for (const TensorEntry &t : f.L.tensors) {
        if (t.buf != BUF_Q || t.name == "q.w_u" || t.name == "q.b_u") continue;
        const double e = fd_rel_err(f.s->grad.data() + t.offset, p, t.offset, t.count(), loss, 1e-6);
        if (!(e <= tol)) fail_msg("gradient of %s: relative error %.3g > %.1g", t.name.c_str(), e, tol);
    }
    // d_states = dL/dx~ (input saliency).
    dvec xv = x;
    auto loss_x = [&](const dvec &xx) { return ref.td_loss(p, xx); };
    const double e = fd_rel_err(f.buf[BUF_D_STATES].data(), xv, 0, xv.size(), loss_x, 1e-6);
    if (!(e <= tol)) fail_msg("d_states: relative error %.3g > %.1g", e, tol);
    (void)d;
}

}  // namespace

static void test_td_gradients_sn_w2(void **) {
    fh_config c = fh_test_small_config();
    check_td_gradients(c, 2e-4);
}

static void test_td_gradients_sn_both_layers(void **) {
    fh_config c = fh_test_small_config();
    c.sn_layers = FH_SN_W1 | FH_SN_W2;
    check_td_gradients(c, 2e-4);
}

static void test_td_gradients_no_sn_large_errors(void **) {
    // kappa small: most TD errors are on the linear side of the Huber loss.
    fh_config c = fh_test_small_config();
    c.sn_layers = 0;
    c.huber_kappa = 0.05f;
    check_td_gradients(c, 2e-4);
}

static void test_clamp_mask_blocks_gradient(void **) {
    // A tiny q_clip clamps most taken logits: their gradient must be exactly zero, and the
    // whole gradient still matches finite differences of the clamped loss.
    fh_config c = fh_test_small_config();
    c.q_clip = 0.05f;
    Fixture f(c, 5);
    const Dims &d = f.L.dims;
    size_t clamped = 0;
    for (uint32_t b = 0; b < d.NB; ++b)
        for (uint32_t i = 0; i < d.B; ++i) {
            const size_t ia = (size_t)i * d.A + f.batch.action[(size_t)i * d.NB + b];
            if (std::fabs(f.s->online.z[b][ia]) >= c.q_clip) {
                ++clamped;
                assert_true(f.s->dz[b][ia] == 0.0f);
            }
        }
    assert_true(clamped > 0);
    check_td_gradients(c, 2e-4);
}

static void test_confidence_head_gradient(void **) {
    fh_config c = fh_test_small_config();
    Fixture f(c, 21);
    const Dims &d = f.L.dims;
    const QOffsets &o = f.L.q;
    cpu::ema_targets(*f.s);
    for (uint32_t i = 0; i < d.B; ++i) f.buf[BUF_ENS_VAR][i] = 0.1f + 0.01f * (float)i;
    cpu::confidence(*f.s);
    Ref ref(f);
    dvec p = to_d(f.buf[BUF_Q]);
    const dvec h2 = ref.trunk(p, to_d(f.s->x));
    // Bootstrapped target, held fixed: t = s² + γ²(1 − d) ū(x~'), ū from the target head.
    dvec t(d.B);
    const float *wt = f.buf[BUF_Q_TARGET].data();
    for (uint32_t i = 0; i < d.B; ++i) {
        double acc = wt[o.b_u];
        for (uint32_t j = 0; j < d.H; ++j) acc += f.s->target.h2[((size_t)d.B + i) * d.H + j] * (double)wt[o.w_u + j];
        t[i] = f.buf[BUF_ENS_VAR][i] + (double)c.gamma * c.gamma * (1 - f.s->done[i]) * softplus(acc);
    }
    auto loss = [&](const dvec &q) {
        double l = 0;
        for (uint32_t i = 0; i < d.B; ++i) {
            double acc = q[o.b_u];
            for (uint32_t j = 0; j < d.H; ++j) acc += h2[(size_t)i * d.H + j] * q[o.w_u + j];
            const double e = softplus(acc) - t[i];
            l += 0.5 * e * e;
        }
        return l / d.B;
    };
    assert_float_equal(loss(p), f.s->conf_loss, 1e-5 * f.s->conf_loss + 1e-8);
    double e = fd_rel_err(f.s->grad.data() + o.w_u, p, o.w_u, d.H, loss, 1e-6);
    if (!(e <= 2e-4)) fail_msg("dw_u relative error %.3g", e);
    e = fd_rel_err(f.s->grad.data() + o.b_u, p, o.b_u, 1, loss, 1e-6);
    if (!(e <= 2e-4)) fail_msg("db_u relative error %.3g", e);
    // Confidence output c = 1/(1 + sqrt(u)) from the online head before the update.
    for (uint32_t i = 0; i < d.B; ++i)
        assert_float_equal(f.buf[BUF_CONFIDENCE][i], 1.0 / (1.0 + std::sqrt(f.s->online.u[i])), 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_td_gradients_sn_w2),
        cmocka_unit_test(test_td_gradients_sn_both_layers),
        cmocka_unit_test(test_td_gradients_no_sn_large_errors),
        cmocka_unit_test(test_clamp_mask_blocks_gradient),
        cmocka_unit_test(test_confidence_head_gradient),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
