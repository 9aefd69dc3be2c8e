// The auxiliary learners seen through the C API (SPEC §6) and their switches (SPEC §1):
//  - every §6 metric is finite after each step, the aux losses are positive, and the ensemble
//    outputs (ensemble_mean, ensemble_var, confidence) are readable tensors consistent with the
//    ensemble_std metric;
//  - every learner parameter of SPEC §3's table is listed with its shape, readable, writable,
//    and moved by a step (the learner's Adam step reached its buffer);
//  - the aux losses fall on a fixed batch (the learners are wired to their Adam steps);
//  - with cql_alpha = 0, num_regimes = 1 and goal_dim = 0 the corresponding work is skipped:
//    the schedule has no CQL / regime task, the tensors of the goal token are gone, and the
//    Q learner's parameters after each of 3 steps are bitwise those of a reference step that
//    runs only the Q learner (HER, spectral, ddqn, forward, EMA, Adam) and none of the aux
//    learners. Only the confidence head (q.w_u, q.b_u) may differ: it is trained on the
//    ensemble variance by design. Two negative controls show the comparison has teeth: a tiny
//    cql_alpha changes exactly the branch heads U_b, e_b, and R = 3 changes the TD-trained
//    parameters from step 2 on (the regime scale of step 1 weights step 2's TD loss);
//  - the aux child's schedule, with one rank and with two: each task once (AUX_ADAM once per
//    learner), the tail after IQN on IQN's lane, every forked lane in the fork, and no
//    collective-issuing task (AUX_ADAM of both learners, IQL's) beside another between the fork
//    and the join but REGIME_SCALE on its own lane.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "batch.hpp"
#include "cpu/cpu_step.hpp"
#include "init.hpp"
#include "layout.hpp"
#include "schedule.hpp"
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

std::vector<float> read(fh_pipeline *p, const char *name) {
    fh_tensor_info info = {sizeof info};
    if (fh_pipeline_find_tensor(p, name, &info) != FH_OK) fail_msg("tensor %s not found", name);
    std::vector<float> v((size_t)info.rows * info.cols);
    assert_int_equal(fh_pipeline_read_tensor(p, name, v.data(), v.size()), FH_OK);
    return v;
}

struct Shape {
    std::string name;
    uint32_t rows, cols;
    int group;
};

// SPEC §3's table for the aux learners, with the config's sizes.
std::vector<Shape> aux_shapes(const fh_config &c) {
    const uint32_t D = c.obs_dim + c.goal_dim, Hi = c.iql_hidden, Hq = c.iqn_hidden,
                   d = c.attn_d_model, hh = c.attn_head_hidden,
                   T = c.obs_dim / c.attn_token_dim + (c.goal_dim > 0);
    std::vector<Shape> s;
    for (int net = 0; net < 2; ++net) {
        const std::string p = net ? "iql_lo." : "iql_hi.";
        const int g = net ? FH_GROUP_IQL_LO : FH_GROUP_IQL_HI;
        s.push_back({p + "W1", Hi, D, g}); s.push_back({p + "b1", 1, Hi, g});
        s.push_back({p + "W2", Hi, Hi, g}); s.push_back({p + "b2", 1, Hi, g});
        s.push_back({p + "w3", 1, Hi, g}); s.push_back({p + "b3", 1, 1, g});
    }
    const int q = FH_GROUP_IQN;
    s.push_back({"iqn.Wpsi", Hq, D, q}); s.push_back({"iqn.bpsi", 1, Hq, q});
    s.push_back({"iqn.Wphi", Hq, c.iqn_cos, q}); s.push_back({"iqn.bphi", 1, Hq, q});
    s.push_back({"iqn.Wm", Hq, Hq, q}); s.push_back({"iqn.bm", 1, Hq, q});
    s.push_back({"iqn.w_z", 1, Hq, q}); s.push_back({"iqn.b_z", 1, 1, q});
    const int a = FH_GROUP_ATTN;
    s.push_back({"attn.Wt", d, c.attn_token_dim, a}); s.push_back({"attn.bt", 1, d, a});
    if (c.goal_dim > 0) {
        s.push_back({"attn.Wg", d, c.goal_dim, a}); s.push_back({"attn.bg", 1, d, a});
    }
    s.push_back({"attn.P", T, d, a});
    for (const char *n : {"attn.Wq", "attn.Wk", "attn.Wv"}) s.push_back({n, d, d, a});
    for (const char *n : {"attn.bq", "attn.bk", "attn.bv"}) s.push_back({n, 1, d, a});
    s.push_back({"attn.Wo", d, d, a}); s.push_back({"attn.bo", 1, d, a});
    s.push_back({"attn.Wr1", hh, d, a}); s.push_back({"attn.br1", 1, hh, a});
    s.push_back({"attn.w_r2", 1, hh, a}); s.push_back({"attn.b_r2", 1, 1, a});
    return s;
}

