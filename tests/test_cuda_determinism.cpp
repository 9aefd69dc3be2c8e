/* Bitwise reproducibility of the CUDA step at the default config (B = 16384), 20 steps:
 * - two multi-stream pipelines, same seed and batches: every tensor and metric bitwise equal;
 * - single-stream vs multi-stream: bitwise equal (TF32, strict and BF16), i.e. running the lanes
 *   concurrently changes nothing (own cuBLAS workspace per lane, no atomics, fixed-order sums);
 * - a different seed differs (the comparison can fail).
 * Skipped without a CUDA device. */
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

void test_bitwise_default_20_steps(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config base = default_config(16384);
    Batches bt(base, 7, 4);  /* 20 steps cycle through 4 batches */
    for (int math : {FH_MATH_TF32, FH_MATH_STRICT, FH_MATH_BF16}) {
        const char *mm = math == FH_MATH_TF32 ? "tf32" : math == FH_MATH_STRICT ? "strict" : "bf16";
        Snapshot a = run(cuda_config(base, math, FH_EXEC_MULTI_STREAM), bt, 20);
        Snapshot s = run(cuda_config(base, math, FH_EXEC_SINGLE_STREAM), bt, 20);
        char what[96];
        snprintf(what, sizeof what, "%s: single-stream vs multi-stream", mm);
        assert_bitwise(a, s, what);
        if (math != FH_MATH_STRICT) {
            Snapshot b = run(cuda_config(base, math, FH_EXEC_MULTI_STREAM), bt, 20);
            snprintf(what, sizeof what, "%s: two multi-stream runs", mm);
            assert_bitwise(a, b, what);
            fh_config c2 = cuda_config(base, math, FH_EXEC_MULTI_STREAM);
            c2.seed = 1;
            Snapshot d = run(c2, bt, 1);
            assert_true(memcmp(a.tensors[0].data(), d.tensors[0].data(), 64) != 0);
        }
    }
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_default_20_steps),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
