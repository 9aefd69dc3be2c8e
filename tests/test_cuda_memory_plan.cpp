/* fh_memory_plan on the CUDA backend against what the CUDA executor allocates
 * (fh_pipeline_memory counts every cudaMalloc and pinned allocation by category, the divergence
 * guard's shadow copy as parameters and its 64 KiB of scratch as activations): every category
 * equals the allocation; and a config that does not fit the device is refused before anything
 * is allocated. Skipped without a CUDA device. */
#include "backend.hpp"
#include "memory_plan.hpp"
#include "replay_ref.hpp"  // before cmocka.h

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

void check(const char *what, fh_config c, int math = FH_MATH_TF32) {
    c = cuda_config(c, math, c.exec_mode);
    fh_memory_report plan, got;
    plan.struct_size = got.struct_size = sizeof plan;
    if (fh_memory_plan(&c, &plan) != FH_OK) fail_msg("plan: %s", fh_last_error_message());
    fh_pipeline *p = make(c);
    if (c.replay_capacity > 0) {
        /* The ring and its staging exist from creation: a few rows are enough to step. */
        const replay_ref::Rows rows = replay_ref::random_rows(c, 8, 1, 0.1);
        const fh_replay_rows v = rows.view();
        assert_int_equal(fh_pipeline_insert(p, &v), FH_OK);
        assert_int_equal(fh_pipeline_train(p, 1), FH_OK);
    } else {
        Batches bt(c, 1, 1);
        step(p, bt.b[0]);
    }
    assert_int_equal(fh_pipeline_memory(p, &got), FH_OK);
    const uint64_t cats[5][2] = {{plan.parameters, got.parameters},
                                 {plan.activations, got.activations},
                                 {plan.workspaces, got.workspaces},
                                 {plan.batch_staging, got.batch_staging},
                                 {plan.replay, got.replay}};
    const char *names[5] = {"parameters", "activations", "workspaces", "batch_staging", "replay"};
    printf("[MEMORY] %-26s plan %12llu  allocated %12llu  (%+lld)\n", what,
           (unsigned long long)plan.total, (unsigned long long)got.total,
           (long long)plan.total - (long long)got.total);
    for (int k = 0; k < 5; ++k) {
        printf("[MEMORY]   %-14s plan %12llu  allocated %12llu\n", names[k],
               (unsigned long long)cats[k][0], (unsigned long long)cats[k][1]);
        if (cats[k][0] != cats[k][1])
            fail_msg("%s: the plan's %s (%llu) is not the allocation (%llu)", what, names[k],
                     (unsigned long long)cats[k][0], (unsigned long long)cats[k][1]);
    }
    if (plan.total != got.total) fail_msg("%s: totals differ", what);
    fh_pipeline_destroy(p);
}

void test_plan_is_the_allocation(void **) {
    if (!fh_test_have_cuda()) skip();
    check("small", fh_test_small_config());
    fh_config c = fh_test_small_config();
    c.sn_layers = FH_SN_W1 | FH_SN_W2;
    c.goal_dim = 0;
    c.exec_mode = FH_EXEC_SINGLE_STREAM;
    check("small, no goal, single stream", c);
    check("defaults, B = 256", default_config(256));
    fh_config t = default_config(256);
    t.num_branches = 2;
    t.cql_alpha = 0.0f;
    t.num_regimes = 1;
    check("B = 256, NB 2, no CQL, R 1", t);  /* three lanes: no lane 3 */
    check("defaults, B = 256, strict", default_config(256), FH_MATH_STRICT);  /* unfused IQN */
    check("defaults, B = 16384", default_config(16384));
    check("defaults, B = 16384, BF16", default_config(16384), FH_MATH_BF16);
    fh_config s = default_config(4096);
    s.exec_mode = FH_EXEC_SINGLE_STREAM;
    check("defaults, B = 4096, BF16, single", s, FH_MATH_BF16);
    check("small, replay 64 x 4", replay_ref::config(64, 4));
    fh_config r = default_config(1024);
    r.replay_capacity = 1u << 16;
    r.replay_envs = 16;  /* 2^20 transitions: the insert slots hold part of the ring */
    check("defaults, B = 1024, replay 2^16 x 16", r);
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
        cmocka_unit_test(test_plan_is_the_allocation),
        cmocka_unit_test(test_too_large_refused_before_allocating),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
