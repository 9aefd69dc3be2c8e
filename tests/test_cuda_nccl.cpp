/* The data-parallel step (SPEC §9) on one GPU: a pipeline given an NCCL communicator of one rank
 * (ncclCommInitAll over device 0) against the same pipeline without one, SPEC defaults at
 * B = 4096, 20 steps on 4 cycling batches, TF32 and strict FP32: every tensor and metric
 * bitwise equal (W = 1 is exactly SPEC §5). The all-reduce points were captured: the pipeline
 * with the communicator enqueued 3 NCCL groups under stream capture (IQL; the regime
 * statistics; the Q-net gradient with the metrics; with one rank IQN's and attention's Adam steps
 * end their lanes, and their gradients have no sum), 2 with num_regimes = 1.
 * (With one rank NCCL enqueues nothing for an in-place sum, so the graph holds no NCCL node:
 * tests/test_cuda_nccl_2gpu.cpp counts them where there are two ranks.)
 * In a CUDA build without NCCL: a communicator is refused with FH_ERR_UNSUPPORTED.
 * Skipped (exit 77) without a GPU. */
#if FOXHUNT_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"

extern "C" long fh_cuda_debug_nccl_groups_captured(void) __attribute__((weak));

using namespace fhtest;

namespace {

#if FOXHUNT_HAVE_NCCL
void check(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) fail_msg("%s: %s", what, ncclGetErrorString(r));
}

void test_one_rank_is_bitwise_the_plain_step(void **) {
    if (!fh_test_have_cuda()) skip();
    ncclComm_t comm = nullptr;
    int dev = 0;
    check(ncclCommInitAll(&comm, 1, &dev), "ncclCommInitAll");
    const fh_config base = default_config(4096);
    Batches bt(base, 31, 4);
    for (int math : {FH_MATH_TF32, FH_MATH_STRICT}) {
        const fh_config plain = cuda_config(base, math);
        fh_config dp = plain;
        dp.nccl_comm = comm;
        const Snapshot a = run(plain, bt, 20);
        const long g0 = fh_cuda_debug_nccl_groups_captured();
        const Snapshot b = run(dp, bt, 20);
        const long groups = fh_cuda_debug_nccl_groups_captured() - g0;
        printf("[NCCL] %s: %ld NCCL groups captured into the step graph\n",
               math == FH_MATH_TF32 ? "tf32" : "strict", groups);
        assert_int_equal(groups, 3);
        assert_bitwise(a, b, math == FH_MATH_TF32 ? "tf32: W = 1 vs no communicator"
                                                  : "strict: W = 1 vs no communicator");
    }
    // num_regimes = 1: no regime statistics to sum.
    fh_config r1 = cuda_config(base, FH_MATH_TF32);
    r1.num_regimes = 1;
    Batches bt1(r1, 41, 3);  // regime indices in [0, 1)
    const Snapshot a = run(r1, bt1, 3);
    r1.nccl_comm = comm;
    const long g0 = fh_cuda_debug_nccl_groups_captured();
    const Snapshot b = run(r1, bt1, 3);
    assert_int_equal(fh_cuda_debug_nccl_groups_captured() - g0, 2);
    assert_bitwise(a, b, "tf32, num_regimes = 1: W = 1 vs no communicator");
    check(ncclCommDestroy(comm), "ncclCommDestroy");
}
#else
void test_no_nccl_refuses_a_communicator(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c = cuda_config(default_config(256), FH_MATH_TF32);
    int not_a_communicator = 0;  // refused before it would be used
    c.nccl_comm = &not_a_communicator;
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_UNSUPPORTED);
    assert_non_null(strstr(fh_last_error_message(), "no NCCL"));
    assert_null(p);
}
#endif

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
#if FOXHUNT_HAVE_NCCL
        cmocka_unit_test(test_one_rank_is_bitwise_the_plain_step),
#else
        cmocka_unit_test(test_no_nccl_refuses_a_communicator),
#endif
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
