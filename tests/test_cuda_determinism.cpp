/* Bitwise reproducibility of the CUDA step at the default config (B = 16384), 20 steps:
 * - two multi-stream pipelines, same seed and batches: every tensor and metric bitwise equal;
 * - single-stream vs multi-stream: bitwise equal (TF32 and strict), i.e. running the lanes
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

struct Snapshot {
    std::vector<std::vector<float>> tensors;
    std::vector<std::string> names;
    fh_metrics m;
};

Snapshot run(const fh_config &c, const Batches &bt, int steps) {
    fh_pipeline *p = make(c);
    for (int k = 0; k < steps; ++k) step(p, bt.b[(size_t)k % bt.b.size()]);
    Snapshot s;
    uint32_t n = 0;
    fh_pipeline_num_tensors(p, &n);
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info;
        info.struct_size = sizeof info;
        fh_pipeline_tensor_info(p, i, &info);
        s.names.push_back(info.name);
        s.tensors.push_back(read(p, info.name, (size_t)info.rows * info.cols));
    }
    memset(&s.m, 0, sizeof s.m);
    s.m.struct_size = sizeof s.m;
    assert_int_equal(fh_pipeline_metrics(p, &s.m), FH_OK);
    fh_pipeline_destroy(p);
    return s;
}

void assert_bitwise(const Snapshot &a, const Snapshot &b, const char *what) {
    assert_int_equal(a.tensors.size(), b.tensors.size());
    int differ = 0;
    for (size_t i = 0; i < a.tensors.size(); ++i)
        if (a.tensors[i].size() != b.tensors[i].size() ||
            memcmp(a.tensors[i].data(), b.tensors[i].data(), a.tensors[i].size() * 4) != 0) {
            if (differ++ < 5) printf("  %s: tensor %s differs\n", what, a.names[i].c_str());
        }
    if (memcmp(&a.m.td_loss, &b.m.td_loss,
               offsetof(fh_metrics, regime_scale) - offsetof(fh_metrics, td_loss)) != 0) {
        printf("  %s: metrics differ\n", what);
        ++differ;
    }
    if (differ) fail_msg("%s: %d tensors/metrics not bitwise equal", what, differ);
    printf("[DETERMINISM] %s: %zu tensors and all metrics bitwise equal\n", what,
           a.tensors.size());
}

void test_bitwise_default_20_steps(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config base = default_config(16384);
    Batches bt(base, 7, 4);  /* 20 steps cycle through 4 batches */
    for (int math : {FH_MATH_TF32, FH_MATH_STRICT}) {
        const char *mm = math == FH_MATH_TF32 ? "tf32" : "strict";
        Snapshot a = run(cuda_config(base, math, FH_EXEC_MULTI_STREAM), bt, 20);
        Snapshot s = run(cuda_config(base, math, FH_EXEC_SINGLE_STREAM), bt, 20);
        char what[96];
        snprintf(what, sizeof what, "%s: single-stream vs multi-stream", mm);
        assert_bitwise(a, s, what);
        if (math == FH_MATH_TF32) {
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
