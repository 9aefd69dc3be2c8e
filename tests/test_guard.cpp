/* The divergence guard (src/guard.hpp): inputs and hyperparameters that made the state
 * non-finite before it existed now leave the whole state bitwise as it was (and the replay,
 * which no step changes), the metrics count the skipped step, fh_pipeline_check() names the
 * first non-finite quantity, and act refuses a q-value that is not finite (M4). */
/* Library headers before cmocka.h, whose fail() macro clashes with fh::fail. */
#include "guard.hpp"
#include "replay_ref.hpp"
#include "state_io.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cmath>
#include <cstring>
#include <string>

#include "test_cuda_util.h"

namespace {

using fhtest::make;
using fhtest::metrics_of;
using fhtest::scale_batch;

void upload_step(fh_pipeline *p, const fh_test_batch &tb) { fhtest::step(p, tb); }

fh::Checkpoint state(fh_pipeline *p, const char *name) {
    return fhtest::state_of(p, fh_test_tmp_path(name));
}

/* The metric a guard message names ("the metric td_loss = nan"), or "" for a state element. */
float named_metric(const fh_metrics &m, const std::string &msg, bool &found) {
    static const struct { const char *name; size_t off; } kMetrics[] = {
        {"td_loss", offsetof(fh_metrics, td_loss)}, {"q_mean", offsetof(fh_metrics, q_mean)},
        {"cql_loss", offsetof(fh_metrics, cql_loss)},
        {"iql_loss_hi", offsetof(fh_metrics, iql_loss_hi)},
        {"iql_loss_lo", offsetof(fh_metrics, iql_loss_lo)},
        {"iqn_loss", offsetof(fh_metrics, iqn_loss)}, {"attn_loss", offsetof(fh_metrics, attn_loss)},
        {"conf_loss", offsetof(fh_metrics, conf_loss)},
        {"grad_norm", offsetof(fh_metrics, grad_norm)},
        {"ensemble_std", offsetof(fh_metrics, ensemble_std)}};
    found = false;
    for (const auto &k : kMetrics)
        if (msg.find(std::string("the metric ") + k.name + " =") != std::string::npos) {
            found = true;
            float v;
            memcpy(&v, (const char *)&m + k.off, sizeof v);
            return v;
        }
    return 0;
}

/* One step on an extreme batch: skipped, state bitwise unchanged, counted, reported once. */
void expect_skipped_step(fh_pipeline *p, const fh_test_batch &extreme, std::string *msg_out) {
    const fh::Checkpoint before = state(p, "guard_before.ckpt");
    const uint64_t step0 = metrics_of(p).step;
    upload_step(p, extreme);
    const fh_metrics m = metrics_of(p);
    assert_int_equal(m.step, step0 + 1);
    if (m.last_step_skipped != 1)
        fail_msg("the step was applied (td_loss %g, grad_norm %g): this test needs a larger input",
                 (double)m.td_loss, (double)m.grad_norm);
    assert_int_equal(m.steps_skipped, 1);
    const fh::Checkpoint after = state(p, "guard_after.ckpt");
    const int diff = fhtest::first_different_buffer(before, after);
    if (diff >= 0) fail_msg("buffer %d changed in a skipped step", diff);

    assert_int_equal(fh_pipeline_check(p), FH_ERR_NON_FINITE);
    const std::string msg = fh_last_error_message();
    const std::string want = "step " + std::to_string(step0 + 1) + " applied no update: ";
    if (msg.find(want) != 0 || msg.find(" is not finite") == std::string::npos)
        fail_msg("message: %s", msg.c_str());
    bool is_metric;
    const float v = named_metric(m, msg, is_metric);
    if (is_metric && std::isfinite(v)) fail_msg("the named metric is finite: %s", msg.c_str());
    printf("[GUARD] %s\n", msg.c_str());
    assert_int_equal(fh_pipeline_check(p), FH_OK);  /* reported once */
    if (msg_out) *msg_out = msg;
}

/* Extreme but finite inputs (M3's rewards x1e12 and obs x1e11): the step is skipped and
 * training goes on with the next ordinary batch. */
void test_extreme_inputs_skip_the_step(void **) {
    const fh_config c = fh_test_small_config();
    fh_pipeline *p = make(c);
    fh_test_batch tb, big;
    fh_test_batch_make(&tb, &c, 1);
    fh_test_batch_make(&big, &c, 2);
    scale_batch(big, c, 1e12f, 1e11f);
    upload_step(p, tb);  /* non-zero moments before the skipped step */
    assert_int_equal(fh_pipeline_check(p), FH_OK);
    expect_skipped_step(p, big, nullptr);

    const fh::Checkpoint before = state(p, "guard_before.ckpt");
    upload_step(p, tb);
    assert_int_equal(metrics_of(p).last_step_skipped, 0);
    assert_int_equal(metrics_of(p).steps_skipped, 1);
    assert_int_equal(fh_pipeline_check(p), FH_OK);
    assert_true(fhtest::first_different_buffer(before, state(p, "guard_after.ckpt")) == 0);
    fh_test_batch_free(&tb);
    fh_test_batch_free(&big);
    fh_pipeline_destroy(p);
}

/* With a replay the batch is drawn inside the step (SPEC §5.0). A ring of extreme rows makes
 * every sampled batch extreme: the step is skipped, the state is bitwise as it was, and the
 * replay holds exactly the rows inserted (no step writes it; the guard restores only the
 * state). The step counter advanced, so the next step draws another batch; after ordinary rows
 * are inserted over the extreme ones, training goes on. */
void test_skipped_step_leaves_the_replay(void **) {
    const fh_config c = replay_ref::config(16, 2);
    fh_pipeline *p = make(c);
    auto insert = [&](const replay_ref::Rows &r) {
        const fh_replay_rows v = r.view();
        assert_int_equal(fh_pipeline_insert(p, &v), FH_OK);
    };
    insert(replay_ref::random_rows(c, 16, 1, 0.2));
    assert_int_equal(fh_pipeline_train(p, 2), FH_OK);  /* non-zero moments */
    replay_ref::Rows big = replay_ref::random_rows(c, 16, 2, 0.2);
    for (float &x : big.obs) x *= 1e11f;
    for (float &x : big.reward) x *= 1e12f;
    insert(big);
    const fh::Checkpoint before = state(p, "guard_replay_before.ckpt");
    assert_int_equal(fh_pipeline_train(p, 1), FH_OK);
    const fh_metrics m = metrics_of(p);
    if (m.last_step_skipped != 1) fail_msg("the step was applied (td_loss %g)", (double)m.td_loss);
    assert_int_equal(m.steps_skipped, 1);
    assert_int_equal(m.step, 3);
    const fh::Checkpoint after = state(p, "guard_replay_after.ckpt");
    assert_int_equal(fhtest::first_different_buffer(before, after), -1);
    assert_true(fhtest::same_replay(before, after));
    /* Independently of the checkpoint before: the ring is the 16 extreme rows, oldest first. */
    assert_int_equal(after.replay.n_ins, 32);
    assert_true(after.replay.rows.field[fh::RF_OBS].size() == big.obs.size() * sizeof(float));
    assert_int_equal(memcmp(after.replay.rows.field[fh::RF_OBS].data(), big.obs.data(),
                            big.obs.size() * sizeof(float)), 0);
    assert_int_equal(memcmp(after.replay.rows.field[fh::RF_REWARD].data(), big.reward.data(),
                            big.reward.size() * sizeof(float)), 0);
    assert_int_equal(fh_pipeline_check(p), FH_ERR_NON_FINITE);
    printf("[GUARD] replay: %s\n", fh_last_error_message());

    insert(replay_ref::random_rows(c, 16, 3, 0.2));
    assert_int_equal(fh_pipeline_train(p, 1), FH_OK);
    assert_int_equal(metrics_of(p).last_step_skipped, 0);
    assert_int_equal(fh_pipeline_check(p), FH_OK);
    assert_true(fhtest::first_different_buffer(after, state(p, "guard_replay_after.ckpt")) == 0);
    fh_pipeline_destroy(p);
}

/* M3's silent case: at the default sizes, rewards x1e13 with obs x1e10 keep every metric finite
 * while an Adam second moment of the attention head overflows (g^2 of a gradient above 1e19).
 * Before the guard the state went non-finite with every metric and readable tensor finite. */
void test_state_checked_when_metrics_are_finite(void **) {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 64;
    fh_pipeline *p = make(c);
    fh_test_batch big;
    fh_test_batch_make(&big, &c, 2);
    scale_batch(big, c, 1e13f, 1e10f);
    std::string msg;
    expect_skipped_step(p, big, &msg);
    const fh_metrics m = metrics_of(p);
    const float all[] = {m.td_loss, m.q_mean, m.cql_loss, m.iql_loss_hi, m.iql_loss_lo,
                         m.iqn_loss, m.attn_loss, m.conf_loss, m.grad_norm, m.ensemble_std};
    for (float v : all)
        if (!std::isfinite(v)) fail_msg("a metric is not finite (%g): not the silent case", (double)v);
    if (msg.find("adam_v of attn.w_r2[0, ") == std::string::npos) fail_msg("message: %s", msg.c_str());
    fh_test_batch_free(&big);
    fh_pipeline_destroy(p);
}

/* obs of 3e38 overflowed the very first step (the old test_diverged_state_is_not_saved): now the
 * step is skipped and the state, still the initial one, saves and loads. */
void test_overflowing_obs_keep_the_initial_state(void **) {
    const fh_config c = fh_test_small_config();
    fh_pipeline *p = make(c), *fresh = make(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 7);
    for (size_t i = 0; i < (size_t)c.batch_size * c.obs_dim; ++i) tb.obs[i] = 3e38f;
    expect_skipped_step(p, tb, nullptr);
    const fh::Checkpoint a = state(p, "guard_a.ckpt"), b = state(fresh, "guard_b.ckpt");
    assert_int_equal(fhtest::first_different_buffer(a, b), -1);
    assert_int_equal(fh_pipeline_load(fresh, fh_test_tmp_path("guard_a.ckpt")), FH_OK);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(fresh);
}

/* M4: with lr_q = 1e20 the first step moves the Q weights by ~1e20; the net then overflows.
 * Steps are skipped from then on, and act refuses the NaN q-values instead of returning
 * action 0 with FH_OK; the act counter does not advance. */
void test_huge_learning_rate(void **) {
    fh_config c = fh_test_small_config();
    c.lr_q = 1e20f;
    fh_pipeline *p = make(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 3);
    for (int k = 0; k < 3; ++k) upload_step(p, tb);
    const fh_metrics m = metrics_of(p);
    if (m.steps_skipped == 0) fail_msg("no step was skipped");
    assert_int_equal(fh_pipeline_check(p), FH_ERR_NON_FINITE);
    printf("[GUARD] lr_q = 1e20: %llu of 3 steps skipped: %s\n",
           (unsigned long long)m.steps_skipped, fh_last_error_message());

    fh::Checkpoint before = state(p, "guard_before.ckpt");
    int32_t actions[4 * 3];
    float q[4 * 3 * 4];
    fh_status s = fh_pipeline_act(p, tb.obs, tb.goal, 4, 0.0f, actions, q);
    if (s != FH_ERR_NON_FINITE) fail_msg("act: %s", fh_status_string(s));
    const char *msg = fh_last_error_message();
    if (!strstr(msg, "q-value of row 0, branch 0, action 0") || !strstr(msg, "no action"))
        fail_msg("message: %s", msg);
    assert_int_equal(fh_pipeline_act(p, tb.obs, tb.goal, 4, 0.0f, actions, NULL), FH_ERR_NON_FINITE);
    fh::Checkpoint after = state(p, "guard_after.ckpt");
    assert_int_equal(after.act_calls, before.act_calls);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

/* Guard codes name quantities in the documented order: the scalars, then the persistent
 * buffers end to end (parameters, targets, Adam moments, ...). */
void test_guard_codes_name_the_state(void **) {
    const fh_config c = fh_test_small_config();
    const fh::Layout L = fh::make_layout(fh::make_dims(c));
    const int64_t S = fh::NUM_GUARD_SCALARS;
    assert_string_equal(fh::guard_quantity_name(L, fh::GS_TD_LOSS).c_str(), "the metric td_loss");
    assert_string_equal(fh::guard_quantity_name(L, fh::GS_GRAD_NORM).c_str(),
                        "the metric grad_norm");
    assert_string_equal(fh::guard_quantity_name(L, S).c_str(), "q.W1[0, 0]");
    assert_string_equal(fh::guard_quantity_name(L, S + (int64_t)c.obs_dim + c.goal_dim + 1).c_str(),
                        "q.W1[1, 1]");
    const int64_t q = (int64_t)L.buf_size[fh::BUF_Q];
    assert_string_equal(fh::guard_quantity_name(L, S + q).c_str(), "target.q.W1[0, 0]");
    assert_string_equal(fh::guard_quantity_name(L, S + 2 * q + 2).c_str(), "adam_m of q.W1[0, 2]");
    assert_string_equal(fh::guard_quantity_name(L, S + 4 * q - 1).c_str(), "adam_v of q.b_u[0, 0]");
    int64_t total = 0;
    for (int b = 0; b < fh::NUM_PERSISTENT; ++b) total += (int64_t)L.buf_size[b];
    const std::string last = fh::guard_quantity_name(L, S + total - 1);
    if (last != "regime.scale[0, " + std::to_string(c.num_regimes - 1) + "]")
        fail_msg("last element: %s", last.c_str());
}

/* An ordinary run never trips the guard. */
void test_ordinary_steps_are_applied(void **) {
    const fh_config c = fh_test_small_config();
    fh_pipeline *p = make(c);
    for (uint64_t k = 0; k < 5; ++k) {
        fh_test_batch tb;
        fh_test_batch_make(&tb, &c, 10 + k);
        upload_step(p, tb);
        fh_test_batch_free(&tb);
        assert_int_equal(metrics_of(p).last_step_skipped, 0);
    }
    assert_int_equal(metrics_of(p).steps_skipped, 0);
    assert_int_equal(fh_pipeline_check(p), FH_OK);
    assert_int_equal(fh_pipeline_check(NULL), FH_ERR_NULL_POINTER);
    fh_pipeline_destroy(p);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extreme_inputs_skip_the_step),
        cmocka_unit_test(test_skipped_step_leaves_the_replay),
        cmocka_unit_test(test_state_checked_when_metrics_are_finite),
        cmocka_unit_test(test_overflowing_obs_keep_the_initial_state),
        cmocka_unit_test(test_huge_learning_rate),
        cmocka_unit_test(test_guard_codes_name_the_state),
        cmocka_unit_test(test_ordinary_steps_are_applied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
