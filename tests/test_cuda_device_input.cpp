// Device memory through the C API (include/foxhunt.h, "Device memory") on the CUDA backend:
// - a refused device insert returns FH_OK, and the next call returns the status and message
//   the same rows give as host input, does nothing else, and leaves the pipeline as a twin
//   that never saw the rows (same checkpoint bytes, same steps afterwards); a valid device
//   insert equals the same host insert bit for bit;
// - a refused device batch leaves the previous batch current (or none: steps stay refused);
//   a device batch gives bitwise the step of the same batch uploaded from the host, with and
//   without regime;
// - host memory passed as device memory is refused at once (FH_ERR_BAD_VALUE).
// Skips (77) without a GPU; built only with CUDA.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "replay_ref.hpp"
#include "testutil.h"

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

using namespace cuda_test;
using namespace replay_api;

namespace {

fh_config gpu(const fh_config &c) { return fhtest::cuda_config(c, FH_MATH_STRICT); }

// A device copy of a test batch and its fh_batch view (memory = FH_MEMORY_DEVICE).
struct DevBatch {
    Dev obs, next_obs, goal, nag, her, action, reward, done, regime;
    fh_batch view;
    DevBatch(const fh_test_batch &t, const fh_config &c)
        : obs(t.obs, (size_t)c.batch_size * c.obs_dim * 4),
          next_obs(t.next_obs, (size_t)c.batch_size * c.obs_dim * 4),
          goal(t.goal, (size_t)c.batch_size * c.goal_dim * 4),
          nag(t.next_achieved_goal, (size_t)c.batch_size * c.goal_dim * 4),
          her(t.her_goal, (size_t)c.batch_size * c.goal_dim * 4),
          action(t.action, (size_t)c.batch_size * c.num_branches * 4),
          reward(t.reward, (size_t)c.batch_size * 4), done(t.done, c.batch_size),
          regime(t.regime, (size_t)c.batch_size * 4) {
        view = t.batch;
        view.memory = FH_MEMORY_DEVICE;
        view.obs = (const float *)obs.p;
        view.next_obs = (const float *)next_obs.p;
        view.goal = (const float *)goal.p;
        view.next_achieved_goal = (const float *)nag.p;
        view.her_goal = (const float *)her.p;
        view.action = (const int32_t *)action.p;
        view.reward = (const float *)reward.p;
        view.done = (const uint8_t *)done.p;
        view.regime = (const int32_t *)regime.p;
    }
};

template <class T>
void poke(const Dev &d, size_t i, T v) {
    to_device((T *)d.p + i, &v, sizeof v, "poke");
}

// What the host insert of `rows` into `p` returns (it refuses them and changes nothing).
fh_status host_refusal(fh_pipeline *p, const replay_ref::Rows &rows, std::string *message) {
    const fh_replay_rows v = rows.view();
    const fh_status s = fh_pipeline_insert(p, &v);
    *message = fh_last_error_message();
    return s;
}

}  // namespace

static void test_refused_device_inserts(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = gpu(replay_ref::config(6, 3));  // O = 8, G = 2, NB = 3, A = 4, R = 3
    fh_pipeline *p = make(c), *twin = make(c);
    const replay_ref::Rows first = replay_ref::random_rows(c, 5, 1, 0.3);
    for (fh_pipeline *q : {p, twin}) {
        const fh_replay_rows v = first.view();
        ok(fh_pipeline_insert(q, &v));
    }
    const std::vector<uint8_t> before = digest(p);
    for (int fault = 0; fault < kFaults; ++fault) {
        const replay_ref::Rows bad = faulty_rows(c, fault);
        std::string want;
        const fh_status hs = host_refusal(twin, bad, &want);
        assert_int_not_equal(hs, FH_OK);
        DevRows dr(bad);
        ok(fh_pipeline_insert(p, &dr.view));
        // The next call returns the refusal and does nothing else: train runs no step.
        const fh_status ds = fault % 2 ? fh_pipeline_train(p, 1) : fh_pipeline_sync(p);
        print_message("fault %d: %s\n", fault, fh_last_error_message());
        assert_int_equal(ds, hs);
        assert_string_equal(fh_last_error_message(), want.c_str());
        assert_true(digest(p) == before);
    }
    // Host memory passed as device memory: refused at once, naming the array.
    fh_replay_rows v = first.view();
    v.memory = FH_MEMORY_DEVICE;
    expect(fh_pipeline_insert(p, &v), FH_ERR_BAD_VALUE, "rows.obs");
    assert_true(digest(p) == before);

    // A valid device insert is the host insert, bit for bit.
    const replay_ref::Rows more = replay_ref::random_rows(c, 4, 30, 0.3);
    DevRows dr(more);
    ok(fh_pipeline_insert(p, &dr.view));
    const fh_replay_rows mv = more.view();
    ok(fh_pipeline_insert(twin, &mv));
    ok(fh_pipeline_train(p, 3));
    ok(fh_pipeline_train(twin, 3));
    fhtest::expect_bitwise(p, twin, "device insert vs host insert");
    assert_true(digest(p) == digest(twin));
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(twin);
}

static void test_device_batches(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = gpu(fh_test_small_config());  // O = 8, NB = 3, A = 4
    fhtest::Batches bt(c, 900, 2);
    fh_pipeline *d = make(c), *h = make(c);

    // A refused first batch: the step returns the refusal, the next has no batch.
    DevBatch bad(bt.b[0], c);
    poke(bad.obs, 3 * 8 + 1, NAN);
    ok(fh_pipeline_upload(d, &bad.view));
    expect(fh_pipeline_step(d), FH_ERR_NON_FINITE, "batch.obs[3, 1] = nan is not finite");
    expect(fh_pipeline_step(d), FH_ERR_NO_BATCH, "fh_pipeline_upload");

    // A device batch trains as the same batch uploaded from the host.
    DevBatch b0(bt.b[0], c);
    ok(fh_pipeline_upload(d, &b0.view));
    ok(fh_pipeline_step(d));
    fhtest::step(h, bt.b[0]);
    fhtest::expect_bitwise(d, h, "device batch vs host batch");

    // A refused later batch leaves the previous one current.
    DevBatch bad2(bt.b[1], c);
    poke(bad2.action, 5, (int32_t)4);
    ok(fh_pipeline_upload(d, &bad2.view));
    expect(fh_pipeline_step(d), FH_ERR_OUT_OF_RANGE, "batch.action[1, 2] = 4 is outside [0, 4)");
    ok(fh_pipeline_step(d));
    ok(fh_pipeline_step(h));
    fhtest::expect_bitwise(d, h, "a refused device batch changed the current one");

    // Without regime (zeros), as from the host.
    DevBatch b1(bt.b[1], c);
    b1.view.regime = nullptr;
    fh_batch hb = bt.b[1].batch;
    hb.regime = nullptr;
    ok(fh_pipeline_upload(d, &b1.view));
    ok(fh_pipeline_upload(h, &hb));
    ok(fh_pipeline_train(d, 2));
    ok(fh_pipeline_train(h, 2));
    fhtest::expect_bitwise(d, h, "device batch without regime");

    fh_batch host_as_device = bt.b[0].batch;
    host_as_device.memory = FH_MEMORY_DEVICE;
    expect(fh_pipeline_upload(d, &host_as_device), FH_ERR_BAD_VALUE, "batch.obs");
    fh_pipeline_destroy(d);
    fh_pipeline_destroy(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_device_inserts),
        cmocka_unit_test(test_device_batches),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

#else  // a build without CUDA: nothing to test here
int main(void) { return FH_TEST_SKIPPED; }

#endif