void check_metrics(const fh_metrics &m, const fh_config &c, uint64_t step) {
    assert_int_equal(m.step, step);
    const float v[] = {m.td_loss, m.q_mean, m.cql_loss, m.iql_loss_hi, m.iql_loss_lo, m.iqn_loss,
                       m.attn_loss, m.conf_loss, m.grad_norm, m.sigma[0], m.sigma[1],
                       m.sigma_target[0], m.sigma_target[1], m.ensemble_std};
    for (float x : v) assert_true(std::isfinite(x));
    // The aux losses are positive on random data; the ensemble disagrees somewhere.
    assert_true(m.iql_loss_hi > 0 && m.iql_loss_lo > 0 && m.iqn_loss > 0 && m.attn_loss > 0);
    assert_true(m.conf_loss > 0 && m.ensemble_std > 0 && m.td_loss > 0 && m.grad_norm > 0);
    assert_true(c.cql_alpha > 0 ? m.cql_loss > 0 : m.cql_loss == 0);
    assert_true(m.sigma[1] > 0 && m.sigma_target[1] > 0);  // W2 under SN
    assert_int_equal(m.num_regimes, c.num_regimes);
    for (uint32_t k = 0; k < m.num_regimes; ++k) {
        assert_true(std::isfinite(m.regime_scale[k]));
        assert_true(m.regime_scale[k] >= c.regime_min && m.regime_scale[k] <= c.regime_max);
    }
    assert_true(m.num_relabelled <= c.batch_size);
}

}  // namespace

static void test_metrics_and_outputs_readable(void **) {
    fh_config c = fh_test_small_config();
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 3);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    for (uint64_t step = 1; step <= 3; ++step) {
        assert_int_equal(fh_pipeline_step(p), FH_OK);
        fh_metrics m = {sizeof m};
        assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
        check_metrics(m, c, step);
        printf("step %llu: td %.4f cql %.4f iql %.4f/%.4f iqn %.4f attn %.4f conf %.4f ens_std %.4f\n",
               (unsigned long long)step, m.td_loss, m.cql_loss, m.iql_loss_hi, m.iql_loss_lo,
               m.iqn_loss, m.attn_loss, m.conf_loss, m.ensemble_std);
        fh_timings t = {sizeof t};
        assert_int_equal(fh_pipeline_timings(p, &t), FH_OK);
        for (float x : {t.aux_ms, t.aux_ema_ms, t.aux_iql_ms, t.aux_iqn_ms, t.aux_attn_ms, t.aux_tail_ms})
            assert_true(std::isfinite(x) && x >= 0);
        // The step outputs: [1, B] tensors, read-only, consistent with the metric.
        for (const char *n : {"ensemble_mean", "ensemble_var", "confidence"}) {
            fh_tensor_info info = {sizeof info};
            assert_int_equal(fh_pipeline_find_tensor(p, n, &info), FH_OK);
            assert_int_equal(info.rows, 1);
            assert_int_equal(info.cols, c.batch_size);
            assert_int_equal(info.group, FH_GROUP_OUTPUT);
            assert_int_equal(info.writable, 0);
        }
        const std::vector<float> mu = read(p, "ensemble_mean"), var = read(p, "ensemble_var"),
                                 conf = read(p, "confidence");
        double sd = 0;
        for (uint32_t i = 0; i < c.batch_size; ++i) {
            assert_true(std::isfinite(mu[i]));
            assert_true(var[i] >= 0 && std::isfinite(var[i]));
            assert_true(conf[i] > 0 && conf[i] <= 1);
            sd += std::sqrt((double)var[i]);
        }
        AUX_ASSERT_CLOSE(m.ensemble_std, sd / c.batch_size, 1e-6 * m.ensemble_std);
    }
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

