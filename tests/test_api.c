/* The C API contract: defaults, handles, every bad input with its own status and message, and
 * that a refused call leaves the pipeline usable and unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static fh_pipeline *make(const fh_config *c) {
    fh_pipeline *p = NULL;
    fh_status s = fh_pipeline_create(c, &p);
    if (s != FH_OK) fail_msg("create: %s", fh_last_error_message());
    return p;
}

/* Reads every tensor into one buffer, to compare whole pipeline states. */
static float *snapshot(fh_pipeline *p, size_t *n_out) {
    uint32_t n = 0;
    assert_int_equal(fh_pipeline_num_tensors(p, &n), FH_OK);
    size_t total = 0;
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info = {sizeof info};
        assert_int_equal(fh_pipeline_tensor_info(p, i, &info), FH_OK);
        total += (size_t)info.rows * info.cols;
    }
    float *all = malloc(total * sizeof(float)), *at = all;
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info = {sizeof info};
        fh_pipeline_tensor_info(p, i, &info);
        size_t c = (size_t)info.rows * info.cols;
        assert_int_equal(fh_pipeline_read_tensor(p, info.name, at, c), FH_OK);
        at += c;
    }
    *n_out = total;
    return all;
}

static void assert_same_state(fh_pipeline *p, const float *before, size_t n) {
    size_t m = 0;
    float *now = snapshot(p, &m);
    assert_int_equal(m, n);
    assert_memory_equal(now, before, n * sizeof(float));
    free(now);
}

static void expect(fh_status got, fh_status want, const char *must_mention) {
    if (got != want)
        fail_msg("status %s, expected %s (%s)", fh_status_string(got), fh_status_string(want),
                 fh_last_error_message());
    if (must_mention && !strstr(fh_last_error_message(), must_mention))
        fail_msg("message '%s' does not mention '%s'", fh_last_error_message(), must_mention);
}

static void test_defaults_and_version(void **state) {
    (void)state;
    fh_config c;
    assert_int_equal(fh_config_init(&c), FH_OK);
    assert_int_equal(c.struct_size, sizeof(fh_config));
    assert_int_equal(c.batch_size, 16384);
    assert_int_equal(c.obs_dim, 124);
    assert_int_equal(c.goal_dim, 4);
    assert_int_equal(c.num_branches, 4);
    assert_int_equal(c.actions_per_branch, 8);
    assert_int_equal(c.trunk_hidden, 256);
    assert_int_equal(c.sn_layers, FH_SN_W2);
    assert_float_equal(c.gamma, 0.99f, 0);
    assert_float_equal(c.iql_tau_hi, 0.9f, 0);
    assert_int_equal(c.num_regimes, 4);
    assert_int_equal(fh_version(), FOXHUNT_VERSION_NUMBER);
    expect(fh_config_init(NULL), FH_ERR_NULL_POINTER, "config");
    assert_string_equal(fh_status_string(FH_ERR_NON_FINITE), "FH_ERR_NON_FINITE");
    assert_non_null(fh_status_string((fh_status)999));
    fh_pipeline_destroy(NULL); /* a no-op */
}

