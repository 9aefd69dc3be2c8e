/* The aux child beside ddqn and forward (FOXHUNT_AUX_BESIDE=1, src/schedule.cpp) computes what
 * the default schedule computes. The CPU executor runs the children in list order, and that
 * schedule lists the aux child (IQN's target average, IQN, attention and their Adam steps) before
 * ddqn and forward, CQL and the regime scales in the forward child, and the tail in the adam
 * child: if the learners read anything ddqn or forward write, or the other way round, the
 * results change.
 * So, on the CPU backend, for several configs: every tensor and metric after 6 steps bitwise
 * equal to the default schedule's. (The GPU runs the two side by side; test_cuda_determinism
 * compares the CUDA step's bits in both schedules.) */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cstdlib>

#include "layout.hpp"
#include "schedule.hpp"
#include "test_cuda_util.h"

using namespace fhtest;

namespace {

// Where the schedule puts the aux child relative to ddqn (list indices).
bool aux_listed_before_ddqn(const fh_config &c) {
    const fh::Dims d = fh::make_dims(c);
    int aux = -1, ddqn = -1;
    const std::vector<fh::ChildDesc> s = fh::build_schedule(d, c);
    for (int k = 0; k < (int)s.size(); ++k) {
        if (s[k].id == fh::ChildId::AUX) aux = k;
        if (s[k].id == fh::ChildId::DDQN) ddqn = k;
    }
    return aux >= 0 && aux < ddqn;
}

void check_config(fh_config c, const char *what) {
    c.exec_mode = FH_EXEC_MULTI_STREAM;  // the CPU ignores it; the schedule does not
    Batches bt(c, 11, 3);
    unsetenv("FOXHUNT_AUX_BESIDE");
    assert_false(aux_listed_before_ddqn(c));
    const Snapshot a = run(c, bt, 6);
    setenv("FOXHUNT_AUX_BESIDE", "1", 1);
    assert_true(fh::aux_beside_q(fh::make_dims(c), c));
    assert_true(aux_listed_before_ddqn(c));
    const Snapshot b = run(c, bt, 6);
    unsetenv("FOXHUNT_AUX_BESIDE");
    assert_bitwise(a, b, what);
}

void test_beside_same_bits_cpu(void **) {
    const fh_config base = fh_test_small_config();
    check_config(base, "small config, aux beside vs after");
    fh_config c = base;
    c.cql_alpha = 0.0f;  // no CQL, one regime: the adam child forks no lane
    c.num_regimes = 1;
    check_config(c, "no CQL, one regime");
    c = base;
    c.num_branches = 5;  // more branches than branch lanes
    c.goal_dim = 0;
    check_config(c, "five branches, no goal");
}

// One branch keeps IQL in the aux child, which needs ddqn's Q̄sa: the trial does not apply.
void test_beside_not_with_one_branch(void **) {
    fh_config c = fh_test_small_config();
    c.num_branches = 1;
    setenv("FOXHUNT_AUX_BESIDE", "1", 1);
    assert_false(fh::aux_beside_q(fh::make_dims(c), c));
    assert_false(aux_listed_before_ddqn(c));
    unsetenv("FOXHUNT_AUX_BESIDE");
}

// A value the trial does not know is refused at creation with the variable's name; "0" and ""
// mean the default schedule.
void test_bad_value_refused(void **) {
    fh_config c = fh_test_small_config();
    c.exec_mode = FH_EXEC_MULTI_STREAM;
    setenv("FOXHUNT_AUX_BESIDE", "yes", 1);
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_BAD_VALUE);
    assert_null(p);
    assert_non_null(strstr(fh_last_error_message(), "FOXHUNT_AUX_BESIDE='yes'"));
    for (const char *v : {"0", ""}) {
        setenv("FOXHUNT_AUX_BESIDE", v, 1);
        assert_false(fh::aux_beside_q(fh::make_dims(c), c));
        assert_false(aux_listed_before_ddqn(c));
        assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
        fh_pipeline_destroy(p);
        p = nullptr;
    }
    unsetenv("FOXHUNT_AUX_BESIDE");
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beside_same_bits_cpu),
        cmocka_unit_test(test_beside_not_with_one_branch),
        cmocka_unit_test(test_bad_value_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
