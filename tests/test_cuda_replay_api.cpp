// The replay (SPEC §2.1, §5.0) through the CUDA executor, via the C API:
// - inserts (host rows, device rows, rows without regime, more rows than the ring) and train(k):
//   after each, the batch the sample child wrote is bitwise the independent reference's
//   (replay_ref.hpp: the history kept whole, draws from Random123 in 128-bit arithmetic), and
//   every tensor and metric is bitwise those of a CUDA pipeline without a replay that uploads
//   the reference's batches one step at a time; the CPU backend's replay agrees within strict
//   FP32 bounds;
// - calls queued without waiting give bitwise the result of calls that wait after each one
//   (the copy stream keeps the order of the calls), and an insert does not wait for the steps
//   in flight;
// - inserts larger than a staging slot and larger than the ring (chunked) sample alike;
// - checkpoints with the replay: CUDA -> CUDA continues bit for bit, and a checkpoint loaded
//   into either backend saves back to the same bytes (CUDA -> CPU, CPU -> CUDA), after which
//   the CUDA pipeline samples the reference's batches;
// - the memory report counts the ring and the insert staging, and no host upload slots.
// Skips (77) without a GPU; built only with CUDA.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "replay_ref.hpp"
#include "testutil.h"

#ifdef FOXHUNT_HAVE_CUDA
#include "batch.hpp"
#include "config.hpp"
#include "../cuda/replay_device.hpp"
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#ifdef FOXHUNT_HAVE_CUDA
#include "cuda_replay_util.hpp"
#include "replay_api_util.hpp"
#include "test_cuda_util.h"

extern "C" void fh_cuda_debug_batch_block(void *fields[9]) __attribute__((weak));

using namespace cuda_test;
using replay_api::digest;
using replay_api::file_bytes;
using replay_api::make;
using replay_api::ok;

namespace {

fh_config gpu(const fh_config &c) { return fhtest::cuda_config(c, FH_MATH_STRICT); }

fh_status insert(fh_pipeline *p, const replay_ref::Rows &rows) {
    const fh_replay_rows v = rows.view();
    return fh_pipeline_insert(p, &v);
}

// The batch block of the most recently created CUDA pipeline, `p`, once its work is done.
fh::HostBatch block_of(fh_pipeline *p, const fh_config &c) {
    assert_non_null(fh_cuda_debug_batch_block);
    ok(fh_pipeline_sync(p));
    void *f[9];
    fh_cuda_debug_batch_block(f);
    const size_t B = c.batch_size, O = c.obs_dim, G = c.goal_dim, NB = c.num_branches;
    auto get = [](const void *src, auto &v, size_t n) {
        v.resize(n);
        if (n) cuda_ok(cudaMemcpy(v.data(), src, n * sizeof(v[0]), cudaMemcpyDeviceToHost), "block");
    };
    fh::HostBatch h;
    get(f[0], h.obs, B * O);
    get(f[1], h.next_obs, B * O);
    get(f[2], h.reward, B);
    get(f[3], h.goal, B * G);
    get(f[4], h.next_achieved_goal, B * G);
    get(f[5], h.her_goal, B * G);
    get(f[6], h.action, B * NB);
    get(f[7], h.regime, B);
    get(f[8], h.done, B);
    return h;
}

fh::HostBatch host_of(const replay_ref::Batch &b) {
    fh::HostBatch h;
    h.obs = b.obs;
    h.next_obs = b.next_obs;
    h.reward = b.reward;
    h.goal = b.goal;
    h.next_achieved_goal = b.nag;
    h.her_goal = b.her_goal;
    h.action = b.action;
    h.regime = b.regime;
    h.done = b.done;
    return h;
}

// `p` (the most recently created CUDA pipeline) sampled step `step` of history `h`.
void expect_reference_batch(fh_pipeline *p, const fh_config &c, uint64_t step,
                            const replay_ref::Rows &h) {
    same_batch(block_of(p, c),
               host_of(replay_ref::batch(c.seed, step, 0, c.batch_size, h, c.replay_capacity)));
}

}  // namespace

