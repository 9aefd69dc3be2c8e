/* Bitwise reproducibility of the CUDA step at the default config (B = 16384), 20 steps:
 * - two multi-stream pipelines, same seed and batches: every tensor and metric bitwise equal;
 * - single-stream vs multi-stream: bitwise equal (TF32, strict and BF16), i.e. running the lanes
 *   concurrently changes nothing (own cuBLAS workspace per lane, no atomics, fixed-order sums);
 * - the aux child beside ddqn and forward (FOXHUNT_AUX_BESIDE=1 and =priority, src/schedule.cpp)
 *   vs after them: bitwise equal (TF32 and BF16), i.e. the learners running beside the Q
 *   learner's children neither read nor clobber what those write; and its per-child timings add
 *   up (the aux child's span inside the step's);
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

void test_aux_beside_same_bits(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config base = default_config(16384);
    Batches bt(base, 7, 4);
    for (int math : {FH_MATH_TF32, FH_MATH_BF16}) {
        const char *mm = math == FH_MATH_TF32 ? "tf32" : "bf16";
        const fh_config c = cuda_config(base, math, FH_EXEC_MULTI_STREAM);
        unsetenv("FOXHUNT_AUX_BESIDE");
        const Snapshot a = run(c, bt, 20);
        for (const char *v : {"1", "priority"}) {
            setenv("FOXHUNT_AUX_BESIDE", v, 1);
            fh_pipeline *p = make(c);
            for (int k = 0; k < 20; ++k) step(p, bt.b[(size_t)k % bt.b.size()]);
            const Snapshot b = snapshot(p);
            fh_timings t;
            memset(&t, 0, sizeof t);
            t.struct_size = sizeof t;
            assert_int_equal(fh_pipeline_timings(p, &t), FH_OK);
            fh_pipeline_destroy(p);
            unsetenv("FOXHUNT_AUX_BESIDE");
            printf("[BESIDE] %s %s: total %.3f ms, ddqn %.3f, forward %.3f, aux %.3f "
                   "(iqn %.3f, attention %.3f), adam %.3f (tail %.3f)\n", mm, v, t.total_ms,
                   t.ddqn_ms, t.forward_ms, t.aux_ms, t.aux_iqn_ms, t.aux_attn_ms, t.adam_ms,
                   t.aux_tail_ms);
            assert_true(t.aux_ms > 0 && t.aux_ms < t.total_ms);
            assert_true(t.adam_ms > 0 && t.aux_tail_ms > 0 && t.aux_tail_ms < t.adam_ms);
            // (the child's span is a difference of two event times: 5 µs for their resolution)
            assert_true(t.aux_iqn_ms > 0 && t.aux_iqn_ms <= t.aux_ms + 0.005f);
            char what[96];
            snprintf(what, sizeof what, "%s: aux beside (%s) vs after", mm, v);
            assert_bitwise(a, b, what);
        }
    }
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_default_20_steps),
        cmocka_unit_test(test_aux_beside_same_bits),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