static void test_bad_configs(void **state) {
    (void)state;
    fh_pipeline *p = (fh_pipeline *)0x1;
    fh_config c = fh_test_small_config();
    expect(fh_pipeline_create(NULL, &p), FH_ERR_NULL_POINTER, "config");
    assert_null(p);
    expect(fh_pipeline_create(&c, NULL), FH_ERR_NULL_POINTER, "out");

    c.struct_size = sizeof c - 4;
    expect(fh_pipeline_create(&c, &p), FH_ERR_STRUCT_SIZE, "struct_size");
    c.struct_size = sizeof c + 8;
    expect(fh_pipeline_create(&c, &p), FH_ERR_STRUCT_SIZE, "struct_size");
    c = fh_test_small_config();
    c.batch_size = 0;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION, "batch_size = 0");
    c = fh_test_small_config();
    c.trunk_hidden = 4000000000u;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION, "trunk_hidden");
    c = fh_test_small_config();
    c.obs_dim = 9; /* attn_token_dim = 2 */
    expect(fh_pipeline_create(&c, &p), FH_ERR_INDIVISIBLE, "obs_dim = 9");
    c = fh_test_small_config();
    c.obs_dim = 2048; /* 1024 tokens of 2, and the goal's */
    c.attn_token_dim = 2;
    c.goal_dim = 2;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION,
           "1025 attention tokens (obs_dim / attn_token_dim = 2048 / 2, plus one for the goal)");
    c = fh_test_small_config();
    c.attn_heads = 3; /* d_model 8 */
    expect(fh_pipeline_create(&c, &p), FH_ERR_INDIVISIBLE, "attn_heads");
    c = fh_test_small_config();
    c.gamma = 1.5f;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "gamma");
    /* A value one ulp outside its range is printed as it is, not rounded into the range. */
    c.gamma = nextafterf(1.0f, 2.0f);
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "config.gamma = 1.00000012 is outside");
    c = fh_test_small_config();
    c.lr_q = NAN;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "lr_q");
    c = fh_test_small_config();
    c.iql_tau_lo = 1.0f;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "iql_tau_lo");
    /* regime_max's lower bound is another field: the message names it and its value. */
    c = fh_test_small_config();
    c.regime_min = 2.0f;
    c.regime_max = 1.0f;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE,
           "config.regime_max = 1 must be greater than config.regime_min = 2");
    c = fh_test_small_config();
    c.num_regimes = FH_MAX_REGIMES + 1;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION, "num_regimes");
    c = fh_test_small_config();
    c.backend = 7;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "backend");
    c = fh_test_small_config();
    c.sn_layers = 4;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "sn_layers");
    c = fh_test_small_config();
    c.math_mode = FH_MATH_BF16 + 1;
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE, "math_mode = 3");
    assert_null(p);
}

static void test_cuda_requested_without_device(void **state) {
    (void)state;
    if (fh_test_have_cuda()) skip();
    fh_config c = fh_test_small_config();
    c.backend = FH_BACKEND_CUDA;
    fh_pipeline *p = NULL;
    expect(fh_pipeline_create(&c, &p), FH_ERR_NO_CUDA, "CUDA");
    assert_null(p);
    c.backend = FH_BACKEND_AUTO; /* falls back to the CPU */
    p = make(&c);
    int32_t b = -1;
    assert_int_equal(fh_pipeline_backend(p, &b), FH_OK);
    assert_int_equal(b, FH_BACKEND_CPU);
    fh_pipeline_destroy(p);
}

static void test_step_before_upload_and_null_handles(void **state) {
    (void)state;
    fh_config c = fh_test_small_config();
    fh_pipeline *p = make(&c);
    expect(fh_pipeline_step(p), FH_ERR_NO_BATCH, "upload");
    expect(fh_pipeline_step(NULL), FH_ERR_NULL_POINTER, "pipeline");
    expect(fh_pipeline_upload(NULL, NULL), FH_ERR_NULL_POINTER, "pipeline");
    expect(fh_pipeline_upload(p, NULL), FH_ERR_NULL_POINTER, "batch");
    fh_metrics m = {sizeof m};
    expect(fh_pipeline_metrics(NULL, &m), FH_ERR_NULL_POINTER, "pipeline");
    expect(fh_pipeline_metrics(p, NULL), FH_ERR_NULL_POINTER, "metrics");
    m.struct_size = 3;
    expect(fh_pipeline_metrics(p, &m), FH_ERR_STRUCT_SIZE, "metrics");
    m.struct_size = sizeof m;
    assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK); /* before any step: zeros */
    assert_int_equal(m.step, 0);
    assert_string_equal(fh_last_error_message(), ""); /* success clears the message */
    fh_timings t = {sizeof t};
    assert_int_equal(fh_pipeline_timings(p, &t), FH_OK);
    t.struct_size = 1;
    expect(fh_pipeline_timings(p, &t), FH_ERR_STRUCT_SIZE, "timings");
    expect(fh_pipeline_dump_graph(p, "/tmp/x.dot"), FH_ERR_NO_CUDA, "CPU");
    fh_pipeline_destroy(p);
}

