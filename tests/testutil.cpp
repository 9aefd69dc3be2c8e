#include "testutil.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend.hpp"

extern "C" {

fh_config fh_test_small_config(void) {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 32;
    c.obs_dim = 8;
    c.goal_dim = 2;
    c.num_branches = 3;
    c.actions_per_branch = 4;
    c.trunk_hidden = 16;
    c.branch_hidden = 8;
    c.iql_hidden = 8;
    c.iqn_hidden = 8;
    c.iqn_cos = 6;
    c.iqn_n = 3;
    c.iqn_n_target = 2;
    c.attn_token_dim = 2;
    c.attn_d_model = 8;
    c.attn_heads = 2;
    c.attn_head_hidden = 8;
    c.num_regimes = 3;
    c.her_epsilon = 0.5f;
    return c;
}

static uint64_t next(uint64_t *s) {  // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float unif(uint64_t *s) { return (float)((next(s) >> 40) * (1.0 / 16777216.0)); }
static float gauss(uint64_t *s) {  // sum of 4 uniforms, centred, unit variance
    return (unif(s) + unif(s) + unif(s) + unif(s) - 2.0f) * 1.7320508f;
}

void fh_test_batch_make(fh_test_batch *tb, const fh_config *c, uint64_t seed) {
    memset(tb, 0, sizeof *tb);
    uint64_t s = seed * 7919 + 1;
    const size_t B = c->batch_size, O = c->obs_dim, G = c->goal_dim, NB = c->num_branches;
    tb->obs = (float *)malloc(B * O * sizeof(float));
    tb->next_obs = (float *)malloc(B * O * sizeof(float));
    tb->reward = (float *)malloc(B * sizeof(float));
    tb->action = (int32_t *)malloc(B * NB * sizeof(int32_t));
    tb->regime = (int32_t *)malloc(B * sizeof(int32_t));
    tb->done = (uint8_t *)malloc(B);
    for (size_t i = 0; i < B * O; ++i) tb->obs[i] = gauss(&s);
    for (size_t i = 0; i < B * O; ++i) tb->next_obs[i] = 0.9f * tb->obs[i] + 0.3f * gauss(&s);
    for (size_t i = 0; i < B; ++i) tb->reward[i] = gauss(&s);
    for (size_t i = 0; i < B * NB; ++i) tb->action[i] = (int32_t)(next(&s) % c->actions_per_branch);
    for (size_t i = 0; i < B; ++i) tb->regime[i] = (int32_t)(next(&s) % c->num_regimes);
    for (size_t i = 0; i < B; ++i) tb->done[i] = unif(&s) < 0.1f;
    if (G > 0) {
        tb->goal = (float *)malloc(B * G * sizeof(float));
        tb->next_achieved_goal = (float *)malloc(B * G * sizeof(float));
        tb->her_goal = (float *)malloc(B * G * sizeof(float));
        for (size_t i = 0; i < B * G; ++i) {
            tb->goal[i] = gauss(&s);
            tb->next_achieved_goal[i] = gauss(&s);
            // Half the future goals sit close to ag' so the sparse reward takes both values.
            tb->her_goal[i] = (i / G) % 2 ? tb->next_achieved_goal[i] + 0.05f * gauss(&s) : gauss(&s);
        }
    }
    fh_batch b = FH_BATCH_INIT;
    b.batch_size = (uint32_t)B;
    b.obs = tb->obs;
    b.goal = tb->goal;
    b.action = tb->action;
    b.reward = tb->reward;
    b.done = tb->done;
    b.next_obs = tb->next_obs;
    b.next_achieved_goal = tb->next_achieved_goal;
    b.her_goal = tb->her_goal;
    b.regime = tb->regime;
    tb->batch = b;
}

fh_batch fh_test_batch_rows(const fh_test_batch *tb, const fh_config *c, uint32_t first) {
    const size_t i = first, O = c->obs_dim, G = c->goal_dim, NB = c->num_branches;
    fh_batch b = tb->batch;
    b.batch_size = c->batch_size;
    b.obs = tb->obs + i * O;
    b.next_obs = tb->next_obs + i * O;
    if (G > 0) {
        b.goal = tb->goal + i * G;
        b.next_achieved_goal = tb->next_achieved_goal + i * G;
        b.her_goal = tb->her_goal + i * G;
    }
    b.action = tb->action + i * NB;
    b.reward = tb->reward + i;
    b.done = tb->done + i;
    b.regime = tb->regime + i;
    return b;
}

void fh_test_batch_free(fh_test_batch *tb) {
    free(tb->obs); free(tb->goal); free(tb->reward); free(tb->next_obs);
    free(tb->next_achieved_goal); free(tb->her_goal); free(tb->action); free(tb->regime);
    free(tb->done);
    memset(tb, 0, sizeof *tb);
}

int fh_test_have_cuda(void) { return fh::cuda_available(0) ? 1 : 0; }

int fh_test_gpu_exit(int failures) {
    if (failures) return failures;
    return fh_test_have_cuda() ? 0 : FH_TEST_SKIPPED;
}

const char *fh_test_tmp_path(const char *name) {
    static char bufs[8][4096];  // a few live paths at once
    static int next_buf = 0;
    char *buf = bufs[next_buf++ % 8];
    const char *dir = getenv("FOXHUNT_TEST_TMP");
    snprintf(buf, sizeof bufs[0], "%s/%s", dir ? dir : "/tmp", name);
    return buf;
}

double fh_test_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return std::sqrt(num);
    return std::sqrt(num / den);
}

void fh_test_reseal(void *file, size_t n) {
    unsigned char *b = (unsigned char *)file;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i + 8 < n; ++i) { h ^= b[i]; h *= 1099511628211ull; }
    memcpy(b + n - 8, &h, 8);
}

}  // extern "C"
