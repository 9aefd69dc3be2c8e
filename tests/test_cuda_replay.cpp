// The CUDA side of the replay (cuda/replay.cu) against the CPU backend's (src/replay.cpp) and
// the independent reference (replay_ref.hpp), through its host functions directly (the
// executor's use of them is test_cuda_replay_api.cpp's): the same indices and batches, bit for
// bit, after inserts from device memory and from pinned host memory; device rows and batches
// with a fault refused with the host check's status and message, changing nothing; device
// batches copied exactly as a host upload packs them. Skips (77) without a GPU; built only
// with CUDA.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "replay_ref.hpp"
#include "testutil.h"

#ifdef FOXHUNT_HAVE_CUDA
#include "batch.hpp"
#include "error.hpp"
#include "replay.hpp"
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

using namespace fh;
using namespace cuda_test;
namespace rd = fh::cuda::replay;

namespace {

// A device batch block of B transitions and its host copy.
struct DevBlock {
    Dev obs, next_obs, reward, goal, nag, her_goal, action, regime, done;
    rd::BatchBlock b;
    explicit DevBlock(const Dims &d)
        : obs((size_t)d.B * d.O * 4), next_obs((size_t)d.B * d.O * 4), reward((size_t)d.B * 4),
          goal((size_t)d.B * d.G * 4), nag((size_t)d.B * d.G * 4), her_goal((size_t)d.B * d.G * 4),
          action((size_t)d.B * d.NB * 4), regime((size_t)d.B * 4), done(d.B) {
        b = {(float *)obs.p, (float *)next_obs.p, (float *)reward.p, (float *)goal.p,
             (float *)nag.p, (float *)her_goal.p, (int32_t *)action.p, (int32_t *)regime.p,
             (uint8_t *)done.p};
    }
    HostBatch host() const {
        HostBatch h;
        h.obs = obs.get<float>();
        h.next_obs = next_obs.get<float>();
        h.reward = reward.get<float>();
        h.goal = goal.get<float>();
        h.next_achieved_goal = nag.get<float>();
        h.her_goal = her_goal.get<float>();
        h.action = action.get<int32_t>();
        h.regime = regime.get<int32_t>();
        h.done = done.get<uint8_t>();
        return h;
    }
};

// The message the host check of `checks` (host pointers) gives, or "" when it passes.
std::string host_refusal(const std::vector<ElementCheck> &checks, fh_status *status) {
    try {
        check_elements(checks);
    } catch (const Error &e) {
        *status = e.status;
        return e.message;
    }
    return "";
}

std::string device_refusal(const std::vector<ElementCheck> &dev_checks, rd::CheckStatus *st,
                           fh_status *status) {
    rd::enqueue_checks(dev_checks, st, 0);
    rd::CheckStatus h{};
    cuda_ok(cudaMemcpy(&h, st, sizeof h, cudaMemcpyDeviceToHost), "status");
    try {
        rd::throw_check_status(h, dev_checks);
    } catch (const Error &e) {
        *status = e.status;
        return e.message;
    }
    return "";
}

struct Replays {
    fh_config c;
    Dims d;
    HostReplay host;
    Dev ring_mem, step, status;
    rd::DeviceRing ring;
    replay_ref::Rows h;
    explicit Replays(const fh_config &cfg)
        : c(cfg), d(make_dims(cfg)), host(d), ring_mem(rd::ring_bytes(d)), step(8),
          status(sizeof(rd::CheckStatus)), h(cfg) {
        ring = rd::ring_at(d, ring_mem.p);
        rd::ring_reset(ring, 0);
    }
    // Inserts on both sides, from device rows or from pinned host rows (then without regime
    // when `no_regime`: zeros on both sides).
    void insert(const replay_ref::Rows &rows, bool pinned, bool no_regime = false) {
        replay_ref::Rows r = rows;
        if (no_regime) std::fill(r.regime.begin(), r.regime.end(), 0);
        fh_replay_rows hv = rows.view();
        if (no_regime) hv.regime = nullptr;
        host.insert(hv);
        if (pinned) {
            fh_replay_rows v = hv;
            std::vector<void *> keep;
            auto pin = [&](const void *src, size_t bytes) -> void * {
                void *p = nullptr;
                cuda_ok(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault), "pin");
                memcpy(p, src, bytes);
                keep.push_back(p);
                return p;
            };
            const size_t t = (size_t)r.R * r.E;
            v.obs = (const float *)pin(r.obs.data(), t * r.O * 4);
            v.next_obs = (const float *)pin(r.next_obs.data(), t * r.O * 4);
            v.goal = (const float *)pin(r.goal.data(), t * r.G * 4);
            v.next_achieved_goal = (const float *)pin(r.nag.data(), t * r.G * 4);
            v.action = (const int32_t *)pin(r.action.data(), t * r.NB * 4);
            v.reward = (const float *)pin(r.reward.data(), t * 4);
            v.done = (const uint8_t *)pin(r.done.data(), t);
            if (!no_regime) v.regime = (const int32_t *)pin(r.regime.data(), t * 4);
            v.episode_end = (const uint8_t *)pin(r.episode_end.data(), t);
            rd::enqueue_append_host(ring, v, h.R, 0);
            cuda_ok(cudaStreamSynchronize(0), "append");
            for (void *p : keep) cudaFreeHost(p);
        } else {
            DevRows dr(rows);
            if (no_regime) dr.view.regime = nullptr;
            rd::enqueue_checks(rows_checks(d, dr.view), (rd::CheckStatus *)status.p, 0);
            rd::enqueue_append_device(ring, dr.view, h.R, (const rd::CheckStatus *)status.p, 0);
            cuda_ok(cudaStreamSynchronize(0), "append");
        }
        h.append(r);
    }
    void expect_same_sample(uint64_t s, uint32_t row0) {
        to_device(step.p, &s, 8, "step");
        DevBlock blk(d);
        Dev draws((size_t)d.B * sizeof(ReplayDraw));
        rd::enqueue_sample(ring, c.seed, (const uint64_t *)step.p, row0, d.B, blk.b,
                           (ReplayDraw *)draws.p, 0);
        cuda_ok(cudaStreamSynchronize(0), "sample");
        HostBatch want;
        std::vector<ReplayDraw> want_draws(d.B);
        host.sample(c.seed, s, row0, host_batch_dst(d, want), want_draws.data());
        const std::vector<ReplayDraw> got = draws.get<ReplayDraw>();
        for (uint32_t i = 0; i < d.B; ++i) {
            const replay_ref::Draw r = replay_ref::draw(c.seed, row0 + i, s, h, d.K);
            if (got[i].row != want_draws[i].row || got[i].env != want_draws[i].env ||
                got[i].her_offset != want_draws[i].her_offset || got[i].row != r.row ||
                got[i].her_offset != r.o)
                fail_msg("draw %u of step %llu differs", i, (unsigned long long)s);
        }
        same_batch(blk.host(), want);
    }
};

}  // namespace

