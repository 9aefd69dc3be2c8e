/* The IQL learner's three GEMM paths on the GPU (issue 4): grouped (cublasGemmGroupedBatchedEx),
 * strided-batched and sequential give the same step in strict FP32, 20 steps at the default
 * widths; a config whose IQL offsets are not 16-byte aligned falls back from GROUPED to
 * SEQUENTIAL and then equals an explicit SEQUENTIAL run bitwise. The mode actually used is read
 * through a test hook. Skipped without a CUDA device. */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"

extern "C" int fh_cuda_debug_iql_gemm_mode(void) __attribute__((weak));

using namespace fhtest;

namespace {

const char *mode_name(int m) {
    switch (m) {
    case FH_IQL_GEMM_GROUPED: return "grouped";
    case FH_IQL_GEMM_BATCHED: return "batched";
    case FH_IQL_GEMM_SEQUENTIAL: return "sequential";
    default: return "auto";
    }
}

/* Creates a CUDA pipeline asking for `mode`; returns it and the mode it uses. */
fh_pipeline *make_mode(fh_config c, int mode, int *used) {
    c.iql_gemm = mode;
    fh_pipeline *p = make(cuda_config(c, FH_MATH_STRICT));
    *used = fh_cuda_debug_iql_gemm_mode();
    return p;
}

void test_three_paths_agree(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config base = default_config(2048);
    Batches bt(base, 11, 4);
    int used = -1;
    fh_pipeline *ref = make_mode(base, FH_IQL_GEMM_SEQUENTIAL, &used);
    assert_int_equal(used, FH_IQL_GEMM_SEQUENTIAL);
    for (int k = 0; k < 20; ++k) step(ref, bt.b[(size_t)k % 4]);
    for (int mode : {FH_IQL_GEMM_BATCHED, FH_IQL_GEMM_GROUPED, FH_IQL_GEMM_AUTO}) {
        fh_pipeline *p = make_mode(base, mode, &used);
        printf("[IQL-GEMM] asked %s, uses %s\n", mode_name(mode), mode_name(used));
        /* The defaults are aligned, so each explicit mode runs as asked; AUTO is sequential. */
        assert_int_equal(used, mode == FH_IQL_GEMM_AUTO ? FH_IQL_GEMM_SEQUENTIAL : mode);
        for (int k = 0; k < 20; ++k) step(p, bt.b[(size_t)k % 4]);
        Diff d = compare(p, ref);
        char what[64];
        snprintf(what, sizeof what, "iql %s vs sequential, strict, 20 steps", mode_name(used));
        print_diff(what, d);
        /* cuBLAS may pick other kernels (split-K) for a batched or grouped call than for two
         * single ones, so equality is asked to strict-FP32 rounding, and bitwise is reported. */
        if (!(d.max_rel <= 1e-5)) fail_msg("%s: %.3e at %s", what, d.max_rel, d.worst.c_str());
        fh_pipeline_destroy(p);
    }
    fh_pipeline_destroy(ref);
}

void test_unaligned_grouped_falls_back(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c = fh_test_small_config();
    c.iql_hidden = 5;  /* W2 starts 5·(D + 1) = 55 floats into a net: not 16-byte aligned */
    Batches bt(c, 3, 2);
    int used = -1;
    fh_pipeline *g = make_mode(c, FH_IQL_GEMM_GROUPED, &used);
    assert_int_equal(used, FH_IQL_GEMM_SEQUENTIAL);
    fh_pipeline *s = make_mode(c, FH_IQL_GEMM_SEQUENTIAL, &used);
    for (int k = 0; k < 5; ++k) {
        step(g, bt.b[(size_t)k % 2]);
        step(s, bt.b[(size_t)k % 2]);
    }
    Diff d = compare(g, s);
    print_diff("grouped (unaligned -> sequential) vs sequential", d);
    assert_true(d.bitwise);
    fh_pipeline_destroy(g);
    fh_pipeline_destroy(s);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_paths_agree),
        cmocka_unit_test(test_unaligned_grouped_falls_back),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
