/* foxhunt-bench: random data and the ways of feeding the step (bench.h). */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef FOXHUNT_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

void die(const char *what, fh_status s) {
    fprintf(stderr, "foxhunt-bench: %s failed (status %d): %s\n", what, (int)s,
            fh_last_error_message());
    exit(1);
}

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "foxhunt-bench: out of memory\n");
        exit(1);
    }
    return p;
}

/* xorshift64*: valid random batches and rows (SPEC §2, §2.1) */
static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { return (float)((urand() + urand() + urand() + urand() - 2.0) * 1.7320508); }

/* n transitions of config c into h's arrays (allocated here). */
static void fill(host_batch *h, const fh_config *c, size_t n) {
    const size_t O = c->obs_dim, G = c->goal_dim, NB = c->num_branches;
    h->obs = xmalloc(n * O * 4);
    h->next_obs = xmalloc(n * O * 4);
    h->goal = xmalloc(n * G * 4);
    h->nag = xmalloc(n * G * 4);
    h->her_goal = xmalloc(n * G * 4);
    h->reward = xmalloc(n * 4);
    h->action = xmalloc(n * NB * 4);
    h->regime = xmalloc(n * 4);
    h->done = xmalloc(n);
    for (size_t i = 0; i < n * O; ++i) h->obs[i] = nrand();
    for (size_t i = 0; i < n * O; ++i) h->next_obs[i] = 0.9f * h->obs[i] + 0.3f * nrand();
    for (size_t i = 0; i < n * G; ++i) {
        h->goal[i] = nrand();
        h->nag[i] = nrand();
        h->her_goal[i] = (i / G) % 2 ? h->nag[i] + 0.05f * nrand() : nrand();
    }
    for (size_t i = 0; i < n; ++i) {
        h->reward[i] = nrand();
        h->regime[i] = (int32_t)(urand() * c->num_regimes);
        h->done[i] = urand() < 0.1;
    }
    for (size_t i = 0; i < n * NB; ++i) h->action[i] = (int32_t)(urand() * c->actions_per_branch);
}

void make_batch(host_batch *h, const fh_config *c) {
    const size_t G = c->goal_dim;
    fill(h, c, c->batch_size);
    fh_batch b = FH_BATCH_INIT;
    b.batch_size = c->batch_size;
    b.obs = h->obs;
    b.goal = G ? h->goal : NULL;
    b.action = h->action;
    b.reward = h->reward;
    b.done = h->done;
    b.next_obs = h->next_obs;
    b.next_achieved_goal = G ? h->nag : NULL;
    b.her_goal = G ? h->her_goal : NULL;
    b.regime = h->regime;
    h->b = b;
}

void free_batch(host_batch *h) {
    free(h->obs); free(h->next_obs); free(h->goal); free(h->nag); free(h->her_goal);
    free(h->reward); free(h->action); free(h->regime); free(h->done);
}

/* Wall ms per (upload + step) over `steps` alternating uploads of a and b; *upload_ms = the
 * median host time of one upload call. */
static double fed(fh_pipeline *p, const fh_batch *a, const fh_batch *b, int steps,
                  double *upload_ms) {
    fh_metrics m;
    m.struct_size = sizeof m;
    CHECK(fh_pipeline_sync(p));
    double *up = xmalloc(sizeof(double) * (size_t)steps);
    const double f0 = now_ms();
    for (int k = 0; k < steps; ++k) {
        const double u0 = now_ms();
        CHECK(fh_pipeline_upload(p, k % 2 ? a : b));
        up[k] = now_ms() - u0;
        CHECK(fh_pipeline_step(p));
    }
    CHECK(fh_pipeline_metrics(p, &m));
    const double ms = (now_ms() - f0) / steps;
    *upload_ms = median(up, steps);
    free(up);
    return ms;
}

#ifdef FOXHUNT_BENCH_CUDA
/* A device copy of a host batch: one allocation, the arrays 256-byte aligned inside it. */
typedef struct {
    void *mem;
    fh_batch b;
} device_batch;

static void *to_device(char **at, const void *src, size_t bytes) {
    void *dst = *at;
    if (bytes && cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "foxhunt-bench: cudaMemcpy to the device batch failed\n");
        exit(1);
    }
    *at += (bytes + 255) / 256 * 256;
    return dst;
}