static void test_learner_parameters_listed_and_trained(void **) {
    fh_config c = fh_test_small_config();
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    const std::vector<Shape> shapes = aux_shapes(c);
    // Listed: each name appears exactly once in the enumeration, with its shape and group.
    uint32_t count = 0;
    assert_int_equal(fh_pipeline_num_tensors(p, &count), FH_OK);
    for (const Shape &s : shapes) {
        int seen = 0;
        for (uint32_t k = 0; k < count; ++k) {
            fh_tensor_info info = {sizeof info};
            assert_int_equal(fh_pipeline_tensor_info(p, k, &info), FH_OK);
            if (s.name != info.name) continue;
            ++seen;
            assert_int_equal(info.rows, s.rows);
            assert_int_equal(info.cols, s.cols);
            assert_int_equal(info.group, s.group);
            assert_int_equal(info.writable, 1);
        }
        if (seen != 1) fail_msg("%s listed %d times", s.name.c_str(), seen);
    }
    for (const char *n : {"target.iqn.Wpsi", "target.iqn.b_z"}) (void)read(p, n);
    std::vector<std::vector<float>> before;
    for (const Shape &s : shapes) before.push_back(read(p, s.name.c_str()));

    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 4);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    // Every learner tensor moved (Adam's first step moves every coordinate with a non-zero
    // gradient by about lr_aux). attn.bk has no true gradient (see attention.cpp), so it is
    // not required to move.
    for (size_t k = 0; k < shapes.size(); ++k) {
        const std::vector<float> now = read(p, shapes[k].name.c_str());
        double moved = 0;
        for (size_t e = 0; e < now.size(); ++e) moved = std::max(moved, (double)std::fabs(now[e] - before[k][e]));
        if (shapes[k].name == "attn.bk") continue;
        if (!(moved > 0.5 * c.lr_aux))
            fail_msg("%s did not move (max |change| %.3g)", shapes[k].name.c_str(), moved);
        assert_true(moved < 1.5 * c.lr_aux);  // and by no more than one Adam step
    }
    // The IQN target follows the online net by Polyak averaging with the online weights
    // before this step's Adam: target₂ = τ online₁ + (1 − τ) target₁.
    const std::vector<float> t1 = read(p, "target.iqn.Wm"), o1 = read(p, "iqn.Wm");
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    const std::vector<float> t2 = read(p, "target.iqn.Wm");
    double moved = 0;
    for (size_t e = 0; e < t2.size(); ++e) {
        AUX_ASSERT_CLOSE(t2[e], c.ema_tau * o1[e] + (1 - c.ema_tau) * t1[e], 1e-7);
        moved = std::max(moved, (double)std::fabs(t2[e] - t1[e]));
    }
    assert_true(moved > 0.5 * c.ema_tau * c.lr_aux);
    // Writable: a written aux parameter reads back.
    std::vector<float> w(c.iql_hidden, 0.125f);
    assert_int_equal(fh_pipeline_write_tensor(p, "iql_lo.w3", w.data(), w.size()), FH_OK);
    assert_true(read(p, "iql_lo.w3") == w);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

static void test_aux_losses_fall_on_fixed_batch(void **) {
    fh_config c = fh_test_small_config();
    c.lr_aux = 3e-3f;
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 5);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    fh_metrics first = {sizeof first}, last = {sizeof last};
    for (int s = 0; s < 200; ++s) {
        assert_int_equal(fh_pipeline_step(p), FH_OK);
        assert_int_equal(fh_pipeline_metrics(p, s == 0 ? &first : &last), FH_OK);
    }
    printf("200 steps: iql_hi %.4f -> %.4f, iql_lo %.4f -> %.4f, iqn %.4f -> %.4f, attn %.4f -> %.4f\n",
           first.iql_loss_hi, last.iql_loss_hi, first.iql_loss_lo, last.iql_loss_lo,
           first.iqn_loss, last.iqn_loss, first.attn_loss, last.attn_loss);
    // The targets move too (Q̄sa and the IQN bootstrap follow the Q and IQN targets) and the
    // attention model must memorise 32 random rewards, so only a clear fall is required here;
    // test_aux_learning checks convergence to known answers.
    assert_true(last.iql_loss_hi < 0.5f * first.iql_loss_hi);
    assert_true(last.iql_loss_lo < 0.5f * first.iql_loss_lo);
    assert_true(last.iqn_loss < 0.7f * first.iqn_loss);
    assert_true(last.attn_loss < 0.75f * first.attn_loss);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

