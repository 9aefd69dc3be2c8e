/* The divergence guard on the CUDA executor (cuda/guard.cu): the extreme batches that the CPU
 * guard skips (tests/test_guard.cpp) are skipped on the GPU too, decided on the device: the
 * state stays bitwise as it was, the metrics count the step, fh_pipeline_check() names a
 * non-finite quantity, and ordinary steps around it match the CPU reference. Skipped without
 * a CUDA device. */
#include "guard.hpp"
#include "state_io.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

fh::Checkpoint state(fh_pipeline *p, const char *name) {
    return state_of(p, fh_test_tmp_path(name));
}

/* A normal step, an extreme one (skipped), a normal one: on CUDA and on the CPU. */
void check_config(const char *what, const fh_config &cpu, float reward_x, float obs_x) {
    const fh_config gpu = cuda_config(cpu, FH_MATH_STRICT);
    fh_pipeline *g = make(gpu), *r = make(cpu);
    Batches bt(cpu, 3, 2);
    fh_test_batch big;
    fh_test_batch_make(&big, &cpu, 9);
    scale_batch(big, cpu, reward_x, obs_x);
    for (fh_pipeline *p : {g, r}) step(p, bt.b[0]);
    assert_int_equal(fh_pipeline_check(g), FH_OK);
    const fh::Checkpoint before = state(g, "cuda_guard_before.ckpt");
    for (fh_pipeline *p : {g, r}) step(p, big);
    const fh_metrics mg = metrics_of(g), mr = metrics_of(r);
    printf("[GUARD] %s: CUDA last_step_skipped %u (steps_skipped %llu), CPU %u\n", what,
           mg.last_step_skipped, (unsigned long long)mg.steps_skipped, mr.last_step_skipped);
    assert_int_equal(mr.last_step_skipped, 1);  /* the CPU reference diverges here */
    assert_int_equal(mg.last_step_skipped, 1);
    assert_int_equal(mg.steps_skipped, 1);
    assert_int_equal(mg.step, 2);
    const int diff = first_different_buffer(before, state(g, "cuda_guard_after.ckpt"));
    if (diff >= 0) fail_msg("buffer %d changed in a skipped step on CUDA", diff);
    assert_int_equal(fh_pipeline_check(g), FH_ERR_NON_FINITE);
    printf("[GUARD] CUDA: %s\n", fh_last_error_message());
    if (!strstr(fh_last_error_message(), "step 2 applied no update: "))
        fail_msg("message: %s", fh_last_error_message());
    assert_int_equal(fh_pipeline_check(r), FH_ERR_NON_FINITE);
    printf("[GUARD] CPU:  %s\n", fh_last_error_message());
    assert_int_equal(fh_pipeline_check(g), FH_OK);
    for (fh_pipeline *p : {g, r}) step(p, bt.b[1]);
    assert_int_equal(metrics_of(g).last_step_skipped, 0);
    const Diff d = compare(g, r);
    print_diff(what, d);
    if (!(d.max_rel < 1e-4)) fail_msg("CUDA and CPU differ after the skipped step: %s %.3e",
                                      d.worst.c_str(), d.max_rel);
    fh_test_batch_free(&big);
    fh_pipeline_destroy(g);
    fh_pipeline_destroy(r);
}

void test_extreme_inputs_skipped_on_the_device(void **) {
    if (!fh_test_have_cuda()) skip();
    check_config("small, rewards x1e12, obs x1e11", fh_test_small_config(), 1e12f, 1e11f);
    fh_config c = default_config(64);
    check_config("defaults B = 64, rewards x1e13, obs x1e10", c, 1e13f, 1e10f);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extreme_inputs_skipped_on_the_device),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
