/*
 * foxhunt-dp: data-parallel training (SPEC §9) of the default config (SPEC §1's sizes: B = 16384
 * rows per rank, O = 124, G = 4, 4 branches of 8 sub-actions; a few learning settings of an
 * online goal task, in main()) on W GPUs, one process per GPU:
 *
 *   W=2; id=/tmp/foxhunt-nccl.$$; for r in $(seq 0 $((W-1))); do
 *     build/examples/foxhunt-dp --world $W --rank $r --id $id & done; wait
 *
 * Rendezvous: rank 0 writes an ncclUniqueId to the file --id (a fresh path per launch: $$ is
 * the launching shell's pid), the other ranks wait for it; then every rank joins the
 * communicator (ncclCommInitRank on GPU --device, default the rank) and passes it to its
 * pipeline. foxhunt sums the gradients and batch statistics across the ranks inside each step,
 * so all ranks hold the same agent; each rank acts in its own environments and keeps its own
 * replay, so each step trains on W·B transitions.
 *
 * The task: reach a goal in one move. The state is a point p in [-1, 1]^4 and the goal g is up
 * to 0.2 away in each coordinate; branch b moves coordinate b by one of 8 steps (-0.2 .. +0.2).
 * The observation is p and 15 harmonics sin/cos(pi f p_b) of each coordinate (4 + 120 = 124
 * features), the achieved goal is p after the move, the reward 0 within her_epsilon of g (0.15
 * here) and -1 elsewhere; an episode is one move (EPISODE; reaching g is terminal, the limit is
 * not). A random move succeeds about once in 20; HER (SPEC §5.1) relabels 80 % of the sampled
 * transitions with a later achieved goal of their episode (here the one the move reached),
 * which makes them successes to learn from. (Longer episodes work too, but their bootstrapped
 * values take thousands of steps to turn into a policy: too slow for a demonstration; a CPU run
 * at B = 256 went from 6 % to 21 % success in 800 steps with one-move episodes.)
 *
 * Each rank prints its success rate (episodes that reached their goal, over the last report
 * interval, acting epsilon-greedily) and, at the end, a checksum of its parameters: equal on
 * every rank. --world 1 runs one pipeline without a communicator (--backend cpu too: the
 * smoke test runs it so on machines without a GPU).
 */
#define _POSIX_C_SOURCE 200809L

#include <foxhunt.h>

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { NB = 4, NA = 8, G = 4, O = 124, HARMONICS = 15, EPISODE = 1, RING_ROWS = 1024 };
static const float kPi = 3.14159265f;
/* The success radius (her_epsilon): SPEC §1's 0.05 is a target a random move in four
 * dimensions almost never hits. */
static const float kRadius = 0.15f;
static const float kMoves[NA] = {-0.2f, -0.1f, -0.05f, -0.02f, 0.02f, 0.05f, 0.1f, 0.2f};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "foxhunt-dp: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}
static void check(fh_status s, const char *what) {
    if (s != FH_OK) die("%s: %s", what, fh_last_error_message());
}
static void nccl(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) die("%s: %s", what, ncclGetErrorString(r));
}
static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) die("out of memory");
    return p;
}
static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* splitmix64 */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)); }

/* obs = [p, sin(pi f p_b), cos(pi f p_b) for f = 1..15, b = 0..3]; the harmonics by the
 * angle-addition recurrence (two products per term, not a sin and a cos per term: sampling a
 * batch makes 2 B observations per step). */
static void observe(const float *p, float *obs) {
    memcpy(obs, p, G * sizeof(float));
    for (int b = 0; b < G; ++b) {
        const float s1 = sinf(kPi * p[b]), c1 = cosf(kPi * p[b]);
        float s = s1, c = c1;
        for (int f = 1; f <= HARMONICS; ++f) {
            obs[G + 8 * (f - 1) + 2 * b] = s;
            obs[G + 8 * (f - 1) + 2 * b + 1] = c;
            const float sn = s * c1 + c * s1;
            c = c * c1 - s * s1;
            s = sn;
        }
    }
}

/* The replay: RING_ROWS rows of E transitions, row n in slot n % RING_ROWS; end[slot][e] is
 * the global row of the last transition of that transition's episode, or -1 while it runs. */