static void test_cuda_sample_equals_cpu(void **state) {
    (void)state;
    if (!fh_test_have_cuda()) skip();
    const uint32_t shapes[][3] = {{7, 3, 64}, {1, 1, 16}, {300, 16, 4096}};
    int which = 0;
    for (const auto &sh : shapes) {
        Replays r(replay_ref::config(sh[0], sh[1], sh[2]));
        uint64_t seed = 17 + which++;
        for (int k = 0; k < 8; ++k) {
            const uint32_t R = 1 + (uint32_t)(replay_ref::splitmix(seed) % (sh[0] + 3));
            r.insert(replay_ref::random_rows(r.c, R, seed, k % 2 ? 0.3 : 0.02), k % 3 == 2,
                     k == 4 || k == 5);
            r.expect_same_sample((uint64_t)k, 0);
            r.expect_same_sample((uint64_t)k + 100, sh[2] * 3);  // a rank offset (SPEC §9)
        }
    }
}

static void test_cuda_refused_device_rows(void **state) {
    (void)state;
    if (!fh_test_have_cuda()) skip();
    Replays r(replay_ref::config(6, 3, 32));
    r.insert(replay_ref::random_rows(r.c, 5, 1, 0.3), false);
    const uint64_t n_before = r.h.R;
    for (int fault = 0; fault < kFaults; ++fault) {
        const replay_ref::Rows bad = faulty_rows(r.c, fault);
        fh_status hs = FH_OK, ds = FH_OK;
        const std::string want = host_refusal(rows_checks(r.d, bad.view()), &hs);
        DevRows dr(bad);
        const std::vector<ElementCheck> checks = rows_checks(r.d, dr.view);
        const std::string got = device_refusal(checks, (rd::CheckStatus *)r.status.p, &ds);
        print_message("fault %d: %s\n", fault, got.c_str());
        assert_false(want.empty());
        assert_int_equal(ds, hs);
        assert_string_equal(got.c_str(), want.c_str());
        // The append behind the failed check changes nothing.
        rd::enqueue_append_device(r.ring, dr.view, n_before, (const rd::CheckStatus *)r.status.p,
                                  0);
        cuda_ok(cudaStreamSynchronize(0), "append");
        uint64_t n = 0;
        cuda_ok(cudaMemcpy(&n, r.ring.n_ins, 8, cudaMemcpyDeviceToHost), "n_ins");
        assert_int_equal(n, n_before);
        r.expect_same_sample(3, 0);
    }
}