static void test_train_samples_the_reference(void **) {
    if (!fh_test_have_cuda()) skip();
    const uint32_t K = 7, E = 3;
    const fh_config cc = replay_ref::config(K, E);  // CPU, B = 32
    fh_config plain = gpu(cc);
    plain.replay_capacity = plain.replay_envs = 0;
    // g last: the debug hook reads the block of the most recently created CUDA pipeline.
    fh_pipeline *cpu = make(cc), *u = make(plain), *g = make(gpu(cc));
    replay_ref::Rows h(cc);
    uint64_t step = 0;
    const uint32_t inserts[] = {2, 1, 5, 9, 3, 4};  // 9 > K: only the newest 7 stay
    for (uint32_t k = 0; k < 6; ++k) {
        replay_ref::Rows r = replay_ref::random_rows(cc, inserts[k], 40 + k, 0.25);
        const bool device = k % 3 == 1, no_regime = k == 2;
        if (no_regime) std::fill(r.regime.begin(), r.regime.end(), 0);
        fh_replay_rows hv = r.view();
        if (no_regime) hv.regime = nullptr;
        ok(fh_pipeline_insert(cpu, &hv));
        if (device) {
            DevRows dr(r);
            if (no_regime) dr.view.regime = nullptr;
            ok(fh_pipeline_insert(g, &dr.view));
            ok(fh_pipeline_sync(g));  // the device arrays may go once the next call returned
        } else {
            ok(fh_pipeline_insert(g, &hv));
        }
        h.append(r);
        const uint32_t steps = 1 + k % 3;
        ok(fh_pipeline_train(cpu, steps));
        if (steps == 1) ok(fh_pipeline_step(g));
        else ok(fh_pipeline_train(g, steps));
        for (uint32_t s = 0; s < steps; ++s, ++step) {
            const replay_ref::Batch b = replay_ref::batch(cc.seed, step, 0, cc.batch_size, h, K);
            const fh_batch bv = b.view(cc.batch_size);
            ok(fh_pipeline_upload(u, &bv));
            ok(fh_pipeline_step(u));
        }
        expect_reference_batch(g, cc, step - 1, h);
        fhtest::expect_bitwise(g, u, "sampled vs uploaded");
    }
    const fhtest::Diff d = fhtest::compare(g, cpu);
    fhtest::print_diff("CUDA replay vs CPU replay, 12 steps", d);
    if (!(d.max_rel <= 1e-4)) fail_msg("CUDA vs CPU replay: %s %.3e", d.worst.c_str(), d.max_rel);
    fh_timings t = {sizeof t}, tu = {sizeof tu};
    ok(fh_pipeline_timings(g, &t));
    ok(fh_pipeline_timings(u, &tu));
    printf("[TIMINGS] sample %.4f ms, her %.4f ms, total %.4f ms (B = 32)\n", t.sample_ms,
           t.her_ms, t.total_ms);
    assert_true(t.sample_ms > 0);
    assert_true(t.total_ms >= t.sample_ms + t.her_ms);
    assert_true(tu.sample_ms == 0);
    fh_pipeline_destroy(cpu);
    fh_pipeline_destroy(u);
    fh_pipeline_destroy(g);
}

// At B = 16384 (steps of milliseconds), the same calls queued without waits and with a sync
// after every call give bitwise the same state; the first insert (300 rows of 64 environments,
// 20 MB) goes through the staging in two chunks.
static void test_queued_calls_keep_their_order(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config base = fhtest::default_config(16384);
    base.replay_capacity = 512;
    base.replay_envs = 64;
    const fh_config c = fhtest::cuda_config(base, FH_MATH_TF32);
    std::vector<replay_ref::Rows> rows;
    for (int k = 0; k < 10; ++k)
        rows.push_back(replay_ref::random_rows(c, k == 0 ? 300 : 8, 100 + k, 0.05));
    auto run = [&](fh_pipeline *p, bool wait) {
        for (int k = 0; k < 10; ++k) {
            ok(insert(p, rows[k]));
            if (wait) ok(fh_pipeline_sync(p));
            ok(fh_pipeline_train(p, 1 + k % 2));
            if (wait) ok(fh_pipeline_sync(p));
        }
    };
    fh_pipeline *w = make(c), *q = make(c);
    run(w, true);
    run(q, false);
    fhtest::expect_bitwise(q, w, "queued vs waiting after every call");

    // Two inserts right after train(4): neither waits for the steps in flight.
    ok(fh_pipeline_train(q, 4));
    const uint64_t waits0 = fh_cuda_debug_back_pressure_waits();
    ok(insert(q, rows[1]));
    ok(insert(q, rows[2]));
    const int pending = fh_cuda_debug_step_pending();
    const uint64_t waits = fh_cuda_debug_back_pressure_waits() - waits0;
    printf("[NOSYNC] two inserts after train(4): host waits %llu, steps still running: %d\n",
           (unsigned long long)waits, pending);
    assert_int_equal(waits, 0);
    assert_int_equal(pending, 1);
    fh_pipeline_destroy(w);
    fh_pipeline_destroy(q);
}

// A staging slot holds 16 MiB / (16 environments x 102 bytes) = 10280 rows of this config:
// 11000 rows go in two chunks, 30000 rows (> K = 12000) keep their newest 12000 in two chunks.
static void test_large_inserts(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config cc = replay_ref::config(12000, 16, 256);
    fh_pipeline *g = make(gpu(cc));
    replay_ref::Rows h(cc);
    const uint32_t R[] = {11000, 30000, 5};
    for (uint32_t k = 0; k < 3; ++k) {
        const replay_ref::Rows r = replay_ref::random_rows(cc, R[k], 300 + k, 0.02);
        ok(insert(g, r));
        h.append(r);
        ok(fh_pipeline_step(g));
        expect_reference_batch(g, cc, k, h);
    }
    fh_pipeline_destroy(g);
}

