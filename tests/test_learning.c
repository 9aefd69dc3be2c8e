/* The Q learner learns: on a small fixed problem the TD loss falls. With gamma = 0 the TD
 * target is the reward itself, so the net must fit r(s, a) for the logged actions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "testutil.h"

static void test_td_loss_falls(void **state) {
    (void)state;
    fh_config c = fh_test_small_config();
    c.gamma = 0.0f;
    c.goal_dim = 0;
    c.lr_q = 3e-3f;
    c.num_regimes = 1;
    fh_pipeline *p = NULL;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 42);
    /* A learnable reward: a fixed function of the first observation feature and action 0. */
    for (uint32_t i = 0; i < c.batch_size; ++i)
        tb.reward[i] = tb.obs[i * c.obs_dim] * (tb.action[i * c.num_branches] == 0 ? 1.0f : -0.5f);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    fh_metrics m = {sizeof m};
    float first = 0, last = 0;
    for (int s = 0; s < 300; ++s) {
        assert_int_equal(fh_pipeline_step(p), FH_OK);
        assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
        if (s == 0) first = m.td_loss;
        last = m.td_loss;
    }
    printf("td_loss %.4f -> %.4f after 300 steps\n", first, last);
    assert_true(last < 0.2f * first);
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_td_loss_falls)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