typedef struct {
    int E;
    long rows;                            /* rows inserted */
    float *p, *p_next, *goal;             /* [RING_ROWS, E, 4] */
    int32_t *action;                      /* [RING_ROWS, E, NB] */
    float *reward;
    uint8_t *done;
    long *end;
    long *start;                          /* [E] first row of each env's open episode */
} replay;

static void replay_init(replay *r, int E) {
    const size_t n = (size_t)RING_ROWS * E;
    r->E = E;
    r->rows = 0;
    r->p = xcalloc(n * G, 4);
    r->p_next = xcalloc(n * G, 4);
    r->goal = xcalloc(n * G, 4);
    r->action = xcalloc(n * NB, 4);
    r->reward = xcalloc(n, 4);
    r->done = xcalloc(n, 1);
    r->end = xcalloc(n, sizeof(long));
    r->start = xcalloc((size_t)E, sizeof(long));
}

/* Environments in lockstep: E of them, acting from one fh_pipeline_act call. */
typedef struct {
    int E;
    float *p, *goal, *obs;
    int32_t *action;
    int *t;
    uint64_t rng;
    long episodes, successes;
} envs;

static void env_reset(envs *v, int e) {
    for (int b = 0; b < G; ++b) {
        const float p = 2.0f * uniform(&v->rng) - 1.0f;
        v->p[e * G + b] = p;
        v->goal[e * G + b] = fminf(1.0f, fmaxf(-1.0f, p + 0.4f * uniform(&v->rng) - 0.2f));
    }
    v->t[e] = 0;
}

/* Applies the actions, appends the row of transitions to the replay, resets finished envs. */
static void env_step(envs *v, replay *r, float radius) {
    const long n = r->rows, slot = n % RING_ROWS;
    for (int e = 0; e < v->E; ++e) {
        const size_t i = (size_t)slot * v->E + e;
        float *p = v->p + e * G, next[G];
        double d2 = 0;
        for (int b = 0; b < G; ++b) {
            next[b] = fminf(1.0f, fmaxf(-1.0f, p[b] + kMoves[v->action[e * NB + b]]));
            d2 += (double)(next[b] - v->goal[e * G + b]) * (next[b] - v->goal[e * G + b]);
        }
        const int reached = sqrt(d2) <= radius, timeout = ++v->t[e] >= EPISODE;
        memcpy(r->p + i * G, p, sizeof next);
        memcpy(r->p_next + i * G, next, sizeof next);
        memcpy(r->goal + i * G, v->goal + e * G, sizeof next);
        memcpy(r->action + i * NB, v->action + e * NB, NB * sizeof(int32_t));
        r->reward[i] = reached ? 0.0f : -1.0f;
        r->done[i] = (uint8_t)reached;
        r->end[i] = -1;
        if (reached || timeout) {
            /* close the episode: rows start .. n of env e (the ring keeps the newest only) */
            for (long k = r->start[e] > n - RING_ROWS + 1 ? r->start[e] : n - RING_ROWS + 1;
                 k <= n; ++k)
                r->end[(size_t)(k % RING_ROWS) * v->E + e] = n;
            r->start[e] = n + 1;
            v->episodes++;
            v->successes += reached;
            env_reset(v, e);
        } else {
            memcpy(p, next, sizeof next);
        }
    }
    r->rows++;
}

/* B transitions drawn uniformly from the valid rows, HER goals from the same episode's future. */
typedef struct {
    float *obs, *next_obs, *goal, *nag, *her_goal, *reward;
    int32_t *action;
    uint8_t *done;
    fh_batch b;
} batch;

