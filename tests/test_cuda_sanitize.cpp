/* Every path of the CUDA executor once, at small sizes (B <= 256), for compute-sanitizer's
 * memcheck, racecheck and synccheck (bench/run_device.sh runs it under each): creation and
 * capture in both execution modes, the three math modes, every IQL GEMM mode, with and without a
 * goal and with both layers spectrally normalised; uploads, steps, a step the divergence guard
 * skips, act with q-values, tensor reads and writes, metrics, timings, a checkpoint round trip.
 * The results are checked only loosely (the other GPU tests check them); what matters here is
 * that every kernel ran. Skipped without a CUDA device. */
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

void exercise(const char *what, fh_config c) {
    fh_pipeline *p = make(c);
    Batches bt(c, 5, 2);
    step(p, bt.b[0]);
    step(p, bt.b[1]);
    /* A batch that overflows the step: the guard's restore path. */
    fh_test_batch big;
    fh_test_batch_make(&big, &c, 7);
    for (size_t i = 0; i < (size_t)c.batch_size * c.obs_dim; ++i) big.obs[i] = 3e38f;
    step(p, big);
    fh_test_batch_free(&big);
    const uint32_t n = 5;
    std::vector<int32_t> actions(n * c.num_branches);
    std::vector<float> q(n * c.num_branches * c.actions_per_branch);
    assert_int_equal(fh_pipeline_act(p, bt.b[0].obs, bt.b[0].goal, n, 0.3f, actions.data(),
                                     q.data()), FH_OK);
    std::vector<float> w = read(p, "q.W2", (size_t)c.trunk_hidden * c.trunk_hidden);
    assert_int_equal(fh_pipeline_write_tensor(p, "q.W2", w.data(), w.size()), FH_OK);
    fh_metrics m;
    m.struct_size = sizeof m;
    assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
    fh_timings t;
    t.struct_size = sizeof t;
    assert_int_equal(fh_pipeline_timings(p, &t), FH_OK);
    fh_pipeline_check(p);
    const char *path = fh_test_tmp_path("sanitize.ckpt");
    assert_int_equal(fh_pipeline_save(p, path), FH_OK);
    assert_int_equal(fh_pipeline_load(p, path), FH_OK);
    step(p, bt.b[0]);
    assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
    printf("[SANITIZE] %-40s td_loss %.4g, steps skipped %llu\n", what, (double)m.td_loss,
           (unsigned long long)m.steps_skipped);
    fflush(stdout);  // progress survives a sanitizer run stopped by its time limit
    fh_pipeline_destroy(p);
}

void test_every_cuda_path_small(void **) {
    if (!fh_test_have_cuda()) skip();
    /* BF16 first: its tensor-core kernels are the newest, and a run stopped by its time limit
     * (racecheck takes minutes) still covers them. */
    exercise("defaults, B = 256, BF16", cuda_config(default_config(256), FH_MATH_BF16));
    const fh_config small = fh_test_small_config();
    exercise("small, multi-stream, TF32", cuda_config(small, FH_MATH_TF32));
    exercise("small, single-stream, strict",
             cuda_config(small, FH_MATH_STRICT, FH_EXEC_SINGLE_STREAM));
    fh_config c = cuda_config(small, FH_MATH_STRICT);
    c.goal_dim = 0;
    c.sn_layers = FH_SN_W1 | FH_SN_W2;
    c.num_regimes = 1;
    c.cql_alpha = 0;
    exercise("small, no goal, SN W1+W2, R = 1, no CQL", c);
    for (int g : {FH_IQL_GEMM_GROUPED, FH_IQL_GEMM_BATCHED, FH_IQL_GEMM_SEQUENTIAL}) {
        fh_config d = cuda_config(default_config(256), FH_MATH_TF32);
        d.iql_gemm = g;
        char what[64];
        snprintf(what, sizeof what, "defaults, B = 256, iql_gemm %d", g);
        exercise(what, d);
    }
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_cuda_path_small),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