namespace {

// The Q learner alone, through the library's internal tasks, in the schedule's order, with
// every aux learner left out.
struct QOnly {
    fh_config cfg;
    Layout L;
    HostBuffers buf;
    HostBatch batch;
    cpu::CpuStep *s;
    QOnly(const fh_config &c, const fh_batch &b) : cfg(c), L(make_layout(make_dims(c))) {
        buf = initial_state(L, c.seed);
        batch = copy_batch(L.dims, &b);
        s = new cpu::CpuStep(cfg, L, buf);
        s->batch = &batch;
    }
    ~QOnly() { delete s; }
    void step(uint64_t k) {
        cpu::CpuStep &t = *s;
        t.step = k;
        cpu::her_relabel(t);
        cpu::spectral_power(t);
        cpu::ddqn_online_next(t);
        cpu::ddqn_target(t);
        cpu::ddqn_join(t);
        cpu::q_forward(L.dims, L, t.online_view(), t.x.data(), L.dims.B, t.online, cfg.q_clip);
        cpu::td_loss(t);
        for (uint32_t b = 0; b < L.dims.NB; ++b) cpu::backward_branch(t, b);
        cpu::backward_trunk(t);
        cpu::ema_targets(t);
        cpu::adam_q(t);
    }
};

bool is_head(const std::string &n) { return n.rfind("q.U.", 0) == 0 || n.rfind("q.e.", 0) == 0; }
bool is_conf(const std::string &n) { return n == "q.w_u" || n == "q.b_u"; }

// Names of the Q-net tensors (online and target) where the pipeline differs from the
// reference, confidence head excluded.
std::vector<std::string> q_differences(fh_pipeline *p, const QOnly &ref) {
    std::vector<std::string> diff;
    for (const TensorEntry &t : ref.L.tensors) {
        if (t.buf != BUF_Q && t.buf != BUF_Q_TARGET) continue;
        const std::string base = t.buf == BUF_Q ? t.name : t.name.substr(strlen("target."));
        if (is_conf(base)) continue;
        const std::vector<float> got = read(p, t.name.c_str());
        if (memcmp(got.data(), ref.buf[t.buf].data() + t.offset, got.size() * sizeof(float)) != 0)
            diff.push_back(t.name);
    }
    return diff;
}

fh_config disabled_config() {
    fh_config c = fh_test_small_config();
    c.cql_alpha = 0.0f;
    c.num_regimes = 1;
    c.goal_dim = 0;
    c.clip_norm = 1e30f;  // no clipping: Adam is elementwise, so the confidence head's gradient
                          // (which the reference leaves out) cannot reach other parameters
    return c;
}

}  // namespace

// The aux child of build_schedule for `world` ranks: where each task runs and in which order.
static void check_aux_schedule(uint32_t world) {
    const fh_config c = fh_test_small_config();
    const Dims d = make_dims(c, 0, world);
    const ChildDesc *aux = nullptr;
    const std::vector<ChildDesc> sched = build_schedule(d, c);
    for (const ChildDesc &ch : sched)
        if (ch.id == ChildId::AUX) aux = &ch;
    assert_non_null(aux);
    int fork_at = -1, join_at = -1, iqn_at = -1, ens_at = -1, conf_at = -1, adam_iqn = 0,
        adam_attn = 0;
    unsigned forked = 0;
    for (int k = 0; k < (int)aux->ops.size(); ++k) {
        const Op &op = aux->ops[k];
        if (op.kind == Op::FORK) fork_at = k, forked = op.lanes;
        if (op.kind == Op::JOIN) {
            join_at = k;
            assert_int_equal(op.lanes, forked);
        }
        if (op.kind != Op::RUN) continue;
        const bool inside = fork_at >= 0 && join_at < 0;
        // Every task between the fork and the join runs on a forked lane; the others on lane 0.
        if (inside) assert_true((forked >> op.lane) & 1u);
        else assert_int_equal(op.lane, 0);
        switch (op.task) {
        case Task::IQN: iqn_at = k; assert_int_equal(op.lane, 1); break;
        case Task::IQN_BACKWARD: assert_int_equal(op.lane, 1); break;
        case Task::ENSEMBLE: ens_at = k; assert_int_equal(op.lane, 1); break;
        case Task::CONFIDENCE: conf_at = k; assert_int_equal(op.lane, 1); break;
        case Task::ATTENTION: assert_int_equal(op.lane, 2); break;
        case Task::REGIME_SCALE: assert_true(inside); assert_int_equal(op.lane, 3); break;
        case Task::IQL: assert_false(inside); break;
        case Task::AUX_ADAM:
            adam_iqn += (op.arg & kAdamIqn) != 0;
            adam_attn += (op.arg & kAdamAttention) != 0;
            if (world > 1) {  // both gradients summed in one collective, after the join
                assert_int_equal(op.arg, kAdamIqn | kAdamAttention);
                assert_false(inside);
            } else {  // each learner's Adam at the end of its own lane, no sum
                assert_true(inside);
                assert_int_equal(op.lane, op.arg == kAdamIqn ? 1 : 2);
            }
            break;
        default: break;
        }
    }
    assert_true(fork_at >= 0 && join_at > fork_at);
    // The tail reads IQN's z_mean (ensemble) and the ensemble's variance (confidence).
    assert_true(iqn_at >= 0 && iqn_at < ens_at && ens_at < conf_at && conf_at < join_at);
    assert_int_equal(adam_iqn, 1);
    assert_int_equal(adam_attn, 1);
}