static void sample(const replay *r, batch *out, uint32_t B, uint64_t *rng) {
    const long valid = r->rows < RING_ROWS ? r->rows : RING_ROWS, oldest = r->rows - valid;
    for (uint32_t i = 0; i < B; ++i) {
        const long n = oldest + (long)(rng_next(rng) % (uint64_t)valid);
        const int e = (int)(rng_next(rng) % (uint64_t)r->E);
        const size_t at = (size_t)(n % RING_ROWS) * r->E + e;
        const long last = r->end[at] >= 0 ? r->end[at] : r->rows - 1;
        const long fut = n + (long)(rng_next(rng) % (uint64_t)(last - n + 1));
        const size_t fat = (size_t)(fut % RING_ROWS) * r->E + e;
        observe(r->p + at * G, out->obs + (size_t)i * O);
        observe(r->p_next + at * G, out->next_obs + (size_t)i * O);
        memcpy(out->goal + (size_t)i * G, r->goal + at * G, G * sizeof(float));
        memcpy(out->nag + (size_t)i * G, r->p_next + at * G, G * sizeof(float));
        memcpy(out->her_goal + (size_t)i * G, r->p_next + fat * G, G * sizeof(float));
        memcpy(out->action + (size_t)i * NB, r->action + at * NB, NB * sizeof(int32_t));
        out->reward[i] = r->reward[at];
        out->done[i] = r->done[at];
    }
}

static void batch_init(batch *x, uint32_t B) {
    x->obs = xcalloc((size_t)B * O, 4);
    x->next_obs = xcalloc((size_t)B * O, 4);
    x->goal = xcalloc((size_t)B * G, 4);
    x->nag = xcalloc((size_t)B * G, 4);
    x->her_goal = xcalloc((size_t)B * G, 4);
    x->reward = xcalloc(B, 4);
    x->action = xcalloc((size_t)B * NB, 4);
    x->done = xcalloc(B, 1);
    fh_batch b = FH_BATCH_INIT;
    b.batch_size = B;
    b.obs = x->obs; b.next_obs = x->next_obs; b.goal = x->goal; b.next_achieved_goal = x->nag;
    b.her_goal = x->her_goal; b.reward = x->reward; b.action = x->action; b.done = x->done;
    x->b = b;
}

/* Rank 0 publishes the id (written beside the path, then renamed: never seen half-written). */
static ncclUniqueId rendezvous(const char *path, int rank) {
    ncclUniqueId id;
    if (rank == 0) {
        nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0)
            die("cannot write the NCCL id to %s", path);
        return id;
    }
    for (double t0 = seconds(); seconds() - t0 < 120;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            const size_t got = fread(&id, sizeof id, 1, f);
            fclose(f);
            if (got == 1) return id;
        }
        const struct timespec wait = {0, 50000000};
        nanosleep(&wait, NULL);
    }
    die("no NCCL id appeared in %s within 120 s (is rank 0 running?)", path);
}

