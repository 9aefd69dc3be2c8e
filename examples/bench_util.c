/* Helpers of the benchmarks (bench_util.h). */
#define _GNU_SOURCE  /* program_invocation_short_name */

#include "bench_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

const bench_mode bench_modes[NUM_BENCH_MODES] = {
    {"multi-tf32", FH_EXEC_MULTI_STREAM, FH_MATH_TF32},
    {"single-tf32", FH_EXEC_SINGLE_STREAM, FH_MATH_TF32},
    {"multi-strict", FH_EXEC_MULTI_STREAM, FH_MATH_STRICT},
    {"single-strict", FH_EXEC_SINGLE_STREAM, FH_MATH_STRICT},
    {"multi-bf16", FH_EXEC_MULTI_STREAM, FH_MATH_BF16},
    {"single-bf16", FH_EXEC_SINGLE_STREAM, FH_MATH_BF16},
};

const bench_mode *bench_mode_named(const char *name) {
    for (int k = 0; k < NUM_BENCH_MODES; ++k)
        if (!strcasecmp(name, bench_modes[k].name)) return &bench_modes[k];
    return NULL;
}

void bench_unknown_mode(const char *name) {
    fprintf(stderr, "%s: unknown mode '%s' (modes:", program_invocation_short_name, name);
    for (int k = 0; k < NUM_BENCH_MODES; ++k) fprintf(stderr, " %s", bench_modes[k].name);
    fprintf(stderr, ")\n");
}

void bench_die(const char *what, fh_status s) {
    fprintf(stderr, "%s: %s failed (status %d): %s\n", program_invocation_short_name, what,
            (int)s, fh_last_error_message());
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

void column_medians(const double *v, int rows, int cols, double *out) {
    double *col = xmalloc(sizeof(double) * (size_t)rows);
    for (int c = 0; c < cols; ++c) {
        for (int r = 0; r < rows; ++r) col[r] = v[(size_t)r * cols + c];
        out[c] = median(col, rows);
    }
    free(col);
}

/* xorshift64*: a valid random batch (SPEC §2) */
static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { return (float)((urand() + urand() + urand() + urand() - 2.0) * 1.7320508); }

long arg_long(const char *flag, const char *text, long lo, long hi) {
    char *end = NULL;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "%s: %s wants an integer in [%ld, %ld], got '%s'\n",
                program_invocation_short_name, flag, lo, hi, text);
        exit(2);
    }
    return v;
}

int arg_list(const char *flag, const char *text, char **items, int max) {
    char *copy = strdup(text);
    int n = 0;
    for (char *p = copy, *next; p; p = next) {
        next = strchr(p, ',');
        if (next) *next++ = '\0';
        if (!*p || n == max) {
            fprintf(stderr, "%s: %s wants 1 to %d comma-separated values, got '%s'\n",
                    program_invocation_short_name, flag, max, text);
            exit(2);
        }
        items[n++] = p;
    }
    return n;
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "%s: out of memory\n", program_invocation_short_name);
        exit(1);
    }
    return p;
}

void make_rows(host_batch *h, const fh_config *c, size_t n) {
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
    h->b = (fh_batch)FH_BATCH_INIT;
}

void make_batch(host_batch *h, const fh_config *c) {
    const size_t G = c->goal_dim;
    make_rows(h, c, c->batch_size);
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

FILE *open_output(const char *path) {
    mkdirs_for(path);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s\n", program_invocation_short_name, path,
                strerror(errno));
        exit(1);
    }
    return f;
}

void mkdirs_for(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; ++p)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return;
            *p = '/';
        }
}