// IQL's place (schedule.cpp): once per step, in the forward child on lane 2 beside the trunk
// backward (lane 2's workspace is its own: lane 1 shares lane 0's, so lane 1 must not be in that
// fork), after every branch's backward; with one branch, in the aux child before the fork.
static void check_iql_place(uint32_t branches) {
    fh_config c = fh_test_small_config();
    c.num_branches = branches;
    const Dims d = make_dims(c);
    int count = 0;
    for (const ChildDesc &ch : build_schedule(d, c)) {
        unsigned forked = 0;
        int last_bwd_branch = -1, trunk = -1, iql = -1, join_after = -1;
        for (int k = 0; k < (int)ch.ops.size(); ++k) {
            const Op &op = ch.ops[k];
            if (op.kind == Op::FORK) forked = op.lanes;
            if (op.kind == Op::JOIN) {
                if (iql >= 0 && join_after < 0) join_after = k;
                forked = 0;
            }
            if (op.kind != Op::RUN) continue;
            if (op.task == Task::BWD_BRANCH) last_bwd_branch = k;
            if (op.task == Task::BWD_TRUNK) trunk = k;
            if (op.task != Task::IQL) continue;
            ++count;
            iql = k;
            if (branches >= 2) {
                assert_int_equal((int)ch.id, (int)ChildId::FORWARD);
                assert_int_equal(op.lane, 2);
                assert_int_equal(forked, 1u << 2);
            } else {
                assert_int_equal((int)ch.id, (int)ChildId::AUX);
                assert_int_equal(op.lane, 0);
                assert_int_equal(forked, 0u);
            }
        }
        if (ch.id == ChildId::FORWARD && branches >= 2) {
            assert_true(last_bwd_branch >= 0 && last_bwd_branch < iql);
            assert_true(iql < trunk && trunk < join_after);
        }
    }
    assert_int_equal(count, 1);
}

// EMA's place (schedule.cpp): once per step, in the forward child on lane 0 after the TD loss
// (beside the branch backward), so after ddqn, the last reader of the Q target, and before the
// aux child's IQN and confidence tasks, its next readers, and every Adam step. And the spectral
// child beside HER in multi-stream mode only.
static void check_ema_and_beside(fh_exec_mode mode) {
    fh_config c = fh_test_small_config();
    c.exec_mode = mode;
    const Dims d = make_dims(c);
    const std::vector<ChildDesc> sched = build_schedule(d, c);
    int count = 0;
    for (size_t k = 0; k < sched.size(); ++k) {
        const ChildDesc &ch = sched[k];
        // Each child after the previous one, but the spectral child, which in multi-stream
        // mode starts with HER (after what HER starts after), and ddqn, after both.
        std::vector<int> after;
        if (k > 0) after = {(int)k - 1};
        if (ch.id == ChildId::SPECTRAL && mode == FH_EXEC_MULTI_STREAM) {
            assert_int_equal((int)sched[k - 1].id, (int)ChildId::HER);
            after = sched[k - 1].after;
        }
        if (ch.id == ChildId::DDQN && mode == FH_EXEC_MULTI_STREAM)
            after = {(int)k - 2, (int)k - 1};
        assert_true(ch.after == after);
        int td = -1;
        for (int i = 0; i < (int)ch.ops.size(); ++i) {
            const Op &op = ch.ops[i];
            if (op.kind != Op::RUN) continue;
            if (op.task == Task::TD_LOSS) td = i;
            if (op.task == Task::IQN || op.task == Task::IQN_BACKWARD ||
                op.task == Task::CONFIDENCE || op.task == Task::AUX_ADAM || op.task == Task::ADAM_Q)
                assert_int_equal(count, 1);
            if (op.task != Task::EMA_TARGETS) continue;
            ++count;
            assert_int_equal((int)ch.id, (int)ChildId::FORWARD);
            assert_int_equal(op.lane, 0);
            assert_true(td >= 0 && td < i);
        }
    }
    assert_int_equal(count, 1);
}

