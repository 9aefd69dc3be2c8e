/* fh_memory_plan on the CUDA backend against what the CUDA executor allocates
 * (fh_pipeline_memory counts every cudaMalloc and pinned allocation by category): no category
 * of the plan is below the allocation, and the total is within 16 MiB + 1 % of it (the plan
 * also counts the divergence guard's shadow copy and scratch, which the executor does not
 * allocate until the guard is wired: 6 MB at the defaults; src/memory_plan.hpp), and a config
 * that does not fit the device is refused before anything is allocated. Skipped without a
 * CUDA device. */
#include "backend.hpp"
#include "memory_plan.hpp"

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

void check(const char *what, fh_config c) {
    c = cuda_config(c, FH_MATH_TF32);
    fh_memory_report plan, got;
    plan.struct_size = got.struct_size = sizeof plan;
    if (fh_memory_plan(&c, &plan) != FH_OK) fail_msg("plan: %s", fh_last_error_message());
    fh_pipeline *p = make(c);
    Batches bt(c, 1, 1);
    step(p, bt.b[0]);
    assert_int_equal(fh_pipeline_memory(p, &got), FH_OK);
    const uint64_t cats[4][2] = {{plan.parameters, got.parameters},
                                 {plan.activations, got.activations},
                                 {plan.workspaces, got.workspaces},
                                 {plan.batch_staging, got.batch_staging}};
    const char *names[4] = {"parameters", "activations", "workspaces", "batch_staging"};
    printf("[MEMORY] %-26s plan %12llu  allocated %12llu  (%+lld)\n", what,
           (unsigned long long)plan.total, (unsigned long long)got.total,
           (long long)plan.total - (long long)got.total);
    for (int k = 0; k < 4; ++k) {
        printf("[MEMORY]   %-14s plan %12llu  allocated %12llu\n", names[k],
               (unsigned long long)cats[k][0], (unsigned long long)cats[k][1]);
        if (cats[k][0] < cats[k][1])
            fail_msg("%s: the plan's %s (%llu) is below what was allocated (%llu)", what,
                     names[k], (unsigned long long)cats[k][0], (unsigned long long)cats[k][1]);
    }
    if ((double)plan.total > (double)got.total * 1.01 + (16 << 20))
        fail_msg("%s: the plan (%llu) overstates the allocation (%llu)", what,
                 (unsigned long long)plan.total, (unsigned long long)got.total);
    fh_pipeline_destroy(p);
}

void test_plan_bounds_the_allocation(void **) {
    if (!fh_test_have_cuda()) skip();
    check("small", fh_test_small_config());
    fh_config c = fh_test_small_config();
    c.sn_layers = FH_SN_W1 | FH_SN_W2;
    c.goal_dim = 0;
    c.exec_mode = FH_EXEC_SINGLE_STREAM;
    check("small, no goal, single stream", c);
    check("defaults, B = 256", default_config(256));
    check("defaults, B = 16384", default_config(16384));
}

/* A config whose plan exceeds the device's free memory is refused with the numbers. */
void test_too_large_refused_before_allocating(void **) {
    if (!fh_test_have_cuda()) skip();
    const uint64_t free_b = fh::cuda_free_bytes(0);
    for (uint32_t b : {1u << 18, 1u << 19, 1u << 20}) {
        fh_config c = cuda_config(default_config(b), FH_MATH_TF32);
        c.trunk_hidden = 1024;
        c.branch_hidden = 512;
        fh_memory_report plan;
        plan.struct_size = sizeof plan;
        if (fh_memory_plan(&c, &plan) != FH_OK) continue;  // over the index cap
        if (plan.total <= free_b) continue;
        fh_pipeline *p = nullptr;
        assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_OUT_OF_MEMORY);
        assert_null(p);
        const char *msg = fh_last_error_message();
        printf("[MEMORY] B = %u: %s\n", b, msg);
        if (!strstr(msg, "device memory of CUDA device 0") && !strstr(msg, "host memory"))
            fail_msg("message: %s", msg);
        assert_true(fh::cuda_free_bytes(0) + (64u << 20) >= free_b);  /* nothing kept */
        return;
    }
    printf("[MEMORY] every candidate fits this device: refusal not checked\n");
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_bounds_the_allocation),
        cmocka_unit_test(test_too_large_refused_before_allocating),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