static void test_checkpoints_with_replay(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config cc = replay_ref::config(7, 3);
    const char *pg = fh_test_tmp_path("cuda_replay_g.ckpt");
    const char *again = fh_test_tmp_path("cuda_replay_again.ckpt");
    fh_pipeline *g = make(gpu(cc));
    ok(insert(g, replay_ref::random_rows(cc, 9, 1, 0.2)));  // wraps: rows 2..8 stay
    ok(fh_pipeline_train(g, 2));
    ok(insert(g, replay_ref::random_rows(cc, 2, 2, 0.0)));  // episodes left open
    ok(fh_pipeline_save_ex(g, pg, FH_SAVE_REPLAY));
    const std::vector<uint8_t> saved = file_bytes(pg);

    // Loaded on the CPU and on the GPU, each saves back the same bytes.
    fh_pipeline *c = make(cc), *g2 = make(gpu(cc));
    ok(fh_pipeline_load(c, pg));
    ok(fh_pipeline_save_ex(c, again, FH_SAVE_REPLAY));
    assert_true(file_bytes(again) == saved);
    ok(fh_pipeline_load(g2, pg));
    ok(fh_pipeline_save_ex(g2, again, FH_SAVE_REPLAY));
    assert_true(file_bytes(again) == saved);
    for (fh_pipeline *p : {g, g2}) {
        ok(insert(p, replay_ref::random_rows(cc, 3, 3, 0.3)));
        ok(fh_pipeline_train(p, 3));
    }
    fhtest::expect_bitwise(g2, g, "CUDA checkpoint continued on CUDA");
    assert_true(digest(g) == digest(g2));

    // CPU -> CUDA: the same bytes back, then the reference's batches.
    replay_ref::Rows h(cc);
    fh_pipeline *cpu = make(cc);
    for (uint32_t k = 0; k < 3; ++k) {
        const replay_ref::Rows r = replay_ref::random_rows(cc, 4 + k, 20 + k, 0.3);
        ok(insert(cpu, r));
        h.append(r);
    }
    ok(fh_pipeline_train(cpu, 2));
    const char *pc = fh_test_tmp_path("cuda_replay_c.ckpt");
    ok(fh_pipeline_save_ex(cpu, pc, FH_SAVE_REPLAY));
    fh_pipeline *gl = make(gpu(cc));  // the most recently created CUDA pipeline
    ok(fh_pipeline_load(gl, pc));
    ok(fh_pipeline_save_ex(gl, again, FH_SAVE_REPLAY));
    assert_true(file_bytes(again) == file_bytes(pc));
    ok(fh_pipeline_step(gl));
    expect_reference_batch(gl, cc, 2, h);
    ok(fh_pipeline_step(cpu));
    const fhtest::Diff d = fhtest::compare(gl, cpu);
    fhtest::print_diff("CPU ckpt with replay at 2 -> GPU, 1 more step", d);
    if (!(d.max_rel <= 1e-5)) fail_msg("CPU->GPU with replay: %s %.3e", d.worst.c_str(), d.max_rel);
    for (fh_pipeline *p : {g, g2, c, cpu, gl}) fh_pipeline_destroy(p);
}

static void test_memory_report(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config cc = replay_ref::config(7, 3);
    fh_config plain = gpu(cc);
    plain.replay_capacity = plain.replay_envs = 0;
    fh_pipeline *g = make(gpu(cc)), *u = make(plain);
    fh_memory_report r = {sizeof r}, ru = {sizeof ru};
    ok(fh_pipeline_memory(g, &r));
    ok(fh_pipeline_memory(u, &ru));
    // Two staging slots of K = 7 rows (16 MiB hold more), each field of 7 x 3 transitions
    // rounded up to 256 bytes: obs, goal, action, reward, done, next_obs, next_achieved_goal,
    // regime, episode_end of 32, 8, 12, 4, 1, 32, 8, 4, 1 bytes.
    const uint64_t field[] = {32, 8, 12, 4, 1, 32, 8, 4, 1};
    uint64_t slot = 0;
    for (uint64_t f : field) slot += (7 * 3 * f + 255) / 256 * 256;
    const uint64_t ring = fh::cuda::replay::ring_bytes(fh::make_dims(gpu(cc)));
    printf("[MEMORY] replay %llu bytes = ring %llu + 2 x staging %llu\n",
           (unsigned long long)r.replay, (unsigned long long)ring, (unsigned long long)slot);
    assert_int_equal(r.replay, ring + 2 * slot);
    assert_int_equal(ru.replay, 0);
    assert_int_equal(r.total, r.parameters + r.activations + r.workspaces + r.batch_staging +
                                  r.replay);
    // Batch staging: the device block and the 16-byte device check record with its pinned
    // copy; without a replay also two pinned upload slots of the block's size.
    assert_int_equal(ru.batch_staging - r.batch_staging, 2 * (r.batch_staging - 32));
    fh_pipeline_destroy(g);
    fh_pipeline_destroy(u);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_samples_the_reference),
        cmocka_unit_test(test_queued_calls_keep_their_order),
        cmocka_unit_test(test_large_inserts),
        cmocka_unit_test(test_checkpoints_with_replay),
        cmocka_unit_test(test_memory_report),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

#else  // a build without CUDA: nothing to test here
int main(void) { return FH_TEST_SKIPPED; }

#endif