static void test_aux_schedule_one_rank_and_two(void **) {
    check_ema_and_beside(FH_EXEC_MULTI_STREAM);
    check_ema_and_beside(FH_EXEC_SINGLE_STREAM);
    check_aux_schedule(1);
    check_aux_schedule(2);
    check_iql_place(4);
    check_iql_place(2);
    check_iql_place(1);
}

static void test_disabled_learners_are_skipped(void **) {
    const fh_config c = disabled_config();
    // The schedule has no CQL and no regime-scale task.
    const Dims d = make_dims(c);
    for (const ChildDesc &ch : build_schedule(d, c))
        for (const Op &op : ch.ops)
            assert_true(op.kind != Op::RUN || (op.task != Task::CQL && op.task != Task::REGIME_SCALE));
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    // No goal token: attn.Wg and attn.bg are gone and P has T_o rows.
    fh_tensor_info info = {sizeof info};
    assert_int_equal(fh_pipeline_find_tensor(p, "attn.Wg", &info), FH_ERR_UNKNOWN_NAME);
    assert_int_equal(fh_pipeline_find_tensor(p, "attn.bg", &info), FH_ERR_UNKNOWN_NAME);
    assert_int_equal(fh_pipeline_find_tensor(p, "attn.P", &info), FH_OK);
    assert_int_equal(info.rows, c.obs_dim / c.attn_token_dim);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 6);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    QOnly ref(c, tb.batch);
    for (uint64_t k = 0; k < 3; ++k) {
        assert_int_equal(fh_pipeline_step(p), FH_OK);
        ref.step(k);
        fh_metrics m = {sizeof m};
        assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
        check_metrics(m, c, k + 1);
        assert_true(m.cql_loss == 0.0f);
        assert_true(m.regime_scale[0] == 1.0f);
        assert_int_equal(m.num_relabelled, 0);
        AUX_ASSERT_CLOSE(m.td_loss, ref.s->td_loss, 0);
        const std::vector<std::string> diff = q_differences(p, ref);
        for (const std::string &n : diff) printf("  differs: %s\n", n.c_str());
        if (!diff.empty()) fail_msg("step %llu: %zu Q tensors differ from the Q-only reference",
                                    (unsigned long long)k + 1, diff.size());
    }
    assert_true(read(p, "regime.s")[0] == 1.0f);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

static void test_negative_control_tiny_cql(void **) {
    fh_config c = disabled_config();
    c.cql_alpha = 1e-3f;
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 6);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    QOnly ref(c, tb.batch);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    ref.step(0);
    fh_metrics m = {sizeof m};
    assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
    assert_true(m.cql_loss > 0);
    // After one step exactly the online branch heads differ (each U_b and e_b), nothing else:
    // the targets were blended before Adam, so they agree.
    const std::vector<std::string> diff = q_differences(p, ref);
    for (const std::string &n : diff) assert_true(is_head(n));
    assert_int_equal(diff.size(), 2 * c.num_branches);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

static void test_negative_control_regimes(void **) {
    fh_config c = disabled_config();
    c.num_regimes = 3;
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 6);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    QOnly ref(c, tb.batch);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    ref.step(0);
    assert_true(q_differences(p, ref).empty());  // ρ = 1 during step 1
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    ref.step(1);
    const std::vector<std::string> diff = q_differences(p, ref);
    printf("R = 3: %zu Q tensors differ after step 2 (e.g. %s)\n", diff.size(),
           diff.empty() ? "-" : diff[0].c_str());
    assert_true(diff.size() > 4);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_and_outputs_readable),
        cmocka_unit_test(test_learner_parameters_listed_and_trained),
        cmocka_unit_test(test_aux_losses_fall_on_fixed_batch),
        cmocka_unit_test(test_aux_schedule_one_rank_and_two),
        cmocka_unit_test(test_disabled_learners_are_skipped),
        cmocka_unit_test(test_negative_control_tiny_cql),
        cmocka_unit_test(test_negative_control_regimes),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
