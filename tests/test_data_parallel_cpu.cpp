// SPEC §9's decomposition on the CPU reference: two ranks of B rows, whose dims say "rank r of
// W = 2" (Philox counters from row r·B, means over 2B rows), each run the tasks of one step on
// their half of a 2B-row batch; the sums of their gradients and batch sums must be the gradients
// and metrics of one pipeline that runs the same step on the whole batch, and their per-row
// outputs that pipeline's rows. This is what the CUDA backend's all-reduces rely on (the same
// Dims::Bg and Dims::row0 constants in every kernel), checked here where no GPU is needed: HER's
// relabelling and IQN's τ must draw the global rows' numbers, every loss and gradient must divide
// by the global count. The float sums differ only in order (tolerance 1e-5, the strict
// contract); the per-row copies of HER are exact. Also: creating a pipeline with a
// communicator is refused where there is no data-parallel step, and make_dims' rank offsets.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "batch.hpp"
#include "cpu/aux_learners.hpp"
#include "cpu/cpu_step.hpp"
#include "error.hpp"
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
using cpu::Vec;

namespace {

constexpr double kTol = 1e-5;

// One pipeline's CPU step state: its own parameters, its batch, its dims.
struct Rank {
    fh_config cfg;
    Layout L;
    HostBuffers buf;
    HostBatch batch;
    std::unique_ptr<cpu::CpuStep> s;
    Rank(const fh_config &c, uint32_t rank, uint32_t world, const fh_batch &b, uint64_t step)
        : cfg(c), L(make_layout(make_dims(c, rank, world))) {
        buf = initial_state(L, c.seed);
        batch = copy_batch(L.dims, &b);
        s = std::make_unique<cpu::CpuStep>(cfg, L, buf);
        s->batch = &batch;
        s->step = step;
    }
    // SPEC §5.1 to §5.5 step 7 in schedule order (no regime update, no Adam of the Q net).
    void run() {
        cpu::CpuStep &t = *s;
        cpu::her_relabel(t);
        cpu::spectral_power(t);
        cpu::ddqn_online_next(t);
        cpu::ddqn_target(t);
        cpu::ddqn_join(t);
        cpu::q_forward(t.d, L, t.online_view(), t.x.data(), t.d.B, t.online, cfg.q_clip);
        cpu::td_loss(t);
        for (uint32_t b = 0; b < t.d.NB; ++b) cpu::backward_branch(t, b);
        cpu::backward_trunk(t);
        cpu::ema_targets(t);
        cpu::iql(t);
        cpu::iqn(t);
        cpu::attention(t);
        cpu::cql(t);
        cpu::ensemble(t);
        cpu::confidence(t);
    }
};

double norm(const std::vector<double> &v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
}

// ‖ref − (g0 + g1)‖ per tensor of the layout's buffer `buf` (offsets relative to `base`),
// against max(‖ref‖, 1e-2·RMS(all)·√n): a tensor whose true gradient is ~0 is judged on the
// scale of the others. attn.bk's gradient is rounding noise (docs/design.md) and is skipped.
void check_sum(const char *what, const Layout &L, Buf buf, size_t base, const Vec &ref,
               const Vec &g0, const Vec &g1) {
    assert_int_equal(ref.size(), g0.size());
    assert_int_equal(ref.size(), g1.size());
    double all = 0;
    for (float x : ref) all += (double)x * x;
    const double rms = std::sqrt(all / (double)ref.size());
    assert_true(rms > 0);
    double worst = 0;
    std::string worst_name;
    for (const TensorEntry &t : L.tensors) {
        if (t.buf != buf || t.offset < base || t.offset + t.count() > base + ref.size()) continue;
        if (t.name == "attn.bk") continue;
        std::vector<double> diff, r;
        for (size_t k = t.offset - base; k < t.offset - base + t.count(); ++k) {
            r.push_back(ref[k]);
            diff.push_back((double)ref[k] - ((double)g0[k] + (double)g1[k]));
        }
        const double scale = std::max(norm(r), 1e-2 * rms * std::sqrt((double)t.count()));
        const double e = norm(diff) / scale;
        if (e > worst) {
            worst = e;
            worst_name = t.name;
        }
    }
    printf("[DP-CPU] %s: rank sums vs one pipeline on 2B rows, worst tensor %s %.2e\n", what,
           worst_name.c_str(), worst);
    assert_true(worst <= kTol);
}

void check_metric(const char *name, float ref, float r0, float r1) {
    const double sum = (double)r0 + (double)r1;
    const double e = std::fabs(sum - ref) / std::max(std::fabs((double)ref), 1e-3);
    if (e > kTol) fail_msg("%s: one pipeline %.9g, ranks %.9g + %.9g (%.2e)", name, ref, r0, r1, e);
}

// Rows [off, off + n) of ref against v, per element, within kTol of the row block's scale.
void check_rows(const char *name, const float *ref, const float *v, size_t n, bool exact) {
    double scale = 0, worst = 0;
    for (size_t k = 0; k < n; ++k) scale = std::max(scale, (double)std::fabs(ref[k]));
    for (size_t k = 0; k < n; ++k) {
        if (exact && memcmp(&ref[k], &v[k], 4) != 0)
            fail_msg("%s[%zu]: %.9g on the rank, %.9g in one pipeline", name, k, v[k], ref[k]);
        worst = std::max(worst, std::fabs((double)ref[k] - v[k]) / std::max(scale, 1e-30));
    }
    if (worst > kTol) fail_msg("%s: relative difference %.2e", name, worst);
}

void test_two_ranks_equal_one_pipeline(void **) {
    fh_config c = fh_test_small_config();
    c.batch_size = 24;  // per rank
    c.num_regimes = 3;
    fh_config c2 = c;
    c2.batch_size = 2 * c.batch_size;
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c2, 17);
    const uint64_t step = 6;  // Philox c2 = 6: not the first step's draws
    Rank one(c2, 0, 1, tb.batch, step);
    Rank r0(c, 0, 2, fh_test_batch_rows(&tb, &c, 0), step),
        r1(c, 1, 2, fh_test_batch_rows(&tb, &c, c.batch_size), step);
    fh_test_batch_free(&tb);
    assert_int_equal(r1.L.dims.row0, c.batch_size);
    assert_int_equal(r1.L.dims.Bg, c2.batch_size);
    one.run();
    r0.run();
    r1.run();
    const cpu::CpuStep &a = *one.s, &p = *r0.s, &q = *r1.s;
    const Dims &d = r0.L.dims;

