// The replay through the C API (SPEC §2.1, §5.0) on the CPU backend: config fields and the
// structs' 0.1 sizes, calls that do not apply to a pipeline, refused inserts that change
// nothing, a step that samples from the replay against the same batch built by hand from the
// independent reference (replay_ref.hpp) and uploaded, train(k), and checkpoints that carry the
// replay and continue bit for bit.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "replay_ref.hpp"
#include "testutil.h"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "replay_api_util.hpp"

using namespace replay_api;

namespace {

// Every tensor (step outputs included) and every metric bitwise equal.
void assert_same(fh_pipeline *a, fh_pipeline *b) {
    uint32_t n = 0;
    ok(fh_pipeline_num_tensors(a, &n));
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info = {sizeof info};
        ok(fh_pipeline_tensor_info(a, i, &info));
        const size_t c = (size_t)info.rows * info.cols;
        std::vector<float> x(c), y(c);
        ok(fh_pipeline_read_tensor(a, info.name, x.data(), c));
        ok(fh_pipeline_read_tensor(b, info.name, y.data(), c));
        if (memcmp(x.data(), y.data(), c * sizeof(float)) != 0)
            fail_msg("tensor %s differs", info.name);
    }
    fh_metrics ma = {sizeof ma}, mb = {sizeof mb};
    ok(fh_pipeline_metrics(a, &ma));
    ok(fh_pipeline_metrics(b, &mb));
    assert_int_equal(ma.step, mb.step);
    assert_memory_equal(&ma.td_loss, &mb.td_loss,
                        offsetof(fh_metrics, regime_scale) - offsetof(fh_metrics, td_loss));
}

}  // namespace

static void test_config_and_struct_sizes(void **state) {
    (void)state;
    fh_pipeline *p = nullptr;
    fh_config c = replay_ref::config(8, 0);
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION, "replay_envs = 0");
    c = replay_ref::config(0, 3);
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION, "replay_capacity = 0");
    c = replay_ref::config(1u << 31, 3);
    expect(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION, "exceeds 2^32");
    assert_null(p);

    // A config of the 0.1 size (ending at seed) is a config without a replay; whatever lies
    // beyond its size is not read.
    c = replay_ref::config(5, 2);
    c.struct_size = offsetof(fh_config, replay_capacity);
    p = make(c);
    fh_config back;
    memset(&back, 0xAB, sizeof back);
    back.struct_size = offsetof(fh_config, replay_capacity);
    ok(fh_pipeline_config(p, &back));
    assert_int_equal(back.struct_size, offsetof(fh_config, replay_capacity));
    assert_int_equal(back.batch_size, c.batch_size);
    assert_int_equal(back.replay_capacity, 0xABABABABu);  // not written
    back.struct_size = sizeof back;
    ok(fh_pipeline_config(p, &back));
    assert_int_equal(back.replay_capacity, 0);
    assert_int_equal(back.replay_envs, 0);
    expect(fh_pipeline_insert(p, nullptr), FH_ERR_NULL_POINTER, "rows");

    // Batches, timings and memory reports of the 0.1 size are accepted; other sizes are not.
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 1);
    fh_batch old = tb.batch;
    old.struct_size = offsetof(fh_batch, memory);
    ok(fh_pipeline_upload(p, &old));
    old.struct_size = offsetof(fh_batch, memory) + 4;
    expect(fh_pipeline_upload(p, &old), FH_ERR_STRUCT_SIZE, "batch.struct_size");
    ok(fh_pipeline_step(p));
    fh_timings t;
    memset(&t, 0xAB, sizeof t);
    t.struct_size = offsetof(fh_timings, sample_ms);
    ok(fh_pipeline_timings(p, &t));
    assert_true(t.total_ms > 0);
    uint32_t tail;
    memcpy(&tail, &t.sample_ms, 4);
    assert_int_equal(tail, 0xABABABABu);
    fh_memory_report r;
    memset(&r, 0xAB, sizeof r);
    r.struct_size = offsetof(fh_memory_report, replay);
    ok(fh_pipeline_memory(p, &r));
    assert_int_equal(r.replay, 0xABABABABABABABABull);
    assert_true(r.total > 0);
    r.struct_size = offsetof(fh_memory_report, replay) - 4;
    expect(fh_pipeline_memory(p, &r), FH_ERR_STRUCT_SIZE, "report.struct_size");
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