int main(int argc, char **argv) {
    int world = 0, rank = -1, device = -1, envs_n = 1024, report = 100;
    long steps = 2000;
    uint32_t B = 16384;
    uint64_t seed = 0;
    const char *id_path = NULL;
    int cpu = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--world")) world = atoi(v);
        else if (!strcmp(a, "--rank")) rank = atoi(v);
        else if (!strcmp(a, "--id")) id_path = v;
        else if (!strcmp(a, "--device")) device = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atol(v);
        else if (!strcmp(a, "--batch")) B = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--envs")) envs_n = atoi(v);
        else if (!strcmp(a, "--report")) report = atoi(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--backend")) cpu = !strcmp(v, "cpu");
        else die("unknown option %s", a);
    }
    if (world < 1 || rank < 0 || rank >= world || (world > 1 && (!id_path || cpu)) ||
        steps < 1 || envs_n < 1 || report < 1 || (argc - 1) % 2)
        die("usage: foxhunt-dp --world W --rank R --id FILE [--device D] [--steps N] "
            "[--batch B] [--envs E] [--report N] [--seed S]\n"
            "       foxhunt-dp --world 1 --rank 0 [--backend cpu|cuda] [...]   (no communicator)");
    if (device < 0) device = rank;
    if (!cpu && cudaSetDevice(device) != cudaSuccess) die("cannot use CUDA device %d", device);

    ncclComm_t comm = NULL;  /* one rank needs none */
    if (world > 1) {
        ncclUniqueId id = rendezvous(id_path, rank);
        nccl(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
        if (rank == 0) remove(id_path);  /* every rank has read it: the init was collective */
    }

    fh_config c;
    check(fh_config_init(&c), "fh_config_init");
    c.backend = cpu ? FH_BACKEND_CPU : FH_BACKEND_CUDA;
    c.device = device;
    c.batch_size = B;
    c.seed = seed;  /* the same on every rank: one agent */
    /* An online goal task, set up as the HER example (bindings/rust/examples/her_bitflip.rs):
     * no conservative penalty (CQL holds a policy near its data, for offline data), one
     * regime, lr_q 1e-3, Polyak rate 0.05; gamma 0.9 and the success radius above. Sizes and
     * B are SPEC §1's. */
    c.cql_alpha = 0.0f;
    c.num_regimes = 1;
    c.gamma = 0.9f;
    c.lr_q = 1e-3f;
    c.ema_tau = 0.05f;
    c.her_epsilon = kRadius;
    c.nccl_comm = comm;
    fh_pipeline *p = NULL;
    check(fh_pipeline_create(&c, &p), "fh_pipeline_create");  /* collective */

    envs v = {envs_n, xcalloc((size_t)envs_n * G, 4), xcalloc((size_t)envs_n * G, 4),
              xcalloc((size_t)envs_n * O, 4), xcalloc((size_t)envs_n * NB, 4),
              xcalloc((size_t)envs_n, sizeof(int)), 1000003ull * (seed + 1) + (uint64_t)rank, 0,
              0};
    for (int e = 0; e < envs_n; ++e) env_reset(&v, e);
    replay r;
    replay_init(&r, envs_n);
    batch bt;
    batch_init(&bt, B);
    uint64_t sample_rng = 7919ull * (seed + 1) + (uint64_t)rank;

    /* Random actions (epsilon 1) until the replay holds a batch, then a step per row of
     * transitions, epsilon falling linearly to 0.1 at 55 % of the steps. */
    const double t0 = seconds();
    long episodes0 = 0, successes0 = 0;
    for (long k = -(long)(B / (uint32_t)envs_n + 1); k < steps; ++k) {
        const float eps = k < 0 ? 1.0f : fmaxf(0.1f, 1.0f - 1.8f * (float)k / (float)steps);
        for (int e = 0; e < envs_n; ++e) observe(v.p + e * G, v.obs + (size_t)e * O);
        check(fh_pipeline_act(p, v.obs, v.goal, (uint32_t)envs_n, eps, v.action, NULL),
              "fh_pipeline_act");
        env_step(&v, &r, c.her_epsilon);
        if (k < 0) continue;
        sample(&r, &bt, B, &sample_rng);
        check(fh_pipeline_upload(p, &bt.b), "fh_pipeline_upload");
        check(fh_pipeline_step(p), "fh_pipeline_step");  /* collective, on the GPU */
        if ((k + 1) % report == 0 || k + 1 == steps) {
            fh_metrics m;
            m.struct_size = sizeof m;
            check(fh_pipeline_metrics(p, &m), "fh_pipeline_metrics");
            const long de = v.episodes - episodes0, ds = v.successes - successes0;
            printf("rank %d step %6ld  td_loss %.4f  q_mean %+.3f  epsilon %.2f  success %.1f %% "
                   "of %ld episodes\n", rank, k + 1, m.td_loss, m.q_mean, eps,
                   de ? 100.0 * ds / de : 0.0, de);
            fflush(stdout);
            episodes0 = v.episodes;
            successes0 = v.successes;
        }
    }
    check(fh_pipeline_sync(p), "fh_pipeline_sync");
    const double dt = seconds() - t0;

    /* One agent: every rank's parameters are the same bits (FNV-1a of q.W1). */
    fh_tensor_info info;
    info.struct_size = sizeof info;
    check(fh_pipeline_find_tensor(p, "q.W1", &info), "fh_pipeline_find_tensor");
    const size_t n = (size_t)info.rows * info.cols;
    float *w = xcalloc(n, 4);
    check(fh_pipeline_read_tensor(p, "q.W1", w, n), "fh_pipeline_read_tensor");
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < 4 * n; ++k) h = (h ^ ((const unsigned char *)w)[k]) * 1099511628211ull;
    printf("rank %d: %ld steps of %u rows in %.1f s (%.0f rows/s on this rank, %.0f in all), "
           "q.W1 checksum %016llx\n", rank, steps, B, dt, (double)steps * B / dt,
           (double)steps * B * world / dt, (unsigned long long)h);
    fh_pipeline_destroy(p);  /* before its communicator */
    if (comm) nccl(ncclCommDestroy(comm), "ncclCommDestroy");
    return 0;
}