static void test_bad_batches_change_nothing(void **state) {
    (void)state;
    fh_config c = fh_test_small_config();
    fh_pipeline *p = make(&c);
    fh_test_batch good, bad;
    fh_test_batch_make(&good, &c, 1);
    assert_int_equal(fh_pipeline_upload(p, &good.batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    size_t n;
    float *before = snapshot(p, &n);

    fh_test_batch_make(&bad, &c, 2);
    bad.batch.struct_size = 8;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_STRUCT_SIZE, "batch.struct_size");
    bad.batch.struct_size = sizeof(fh_batch);
    bad.batch.batch_size = c.batch_size + 1;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_BUFFER_SIZE, "batch_size");
    bad.batch.batch_size = c.batch_size;

    bad.obs[5 * c.obs_dim + 3] = NAN;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_NON_FINITE, "batch.obs[5, 3]");
    bad.obs[5 * c.obs_dim + 3] = 0;
    bad.her_goal[7 * c.goal_dim + 1] = INFINITY; /* checked even if not relabelled */
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_NON_FINITE, "batch.her_goal[7, 1]");
    bad.her_goal[7 * c.goal_dim + 1] = 0;
    bad.reward[4] = -INFINITY;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_NON_FINITE, "batch.reward[4] = -inf");
    bad.reward[4] = 0;
    bad.action[2 * c.num_branches + 1] = (int32_t)c.actions_per_branch;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_OUT_OF_RANGE, "batch.action[2, 1] = 4");
    bad.action[2 * c.num_branches + 1] = -1;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_OUT_OF_RANGE, "= -1");
    bad.action[2 * c.num_branches + 1] = 0;
    bad.regime[9] = (int32_t)c.num_regimes;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_OUT_OF_RANGE, "batch.regime[9] = 3");
    bad.regime[9] = 0;
    bad.done[3] = 2;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_OUT_OF_RANGE, "batch.done[3] = 2");
    bad.done[3] = 0;
    bad.batch.next_obs = NULL;
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_NULL_POINTER, "next_obs");
    bad.batch.next_obs = bad.next_obs;
    bad.batch.her_goal = NULL; /* required when goal_dim > 0 */
    expect(fh_pipeline_upload(p, &bad.batch), FH_ERR_NULL_POINTER, "her_goal");
    bad.batch.her_goal = bad.her_goal;

    assert_same_state(p, before, n);
    /* Still usable, and still on the last good batch: a step equals one on `good`. */
    fh_pipeline *q = make(&c);
    assert_int_equal(fh_pipeline_upload(q, &good.batch), FH_OK);
    assert_int_equal(fh_pipeline_step(q), FH_OK);
    assert_int_equal(fh_pipeline_step(q), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    size_t m;
    float *sq = snapshot(q, &m);
    assert_same_state(p, sq, m);
    free(sq);
    free(before);
    fh_test_batch_free(&good);
    fh_test_batch_free(&bad);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(q);
}