    // HER drew the global rows' numbers: the relabelled inputs are the same, bit for bit.
    assert_int_equal(a.relabelled, p.relabelled + q.relabelled);
    assert_true(p.relabelled > 0 && q.relabelled > 0);
    const size_t BD = (size_t)d.B * d.D;
    check_rows("x~ rank 0", a.x.data(), p.x.data(), BD, true);
    check_rows("x~ rank 1", a.x.data() + BD, q.x.data(), BD, true);
    check_rows("r~ rank 1", a.r.data() + d.B, q.r.data(), d.B, true);
    check_rows("d~ rank 1", a.done.data() + d.B, q.done.data(), d.B, true);

    check_sum("Q-net gradient", one.L, BUF_Q, 0, a.grad, p.grad, q.grad);
    const cpu::AuxWork &wa = *a.aux_work, &wp = *p.aux_work, &wq = *q.aux_work;
    check_sum("IQL gradient", one.L, BUF_IQL, 0, wa.iql_grad, wp.iql_grad, wq.iql_grad);
    check_sum("IQN gradient", one.L, BUF_IQN, 0, wa.iqn_grad, wp.iqn_grad, wq.iqn_grad);
    check_sum("attention gradient", one.L, BUF_ATTN, 0, wa.attn_grad, wp.attn_grad,
              wq.attn_grad);