// Calls that do not apply refuse with a status that says so and change nothing.
static void test_calls_that_do_not_apply(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(6, 3);
    fh_pipeline *p = make(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 2);
    const std::vector<uint8_t> before = digest(p);
    expect(fh_pipeline_upload(p, &tb.batch), FH_ERR_UNSUPPORTED, "fh_pipeline_insert");
    expect(fh_pipeline_step(p), FH_ERR_NO_BATCH, "empty replay");
    expect(fh_pipeline_train(p, 3), FH_ERR_NO_BATCH, "empty replay");
    expect(fh_pipeline_train(p, 0), FH_ERR_BAD_VALUE, "'k' = 0");
    expect(fh_pipeline_save_ex(p, fh_test_tmp_path("x.ckpt"), 2), FH_ERR_BAD_VALUE, "flags");
    replay_ref::Rows rows = replay_ref::random_rows(c, 2, 5, 0.3);
    fh_replay_rows v = rows.view();
    v.memory = FH_MEMORY_DEVICE;
    expect(fh_pipeline_insert(p, &v), FH_ERR_UNSUPPORTED, "CPU backend reads host memory");
    v.memory = 7;
    expect(fh_pipeline_insert(p, &v), FH_ERR_BAD_VALUE, "rows.memory = 7");
    ok(fh_pipeline_sync(p));
    assert_true(digest(p) == before);
    fh_metrics m = {sizeof m};
    ok(fh_pipeline_metrics(p, &m));
    assert_int_equal(m.step, 0);
    fh_pipeline_destroy(p);

    fh_config plain = fh_test_small_config();
    p = make(plain);
    v.memory = FH_MEMORY_HOST;
    expect(fh_pipeline_insert(p, &v), FH_ERR_UNSUPPORTED, "without a replay");
    expect(fh_pipeline_save_ex(p, fh_test_tmp_path("x.ckpt"), FH_SAVE_REPLAY),
           FH_ERR_UNSUPPORTED, "without a replay");
    fh_batch dev = tb.batch;
    dev.memory = FH_MEMORY_DEVICE;
    expect(fh_pipeline_upload(p, &dev), FH_ERR_UNSUPPORTED, "CPU backend reads host memory");
    dev.memory = -1;
    expect(fh_pipeline_upload(p, &dev), FH_ERR_BAD_VALUE, "batch.memory = -1");
    expect(fh_pipeline_step(p), FH_ERR_NO_BATCH, "fh_pipeline_upload");
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

fh_status insert(fh_pipeline *p, const replay_ref::Rows &rows) {
    const fh_replay_rows v = rows.view();
    return fh_pipeline_insert(p, &v);
}

// Every way an insert can be refused: the status, a message naming tensor, coordinates and
// value, and no change to anything (the checkpoint with the replay is the same bytes as a
// twin's that never saw the refused inserts, and both step alike afterwards).
static void test_refused_inserts_change_nothing(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(6, 3);  // O = 8, G = 2, NB = 3, A = 4, 3 regimes
    fh_pipeline *p = make(c), *twin = make(c);
    const replay_ref::Rows first = replay_ref::random_rows(c, 5, 1, 0.3);
    ok(insert(p, first));
    ok(insert(twin, first));
    const std::vector<uint8_t> before = digest(p);
    const float nan = NAN, inf = INFINITY;
    struct Case {
        const char *what;
        void (*spoil)(replay_ref::Rows &, float, float);
        fh_status status;
        const char *message;
    };
    const Case cases[] = {
        {"obs", [](replay_ref::Rows &r, float n, float) { r.obs[((2 * 3) + 1) * 8 + 5] = n; },
         FH_ERR_NON_FINITE, "rows.obs[2, 1, 5] = nan is not finite"},
        {"goal", [](replay_ref::Rows &r, float, float i) { r.goal[(0 * 3 + 2) * 2 + 1] = i; },
         FH_ERR_NON_FINITE, "rows.goal[0, 2, 1] = inf is not finite"},
        {"action", [](replay_ref::Rows &r, float, float) { r.action[(3 * 3 + 0) * 3 + 1] = 4; },
         FH_ERR_OUT_OF_RANGE, "rows.action[3, 0, 1] = 4 is outside [0, 4)"},
        {"negative action", [](replay_ref::Rows &r, float, float) { r.action[2] = -1; },
         FH_ERR_OUT_OF_RANGE, "rows.action[0, 0, 2] = -1 is outside [0, 4)"},
        {"reward", [](replay_ref::Rows &r, float, float i) { r.reward[1 * 3 + 1] = -i; },
         FH_ERR_NON_FINITE, "rows.reward[1, 1] = -inf is not finite"},
        {"done", [](replay_ref::Rows &r, float, float) { r.done[2 * 3 + 2] = 2; },
         FH_ERR_OUT_OF_RANGE, "rows.done[2, 2] = 2 is not 0 or 1"},
        {"next_obs", [](replay_ref::Rows &r, float n, float) { r.next_obs[8 * 3 * 3 + 7] = n; },
         FH_ERR_NON_FINITE, "rows.next_obs[3, 0, 7] = nan is not finite"},
        {"next_achieved_goal", [](replay_ref::Rows &r, float n, float) { r.nag[23] = n; },
         FH_ERR_NON_FINITE, "rows.next_achieved_goal[3, 2, 1] = nan is not finite"},
        {"regime", [](replay_ref::Rows &r, float, float) { r.regime[0] = 3; },
         FH_ERR_OUT_OF_RANGE, "rows.regime[0, 0] = 3 is outside [0, 3)"},
        {"episode_end", [](replay_ref::Rows &r, float, float) { r.episode_end[1 * 3 + 2] = 7; },
         FH_ERR_OUT_OF_RANGE, "rows.episode_end[1, 2] = 7 is not 0 or 1"},
        {"terminal without episode end",
         [](replay_ref::Rows &r, float, float) {
             r.done[3 * 3 + 1] = 1;
             r.episode_end[3 * 3 + 1] = 0;
         },
         FH_ERR_OUT_OF_RANGE, "rows.done[3, 1] = 1 but rows.episode_end[3, 1] = 0"},
        // The first failing check is reported: obs comes before reward.
        {"two faults",
         [](replay_ref::Rows &r, float n, float) {
             r.reward[0] = n;
             r.obs[3 * 3 * 8] = n;
         },
         FH_ERR_NON_FINITE, "rows.obs[3, 0, 0] = nan"},
    };
    for (const Case &k : cases) {
        replay_ref::Rows bad = replay_ref::random_rows(c, 4, 7, 0.3);
        for (uint8_t &e : bad.episode_end) e = 0;  // no fault but the one planted
        for (uint8_t &d : bad.done) d = 0;
        k.spoil(bad, nan, inf);
        print_message("case %s\n", k.what);
        expect(insert(p, bad), k.status, k.message);
        assert_true(digest(p) == before);
    }
    // More rows than the ring keeps: a fault in a row that would be overwritten at once is
    // refused all the same.
    replay_ref::Rows long_rows = replay_ref::random_rows(c, 8, 9, 0.0);
    long_rows.obs[3] = nan;
    expect(insert(p, long_rows), FH_ERR_NON_FINITE, "rows.obs[0, 0, 3] = nan");
    // The header.
    fh_replay_rows v = first.view();
    v.struct_size -= 8;
    expect(fh_pipeline_insert(p, &v), FH_ERR_STRUCT_SIZE, "rows.struct_size");
    v = first.view();
    v.num_rows = 0;
    expect(fh_pipeline_insert(p, &v), FH_ERR_BUFFER_SIZE, "num_rows = 0");
    v = first.view();
    v.num_envs = 2;
    expect(fh_pipeline_insert(p, &v), FH_ERR_BUFFER_SIZE, "num_envs = 2");
    v = first.view();
    v.obs = nullptr;
    expect(fh_pipeline_insert(p, &v), FH_ERR_NULL_POINTER, "rows.obs");
    v = first.view();
    v.episode_end = nullptr;
    expect(fh_pipeline_insert(p, &v), FH_ERR_NULL_POINTER, "rows.episode_end");
    v = first.view();
    v.next_achieved_goal = nullptr;
    expect(fh_pipeline_insert(p, &v), FH_ERR_NULL_POINTER, "rows.next_achieved_goal");
    assert_true(digest(p) == before);

    // Afterwards the two step alike, and a valid insert still works (regime may be absent).
    replay_ref::Rows more = replay_ref::random_rows(c, 2, 11, 0.5);
    v = more.view();
    v.regime = nullptr;
    ok(fh_pipeline_insert(p, &v));
    ok(fh_pipeline_insert(twin, &v));
    ok(fh_pipeline_train(p, 3));
    ok(fh_pipeline_train(twin, 3));
    assert_same(p, twin);
    assert_true(digest(p) == digest(twin));
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(twin);
}

// A step that samples from the replay equals a step on the same batch, built by hand from the
// reference's draws and uploaded to a pipeline without a replay: every tensor and metric bit
// for bit, over inserts that wrap the ring, with several environments; train(k) equals k of
// them.
static void test_sampled_step_equals_uploaded_step(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(7, 3);
    fh_config plain = c;
    plain.replay_capacity = plain.replay_envs = 0;
    fh_pipeline *a = make(c), *u = make(plain);
    replay_ref::Rows h(c);
    uint64_t step = 0;
    const uint32_t inserts[] = {2, 1, 5, 9, 3};
    for (uint32_t k = 0; k < 5; ++k) {
        const replay_ref::Rows r = replay_ref::random_rows(c, inserts[k], 40 + k, 0.25);
        ok(insert(a, r));
        h.append(r);
        const uint32_t steps = 1 + k % 3;
        if (steps == 1) ok(fh_pipeline_step(a));
        else ok(fh_pipeline_train(a, steps));
        for (uint32_t s = 0; s < steps; ++s, ++step) {
            const replay_ref::Batch b = replay_ref::batch(c.seed, step, 0, c.batch_size, h, 7);
            const fh_batch bv = b.view(c.batch_size);
            ok(fh_pipeline_upload(u, &bv));
            ok(fh_pipeline_step(u));
        }
        assert_same(a, u);
    }
    fh_timings ta = {sizeof ta}, tu = {sizeof tu};
    ok(fh_pipeline_timings(a, &ta));
    ok(fh_pipeline_timings(u, &tu));
    assert_true(ta.sample_ms > 0);
    assert_true(ta.total_ms >= ta.sample_ms + ta.her_ms);
    assert_true(tu.sample_ms == 0);
    fh_pipeline_destroy(a);
    fh_pipeline_destroy(u);
}

// Without a replay, train(k) is k steps on the current batch.
static void test_train_without_replay(void **state) {
    (void)state;
    const fh_config c = fh_test_small_config();
    fh_pipeline *a = make(c), *b = make(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 3);
    ok(fh_pipeline_upload(a, &tb.batch));
    ok(fh_pipeline_upload(b, &tb.batch));
    ok(fh_pipeline_train(a, 4));
    for (int k = 0; k < 4; ++k) ok(fh_pipeline_step(b));
    assert_same(a, b);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(a);
    fh_pipeline_destroy(b);
}

// The memory report counts the ring (every field of K·E transitions) and its episode table.
static void test_memory_report(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(6, 3);
    fh_pipeline *p = make(c);
    fh_memory_report r = {sizeof r};
    ok(fh_pipeline_memory(p, &r));
    const uint64_t per = 2 * 8 * 4 + 2 * 2 * 4 + 3 * 4 + 4 + 1 + 4 + 1;  // obs, goals, ... flags
    assert_int_equal(r.replay, 6 * 3 * per + 6 * 3 * 4 + 3 * 8);
    assert_int_equal(r.total, r.parameters + r.activations + r.workspaces + r.batch_staging +
                                  r.replay);
    fh_pipeline_destroy(p);
}

namespace {

void write_file(const char *path, const std::vector<uint8_t> &b) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data(), 1, b.size(), f), b.size());
    fclose(f);
}

}  // namespace

