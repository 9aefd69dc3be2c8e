/* upload() and step() of the CUDA backend never wait for the GPU.
 *
 * How this is shown, without CUPTI:
 * 1. Every place where the backend could block the host inside upload()/step() goes through one
 *    counted wait (the only one is upload()'s reuse of a pinned staging slot whose copy has not
 *    run yet; step() has none). The counter, fh_cuda_debug_host_waits(), must not move while the
 *    test uploads and steps ten times without reading anything.
 * 2. Right after each step() returns, the step it launched is still running on the GPU
 *    (cudaEventQuery on the event recorded after the launch, fh_cuda_debug_step_pending() == 1),
 *    at B = 16384 where a step takes milliseconds: step() returned before the work was done.
 *    After metrics() (which waits) it is done.
 * 3. The overlapped uploads did not disturb the steps in flight: the result is bitwise equal to
 *    a pipeline that waits (metrics()) after every step.
 * Skipped without a CUDA device. */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <chrono>

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void sync(fh_pipeline *p) {
    fh_metrics m;
    m.struct_size = sizeof m;
    assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
}

void test_upload_and_step_never_wait(void **) {
    if (!fh_test_have_cuda()) skip();
    assert_non_null(fh_cuda_debug_host_waits);
    assert_non_null(fh_cuda_debug_step_pending);
    const fh_config base = default_config(16384);
    const fh_config c = cuda_config(base, FH_MATH_TF32);
    Batches bt(base, 40, 3);
    fh_pipeline *p = make(c);
    step(p, bt.b[0]);  // warm up
    sync(p);
    assert_int_equal(fh_cuda_debug_step_pending(), 0);

    const uint64_t waits0 = fh_cuda_debug_host_waits();
    const int n = 10;
    double up_ms = 0, step_ms = 0;
    int pending = 0;
    const double t_start = now_ms();
    for (int k = 0; k < n; ++k) {
        const double t0 = now_ms();
        assert_int_equal(fh_pipeline_upload(p, &bt.b[(size_t)(k + 1) % 3].batch), FH_OK);
        const double t1 = now_ms();
        assert_int_equal(fh_pipeline_step(p), FH_OK);
        const double t2 = now_ms();
        pending += fh_cuda_debug_step_pending() == 1;
        up_ms += t1 - t0;
        step_ms += t2 - t1;
    }
    const double t_issue = now_ms();
    const uint64_t waits = fh_cuda_debug_host_waits() - waits0;
    sync(p);
    const double t_end = now_ms();
    fh_timings t;
    t.struct_size = sizeof t;
    assert_int_equal(fh_pipeline_timings(p, &t), FH_OK);
    printf("[NOSYNC] %d x (upload + step) issued in %.2f ms (upload %.3f ms, step() %.4f ms "
           "each); GPU step %.3f ms; all done %.2f ms after the first call; host waits in "
           "upload/step: %llu; step still running right after step() returned: %d of %d\n",
           n, t_issue - t_start, up_ms / n, step_ms / n, t.total_ms, t_end - t_start,
           (unsigned long long)waits, pending, n);
    assert_int_equal(waits, 0);
    assert_int_equal(pending, n);
    assert_int_equal(fh_cuda_debug_step_pending(), 0);

    /* The same sequence, waiting after every step: bitwise the same result. */
    fh_pipeline *r = make(c);
    step(r, bt.b[0]);
    sync(r);
    for (int k = 0; k < n; ++k) {
        step(r, bt.b[(size_t)(k + 1) % 3]);
        sync(r);
    }
    Diff d = compare(p, r);
    if (!d.bitwise) fail_msg("overlapped uploads changed the result (%s %.3e)", d.worst.c_str(),
                             d.max_rel);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(r);
}

/* Two uploads before a step: the step trains on the later one; a step without an upload trains
 * on the current batch again. */
void test_upload_semantics(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = cuda_config(fh_test_small_config(), FH_MATH_STRICT);
    Batches bt(c, 77, 2);
    fh_pipeline *p = make(c), *r = make(c);
    assert_int_equal(fh_pipeline_upload(p, &bt.b[0].batch), FH_OK);
    assert_int_equal(fh_pipeline_upload(p, &bt.b[1].batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    step(r, bt.b[1]);
    assert_int_equal(fh_pipeline_step(r), FH_OK);
    Diff d = compare(p, r);
    assert_true(d.bitwise);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(r);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_and_step_never_wait),
        cmocka_unit_test(test_upload_semantics),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