static void test_tensors_by_name(void **state) {
    (void)state;
    fh_config c = fh_test_small_config();
    fh_pipeline *p = make(&c);
    fh_tensor_info info = {sizeof info};
    assert_int_equal(fh_pipeline_find_tensor(p, "q.W1", &info), FH_OK);
    assert_int_equal(info.rows, c.trunk_hidden);
    assert_int_equal(info.cols, c.obs_dim + c.goal_dim);
    assert_int_equal(info.group, FH_GROUP_Q);
    const char *names[] = {"q.b1", "q.W2", "q.V.2", "q.U.0", "q.e.1", "q.w_u", "q.b_u",
                           "iql_hi.W1", "iql_lo.w3", "iqn.Wphi", "iqn.b_z", "attn.Wg", "attn.P",
                           "attn.w_r2", "target.q.W2", "target.iqn.Wm", "sn.u.W2", "regime.s",
                           "regime.scale", "d_states", "ensemble_mean", "ensemble_var",
                           "confidence"};
    for (size_t i = 0; i < sizeof names / sizeof *names; ++i)
        if (fh_pipeline_find_tensor(p, names[i], &info) != FH_OK)
            fail_msg("tensor %s: %s", names[i], fh_last_error_message());
    expect(fh_pipeline_find_tensor(p, "q.W9", &info), FH_ERR_UNKNOWN_NAME, "q.W9");
    expect(fh_pipeline_find_tensor(p, "sn.u.W1", &info), FH_ERR_UNKNOWN_NAME, NULL); /* no SN on W1 */
    uint32_t n = 0;
    fh_pipeline_num_tensors(p, &n);
    expect(fh_pipeline_tensor_info(p, n, &info), FH_ERR_OUT_OF_RANGE, "index");

    float w[16 * 10];
    expect(fh_pipeline_read_tensor(p, "q.W1", w, 16 * 10 - 1), FH_ERR_BUFFER_SIZE, "count");
    expect(fh_pipeline_read_tensor(p, "nope", w, 1), FH_ERR_UNKNOWN_NAME, "nope");
    expect(fh_pipeline_read_tensor(p, "q.W1", NULL, 160), FH_ERR_NULL_POINTER, "out");
    assert_int_equal(fh_pipeline_read_tensor(p, "q.W1", w, 160), FH_OK);
    for (int i = 0; i < 160; ++i) w[i] = 0.001f * (float)i;
    assert_int_equal(fh_pipeline_write_tensor(p, "q.W1", w, 160), FH_OK);
    float r[160];
    assert_int_equal(fh_pipeline_read_tensor(p, "q.W1", r, 160), FH_OK);
    assert_memory_equal(r, w, sizeof r);
    w[17] = NAN;
    expect(fh_pipeline_write_tensor(p, "q.W1", w, 160), FH_ERR_NON_FINITE, "q.W1[1, 7]");
    assert_int_equal(fh_pipeline_read_tensor(p, "q.W1", r, 160), FH_OK);
    assert_float_equal(r[17], 0.017f, 0); /* unchanged */
    float b[32];
    expect(fh_pipeline_write_tensor(p, "confidence", b, 32), FH_ERR_UNKNOWN_NAME, "read-only");
    fh_pipeline_destroy(p);
    /* State tensors keep their ranges: u needs a norm, s >= 0, rho within its clamp. */
    c = fh_test_small_config();
    p = make(&c);
    float zeros[16] = {0}, s3[3] = {1, -0.5f, 1}, rho3[3] = {1, 1, -5};
    expect(fh_pipeline_write_tensor(p, "sn.u.W2", zeros, 16), FH_ERR_BAD_VALUE, "sn.u.W2");
    expect(fh_pipeline_write_tensor(p, "regime.s", s3, 3), FH_ERR_BAD_VALUE, "regime.s[0, 1]");
    expect(fh_pipeline_write_tensor(p, "regime.scale", rho3, 3), FH_ERR_BAD_VALUE,
           "regime.scale[0, 2] = -5");
    rho3[2] = 4.0f; /* = regime_max: allowed */
    assert_int_equal(fh_pipeline_write_tensor(p, "regime.scale", rho3, 3), FH_OK);
    /* Under spectral normalisation (W2 here), no write may make σ vanish: a u whose product
     * with W rounds to (nearly) nothing, a W of zeros, a target W of zeros. Nothing changes. */
    float u[16], u_before[16], w2[16 * 16], w2_before[16 * 16];
    assert_int_equal(fh_pipeline_read_tensor(p, "sn.u.W2", u_before, 16), FH_OK);
    assert_int_equal(fh_pipeline_read_tensor(p, "q.W2", w2_before, 256), FH_OK);
    for (int i = 0; i < 16; ++i) u[i] = i == 3 ? 1e-45f : 0.0f; /* one denormal */
    expect(fh_pipeline_write_tensor(p, "sn.u.W2", u, 16), FH_ERR_BAD_VALUE, "below 1e-12");
    memset(w2, 0, sizeof w2);
    expect(fh_pipeline_write_tensor(p, "q.W2", w2, 256), FH_ERR_BAD_VALUE, "'q.W2'");
    expect(fh_pipeline_write_tensor(p, "target.q.W2", w2, 256), FH_ERR_BAD_VALUE,
           "'target.q.W2' is all zeros");
    assert_int_equal(fh_pipeline_read_tensor(p, "sn.u.W2", u, 16), FH_OK);
    assert_memory_equal(u, u_before, sizeof u);
    assert_int_equal(fh_pipeline_read_tensor(p, "q.W2", w2, 256), FH_OK);
    assert_memory_equal(w2, w2_before, sizeof w2);
    /* q.W1 has no spectral normalisation here: zeros are a weight like any other. */
    float w1[16 * 10] = {0};
    assert_int_equal(fh_pipeline_write_tensor(p, "q.W1", w1, 160), FH_OK);
    fh_pipeline_destroy(p);
    /* One regime: scaling is off (rho ≡ 1), so its state cannot be written. */
    c.num_regimes = 1;
    p = make(&c);
    float one = 2.5f;
    expect(fh_pipeline_write_tensor(p, "regime.scale", &one, 1), FH_ERR_UNKNOWN_NAME, "num_regimes");
    assert_int_equal(fh_pipeline_read_tensor(p, "regime.scale", &one, 1), FH_OK);
    assert_float_equal(one, 1.0f, 0);
    fh_pipeline_destroy(p);
}