static void device_batch_of(device_batch *d, const host_batch *h, const fh_config *c) {
    const size_t B = c->batch_size, O = c->obs_dim, G = c->goal_dim, NB = c->num_branches;
    const size_t total = 2 * B * O * 4 + 3 * B * G * 4 + B * NB * 4 + 3 * B * 4 + B + 9 * 256;
    if (cudaMalloc(&d->mem, total) != cudaSuccess) {
        fprintf(stderr, "foxhunt-bench: cudaMalloc of %zu bytes failed\n", total);
        exit(1);
    }
    char *at = d->mem;
    d->b = h->b;
    d->b.memory = FH_MEMORY_DEVICE;
    d->b.obs = to_device(&at, h->obs, B * O * 4);
    d->b.next_obs = to_device(&at, h->next_obs, B * O * 4);
    if (G) {
        d->b.goal = to_device(&at, h->goal, B * G * 4);
        d->b.next_achieved_goal = to_device(&at, h->nag, B * G * 4);
        d->b.her_goal = to_device(&at, h->her_goal, B * G * 4);
    }
    d->b.action = to_device(&at, h->action, B * NB * 4);
    d->b.reward = to_device(&at, h->reward, B * 4);
    d->b.regime = to_device(&at, h->regime, B * 4);
    d->b.done = to_device(&at, h->done, B);
}
#endif

void measure_fed(result *r, fh_pipeline *p, const fh_config *c, const host_batch *a,
                 const host_batch *b, int steps) {
    r->fed_ms = fed(p, &a->b, &b->b, steps, &r->upload_ms);
#ifdef FOXHUNT_BENCH_CUDA
    device_batch da, db;
    device_batch_of(&da, a, c);
    device_batch_of(&db, b, c);
    r->dfed_ms = fed(p, &da.b, &db.b, steps, &r->dupload_ms);
    CHECK(fh_pipeline_sync(p));  /* the device arrays are read: free them */
    cudaFree(da.mem);
    cudaFree(db.mem);
#else
    (void)c;
#endif
}

void measure_replay(result *r, fh_config c, const replay_opts *o, int steps, int warmup) {
    c.replay_capacity = o->capacity;
    c.replay_envs = o->envs;
    fh_pipeline *p = NULL;
    CHECK(fh_pipeline_create(&c, &p));
    /* Four sets of rows, inserted in turn, so that the source is not one cache-warm array. */
    enum { SETS = 4 };
    host_batch rows[SETS];
    fh_replay_rows v[SETS];
    const size_t n = (size_t)o->insert_rows * o->envs;
    for (int k = 0; k < SETS; ++k) {
        fill(&rows[k], &c, n);
        for (size_t i = 0; i < n; ++i) rows[k].done[i] = 0;  /* episodes end by time limit */
        fh_replay_rows x = FH_REPLAY_ROWS_INIT;
        x.num_rows = o->insert_rows;
        x.num_envs = o->envs;
        x.obs = rows[k].obs;
        x.goal = c.goal_dim ? rows[k].goal : NULL;
        x.action = rows[k].action;
        x.reward = rows[k].reward;
        x.done = rows[k].done;
        x.next_obs = rows[k].next_obs;
        x.next_achieved_goal = c.goal_dim ? rows[k].nag : NULL;
        x.regime = rows[k].regime;
        x.episode_end = rows[k].done;  /* all 0: one long episode per environment */
        v[k] = x;
    }
    const int inserts = (int)((o->capacity + o->insert_rows - 1) / o->insert_rows);
    const double t0 = now_ms();
    for (int k = 0; k < inserts; ++k) CHECK(fh_pipeline_insert(p, &v[k % SETS]));
    CHECK(fh_pipeline_sync(p));
    r->insert_tps = (double)inserts * n / ((now_ms() - t0) / 1e3);

    fh_metrics m;
    m.struct_size = sizeof m;
    if (warmup > 0) CHECK(fh_pipeline_train(p, (uint32_t)warmup));
    CHECK(fh_pipeline_metrics(p, &m));
    const double t1 = now_ms();
    CHECK(fh_pipeline_train(p, (uint32_t)steps));
    CHECK(fh_pipeline_metrics(p, &m));
    r->train_ms = (now_ms() - t1) / steps;
    fh_pipeline_destroy(p);
    for (int k = 0; k < SETS; ++k) free_batch(&rows[k]);
}