static void test_cuda_device_batch(void **state) {
    (void)state;
    if (!fh_test_have_cuda()) skip();
    const fh_config c = fh_test_small_config();
    const Dims d = make_dims(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 5);
    const size_t B = d.B;
    auto up = [](const void *p, size_t bytes) { return Dev(p, bytes); };
    Dev obs = up(tb.obs, B * d.O * 4), next_obs = up(tb.next_obs, B * d.O * 4),
        goal = up(tb.goal, B * d.G * 4), nag = up(tb.next_achieved_goal, B * d.G * 4),
        her = up(tb.her_goal, B * d.G * 4), action = up(tb.action, B * d.NB * 4),
        reward = up(tb.reward, B * 4), done = up(tb.done, B), regime = up(tb.regime, B * 4);
    fh_batch db = tb.batch;
    db.memory = FH_MEMORY_DEVICE;
    db.obs = (const float *)obs.p; db.next_obs = (const float *)next_obs.p;
    db.goal = (const float *)goal.p; db.next_achieved_goal = (const float *)nag.p;
    db.her_goal = (const float *)her.p; db.action = (const int32_t *)action.p;
    db.reward = (const float *)reward.p; db.done = (const uint8_t *)done.p;
    db.regime = (const int32_t *)regime.p;
    Dev status(sizeof(rd::CheckStatus));
    for (int with_regime = 1; with_regime >= 0; --with_regime) {
        fh_batch hb = tb.batch, dbv = db;
        if (!with_regime) hb.regime = dbv.regime = nullptr;
        DevBlock blk(d);
        rd::enqueue_checks(batch_checks(d, dbv), (rd::CheckStatus *)status.p, 0);
        rd::enqueue_batch_copy(d, dbv, (const rd::CheckStatus *)status.p, blk.b, 0);
        cuda_ok(cudaStreamSynchronize(0), "batch");
        HostBatch want = copy_batch(d, &hb);
        same_batch(blk.host(), want);
    }
    // A fault: the host upload's status and message, and the block keeps what it held.
    const float nan = NAN;
    to_device((float *)obs.p + 3 * d.O + 1, &nan, 4, "nan");
    tb.obs[3 * d.O + 1] = nan;
    fh_status hs = FH_OK, ds = FH_OK;
    const std::string want = host_refusal(batch_checks(d, tb.batch), &hs);
    const std::string got = device_refusal(batch_checks(d, db), (rd::CheckStatus *)status.p, &ds);
    assert_int_equal(ds, hs);
    assert_string_equal(got.c_str(), want.c_str());
    assert_string_equal(got.c_str(), "batch.obs[3, 1] = nan is not finite");
    DevBlock blk(d);
    cuda_ok(cudaMemset(blk.obs.p, 0x7f, blk.obs.n), "fill");
    rd::enqueue_batch_copy(d, db, (const rd::CheckStatus *)status.p, blk.b, 0);
    cuda_ok(cudaStreamSynchronize(0), "batch");
    for (float x : blk.obs.get<float>()) {
        uint32_t bits;
        memcpy(&bits, &x, 4);
        assert_int_equal(bits, 0x7f7f7f7fu);
    }
    fh_test_batch_free(&tb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_sample_equals_cpu),
        cmocka_unit_test(test_cuda_refused_device_rows),
        cmocka_unit_test(test_cuda_device_batch),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

#else  // a build without CUDA: nothing to test here

int main(void) {
    printf("built without CUDA: skipped\n");
    return FH_TEST_SKIPPED;
}

#endif