static void test_act(void **state) {
    (void)state;
    fh_config c = fh_test_small_config();
    fh_pipeline *p = make(&c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 3);
    const uint32_t n = 5;
    int32_t a[5 * 3], a2[5 * 3];
    float q[5 * 3 * 4];
    assert_int_equal(fh_pipeline_act(p, tb.obs, tb.goal, n, 0.0f, a, q), FH_OK);
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t br = 0; br < 3; ++br) { /* greedy = argmax, ties lowest */
            const float *qb = q + (i * 3 + br) * 4;
            int best = 0;
            for (int k = 1; k < 4; ++k) if (qb[k] > qb[best]) best = k;
            assert_int_equal(a[i * 3 + br], best);
        }
    /* epsilon = 1: every action random, but each in range, and reproducible by act count. */
    assert_int_equal(fh_pipeline_act(p, tb.obs, tb.goal, n, 1.0f, a2, NULL), FH_OK);
    for (int i = 0; i < 15; ++i) assert_true(a2[i] >= 0 && a2[i] < 4);
    expect(fh_pipeline_act(p, tb.obs, tb.goal, 0, 0.0f, a, NULL), FH_ERR_BUFFER_SIZE, "n");
    expect(fh_pipeline_act(p, tb.obs, tb.goal, n, 1.5f, a, NULL), FH_ERR_BAD_VALUE, "epsilon");
    expect(fh_pipeline_act(p, tb.obs, tb.goal, n, nextafterf(1.0f, 2.0f), a, NULL),
           FH_ERR_BAD_VALUE, "'epsilon' = 1.00000012 is outside [0, 1]");
    expect(fh_pipeline_act(p, tb.obs, NULL, n, 0.0f, a, NULL), FH_ERR_NULL_POINTER, "goal");
    expect(fh_pipeline_act(p, NULL, tb.goal, n, 0.0f, a, NULL), FH_ERR_NULL_POINTER, "obs");
    tb.obs[1] = NAN;
    expect(fh_pipeline_act(p, tb.obs, tb.goal, n, 0.0f, a, NULL), FH_ERR_NON_FINITE, "obs[0, 1]");
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

static void test_memory_report(void **state) {
    (void)state;
    fh_config c = fh_test_small_config();
    fh_pipeline *p = make(&c);
    fh_memory_report r = {sizeof r};
    assert_int_equal(fh_pipeline_memory(p, &r), FH_OK);
    assert_true(r.parameters > 0 && r.activations > 0);
    assert_int_equal(r.total, r.parameters + r.activations + r.workspaces + r.batch_staging);
    /* The auxiliary learners' scratch is allocated by the first step and then counted. */
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 5);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    fh_memory_report after = {sizeof after};
    assert_int_equal(fh_pipeline_memory(p, &after), FH_OK);
    assert_true(after.activations > r.activations);
    assert_int_equal(after.parameters, r.parameters);
    /* The CPU backend holds two batches (current, and the next upload's buffer); one row of
     * SPEC §2's batch: obs, goal, reward, next_obs, next_achieved_goal, her_goal (f32), action,
     * regime (i32), done (u8). */
    const uint64_t row = 4 * (c.obs_dim + c.goal_dim + 1 + c.obs_dim + 2 * c.goal_dim) +
                         4 * (c.num_branches + 1) + 1;
    assert_int_equal(after.batch_staging, 2 * row * c.batch_size);
    fh_test_batch_free(&tb);
    r.struct_size = 0;
    expect(fh_pipeline_memory(p, &r), FH_ERR_STRUCT_SIZE, "report");
    fh_pipeline_destroy(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_version),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_cuda_requested_without_device),
        cmocka_unit_test(test_step_before_upload_and_null_handles),
        cmocka_unit_test(test_bad_batches_change_nothing),
        cmocka_unit_test(test_tensors_by_name),
        cmocka_unit_test(test_act),
        cmocka_unit_test(test_memory_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