    check_metric("td_loss", a.td_loss, p.td_loss, q.td_loss);
    check_metric("q_mean", a.q_mean, p.q_mean, q.q_mean);
    check_metric("cql_loss", a.cql_loss, p.cql_loss, q.cql_loss);
    check_metric("iql_loss_hi", a.iql_loss[0], p.iql_loss[0], q.iql_loss[0]);
    check_metric("iql_loss_lo", a.iql_loss[1], p.iql_loss[1], q.iql_loss[1]);
    check_metric("iqn_loss", a.iqn_loss, p.iqn_loss, q.iqn_loss);
    check_metric("attn_loss", a.attn_loss, p.attn_loss, q.attn_loss);
    check_metric("conf_loss", a.conf_loss, p.conf_loss, q.conf_loss);
    check_metric("ensemble_std", a.ensemble_std, p.ensemble_std, q.ensemble_std);

    // Per-row outputs stay with the rank that owns the row (IQN's τ are the global rows').
    const cpu::CpuStep *rk[2] = {&p, &q};
    const HostBuffers *rb[2] = {&r0.buf, &r1.buf};
    for (size_t r = 0; r < 2; ++r) {
        const size_t o = r * d.B;
        check_rows("z_mean", a.z_mean.data() + o, rk[r]->z_mean.data(), d.B, false);
        check_rows("omega", a.omega.data() + o, rk[r]->omega.data(), d.B, false);
        for (Buf b : {BUF_ENS_MEAN, BUF_ENS_VAR, BUF_CONFIDENCE})
            check_rows("ensemble/confidence", one.buf[b].data() + o, (*rb[r])[b].data(), d.B,
                       false);
        check_rows("d_states", one.buf[BUF_D_STATES].data() + o * d.D,
                   (*rb[r])[BUF_D_STATES].data(), (size_t)d.B * d.D, false);
    }
}

void test_make_dims_ranks(void **) {
    fh_config c = fh_test_small_config();
    c.batch_size = 1000;
    const Dims one = make_dims(c);
    assert_int_equal(one.world, 1);
    assert_int_equal(one.rank, 0);
    assert_int_equal(one.row0, 0);
    assert_true(one.Bg == 1000);
    const Dims d = make_dims(c, 3, 8);
    assert_int_equal(d.row0, 3000);
    assert_true(d.Bg == 8000);
    // W·B ≤ 2^32 (SPEC §9): 2^20 rows on 4096 ranks is exactly 2^32, one more rank is refused.
    c.batch_size = 1u << 20;
    assert_true(make_dims(c, 4095, 4096).row0 == 4095u << 20);
    try {
        make_dims(c, 0, 4097);
        fail_msg("4097 ranks of 2^20 rows were accepted");
    } catch (const Error &e) {
        assert_int_equal(e.status, FH_ERR_BAD_DIMENSION);
        assert_non_null(strstr(e.message.c_str(), "2^32"));
    }
}

void test_communicator_refused_without_data_parallel_step(void **) {
    fh_config c = fh_test_small_config();
    int not_a_communicator = 0;  // never dereferenced: the refusal comes first
    c.nccl_comm = &not_a_communicator;
    fh_pipeline *p = (fh_pipeline *)0x1;
    c.backend = FH_BACKEND_CPU;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_UNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(fh_last_error_message(), "nccl_comm"));
    assert_non_null(strstr(fh_last_error_message(), "CPU backend"));
    // The plan refuses the same config with the same status, its report untouched.
    fh_memory_report plan;
    memset(&plan, 0x5a, sizeof plan);
    plan.struct_size = sizeof plan;
    const fh_memory_report untouched = plan;
    assert_int_equal(fh_memory_plan(&c, &plan), FH_ERR_UNSUPPORTED);
    assert_non_null(strstr(fh_last_error_message(), "nccl_comm"));
    assert_memory_equal(&plan, &untouched, sizeof plan);
    if (!fh_test_have_cuda()) {
        // AUTO resolves to the CPU here, and says so.
        c.backend = FH_BACKEND_AUTO;
        assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_UNSUPPORTED);
        assert_non_null(strstr(fh_last_error_message(), "FH_BACKEND_AUTO"));
        assert_null(p);
    }
    // Without a communicator the same config makes a pipeline.
    c.nccl_comm = nullptr;
    c.backend = FH_BACKEND_CPU;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    fh_pipeline_destroy(p);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_equal_one_pipeline),
        cmocka_unit_test(test_make_dims_ranks),
        cmocka_unit_test(test_communicator_refused_without_data_parallel_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