// A checkpoint with the replay resumes bit for bit: saved after some inserts and steps, loaded
// into a fresh pipeline, both continue with the same inserts and steps and agree in every
// tensor, metric and byte of their next checkpoint. Without FH_SAVE_REPLAY the file is the 0.1
// format and leaves a loading pipeline's replay as it was; files of another replay shape, cut
// short, or holding rows an insert would refuse are refused and change nothing.
static void test_checkpoint_with_replay(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(7, 3);
    const char *path = fh_test_tmp_path("replay.ckpt");
    const char *plain_path = fh_test_tmp_path("replay_plain.ckpt");
    fh_pipeline *a = make(c);
    ok(insert(a, replay_ref::random_rows(c, 9, 1, 0.2)));  // wraps: rows 2..8 stay
    ok(fh_pipeline_train(a, 2));
    ok(insert(a, replay_ref::random_rows(c, 2, 2, 0.0)));  // episodes left open
    ok(fh_pipeline_save_ex(a, path, FH_SAVE_REPLAY));
    ok(fh_pipeline_save(a, plain_path));
    const std::vector<uint8_t> with = file_bytes(path), plain = file_bytes(plain_path);
    uint32_t format;
    memcpy(&format, plain.data() + 8, 4);
    assert_int_equal(format, 1);  // what 0.1 writes and reads
    memcpy(&format, with.data() + 8, 4);
    assert_int_equal(format, 2);
    ok(fh_pipeline_save_ex(a, plain_path, 0));
    assert_true(file_bytes(plain_path) == plain);

    fh_pipeline *b = make(c);
    ok(fh_pipeline_load(b, path));
    for (fh_pipeline *p : {a, b}) {
        ok(insert(p, replay_ref::random_rows(c, 3, 3, 0.3)));
        ok(fh_pipeline_train(p, 3));
    }
    assert_same(a, b);
    assert_true(digest(a) == digest(b));

    // Without the replay: the loading pipeline's (empty) replay stays empty.
    fh_pipeline *e = make(c);
    ok(fh_pipeline_load(e, plain_path));
    expect(fh_pipeline_step(e), FH_ERR_NO_BATCH, "empty replay");

    // Refused files change nothing.
    const std::vector<uint8_t> before = digest(e);
    fh_config other = replay_ref::config(8, 3);
    fh_pipeline *o = make(other);
    expect(fh_pipeline_load(o, path), FH_ERR_CHECKPOINT_CONFIG, "7 rows x 3 environments");
    fh_pipeline_destroy(o);
    fh_config none = c;
    none.replay_capacity = none.replay_envs = 0;
    o = make(none);
    expect(fh_pipeline_load(o, path), FH_ERR_CHECKPOINT_CONFIG, "no replay");
    ok(fh_pipeline_load(o, plain_path));  // the state without the replay loads anywhere
    fh_pipeline_destroy(o);
    const char *bad = fh_test_tmp_path("replay_bad.ckpt");
    std::vector<uint8_t> cut(with.begin(), with.end() - 100);
    write_file(bad, cut);
    expect(fh_pipeline_load(e, bad), FH_ERR_CHECKPOINT_TRUNCATED, "ends at byte");
    // A NaN in the first replayed obs (the replay section starts after the buffers; its obs
    // field first), with a checksum that matches.
    std::vector<uint8_t> forged = with;
    const size_t replay_at = plain.size() - 8, obs_at = replay_at + 16;
    const float nan = NAN;
    memcpy(forged.data() + obs_at + 4 * 5, &nan, 4);
    fh_test_reseal(forged.data(), forged.size());
    write_file(bad, forged);
    expect(fh_pipeline_load(e, bad), FH_ERR_CHECKPOINT_CORRUPT,
           "replay rows.obs[0, 0, 5] = nan is not finite");
    // done = 1 where episode_end = 0: the done field follows obs, goal, action, reward.
    forged = with;
    const size_t N = 7, E = 3, O = 8, G = 2, NB = 3;
    const size_t done_at = obs_at + N * E * (O * 4 + G * 4 + NB * 4 + 4);
    const size_t end_at = done_at + N * E * (1 + O * 4 + G * 4 + 4);
    forged[done_at + 4] = 1;
    forged[end_at + 4] = 0;
    fh_test_reseal(forged.data(), forged.size());
    write_file(bad, forged);
    expect(fh_pipeline_load(e, bad), FH_ERR_CHECKPOINT_CORRUPT,
           "rows.done[1, 1] = 1 but rows.episode_end[1, 1] = 0");
    assert_true(digest(e) == before);
    fh_pipeline_destroy(a);
    fh_pipeline_destroy(b);
    fh_pipeline_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_and_struct_sizes),
        cmocka_unit_test(test_calls_that_do_not_apply),
        cmocka_unit_test(test_refused_inserts_change_nothing),
        cmocka_unit_test(test_sampled_step_equals_uploaded_step),
        cmocka_unit_test(test_train_without_replay),
        cmocka_unit_test(test_memory_report),
        cmocka_unit_test(test_checkpoint_with_replay),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
