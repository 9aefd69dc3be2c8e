/* Training one seed (see train.h).
 *
 * The loop acts one update behind the learner. Iteration k:
 *   1. act: the environments choose actions with the parameters after k - 1 steps;
 *      fh_pipeline_act waits for step k - 1, launched in iteration k - 1;
 *   2. fh_pipeline_train launches step k, which draws its batch from the pipeline's replay;
 *   3. the environments advance and their row of transitions is inserted into the replay.
 * The library keeps the calls' order (an insert lands after the sampling of every step launched
 * before it), so step k samples the rows of iterations < k (and of the warm-up) on every
 * backend. On CUDA, step 3 runs on the host while step k runs on the GPU. The price: a batch
 * never holds the transitions of the iteration whose act ran just before its step, i.e. the
 * newest experience reaches the learner one step later than in a serial loop; with thousands of
 * transitions stored and uniform sampling that changes little. Acting itself uses the newest
 * parameters. On the CPU the step is synchronous and the order only fixes which transitions a
 * batch can hold. */
#define _POSIX_C_SOURCE 200809L

#include "train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "evaluate.h"
#include "feed.h"
#include "options.h"

#define REWARD_SCALE 100.0   /* real-unit reward -> O(1) learning target */
#define EPS_START 1.0f
#define EPS_END 0.05f
#define STATE_MAGIC "FHTRNST2"
#define PROGRESS_SECONDS 5.0

/* ------------------------------------------------------------------------------------------ */
/* Parallel copies of the training market, acted on in one fh_pipeline_act call. They start at
 * spread-out days so that one act call's transitions are not all from the same week. */

typedef struct envs {
    int n;
    int32_t *day;
    int8_t *pos;        /* [n, 4] */
    float *obs;         /* [n, OBS_DIM] scratch */
    int32_t *action;    /* [n, 4] of the last act */
    transition *row;    /* [n] scratch */
} envs;

static void envs_init(envs *e, int n, const market *m)
{
    e->n = n;
    e->day = xcalloc((size_t)n, sizeof *e->day);
    e->pos = xcalloc((size_t)n * NUM_INDICES, sizeof *e->pos);
    e->obs = xcalloc((size_t)n * OBS_DIM, sizeof *e->obs);
    e->action = xcalloc((size_t)n * NUM_INDICES, sizeof *e->action);
    e->row = xcalloc((size_t)n, sizeof *e->row);
    period train = market_period(m, PERIOD_TRAIN);
    for (int k = 0; k < n; ++k)
        e->day[k] = train.from + (int)((long)(train.to - train.from + 1) * k / n);
}

static void envs_free(envs *e)
{
    free(e->day);
    free(e->pos);
    free(e->obs);
    free(e->action);
    free(e->row);
}

static void envs_act(envs *e, const market *m, fh_pipeline *p, float epsilon)
{
    for (int k = 0; k < e->n; ++k)
        build_obs(m, e->day[k], e->pos + k * NUM_INDICES, e->obs + (size_t)k * OBS_DIM);
    check(fh_pipeline_act(p, e->obs, NULL, (uint32_t)e->n, epsilon, e->action, NULL),
          "fh_pipeline_act");
}

/* Apply the last actions: one transition per environment into e->row. The episode is the
 * training period; its last transition is terminal (done = 1), because bootstrapping past it
 * would need the first validation day. There is no time limit, so an episode ends exactly when
 * it terminates. The environment then starts over, flat. */
static void envs_advance(envs *e, const market *m)
{
    int last = market_period(m, PERIOD_TRAIN).to;
    for (int k = 0; k < e->n; ++k) {
        transition *t = &e->row[k];
        int8_t *pos = e->pos + k * NUM_INDICES;
        int8_t next_pos[NUM_INDICES];
        memset(t, 0, sizeof *t);
        t->day = e->day[k];
        memcpy(t->action, e->action + k * NUM_INDICES, sizeof t->action);
        memcpy(t->pos, pos, sizeof t->pos);
        actions_to_positions(t->action, next_pos);
        t->reward = (float)(REWARD_SCALE * sleeves_return(m, t->day, pos, next_pos, NULL));
        t->done = (uint8_t)(t->day == last);
        t->episode_end = t->done;
        if (t->done) {
            e->day[k] = market_period(m, PERIOD_TRAIN).from;
            memset(pos, 0, NUM_INDICES);
        } else {
            e->day[k] = t->day + 1;
            memcpy(pos, next_pos, NUM_INDICES);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The state file: bookkeeping and curve, then the environments. The replay is in latest.ckpt. */

void seed_path(const seed_run *r, const char *name, char *buf, size_t size)
{
    if ((size_t)snprintf(buf, size, "%s/%s", r->dir, name) >= size)
        die("path too long: %s/%s", r->dir, name);
}

void seed_run_init(seed_run *r, const char *out_dir, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->seed = seed;
    if ((size_t)snprintf(r->dir, sizeof r->dir, "%s/seed-%llu", out_dir,
                         (unsigned long long)seed) >= sizeof r->dir)
        die("--out path too long: %s", out_dir);
}

void seed_run_free(seed_run *r)
{
    free(r->curve);
    r->curve = NULL;
}

static void append_row(seed_run *r, const curve_row *row)
{
    if (r->curve_len == r->curve_cap) {
        r->curve_cap = r->curve_cap ? 2 * r->curve_cap : 32;
        r->curve = realloc(r->curve, (size_t)r->curve_cap * sizeof *r->curve);
        if (!r->curve)
            die("out of memory (learning curve)");
    }
    r->curve[r->curve_len++] = *row;
}

typedef struct state_head {
    char magic[8];
    uint32_t sizes[2];   /* of curve_row, fh_metrics: a file of another build */
    uint64_t seed;
    int64_t step, best_step, checks_since_best;
    int32_t finished, stopped_early, curve_len, num_envs;
    double best_sharpe;
} state_head;

static void write_state(const seed_run *r, const envs *e)
{
    char path[4200], tmp[4300];
    seed_path(r, "trainer.state", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "wb");
    if (!out)
        die("cannot write %s: %s", tmp, strerror(errno));
    state_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.sizes[0] = sizeof(curve_row);
    h.sizes[1] = sizeof(fh_metrics);
    h.seed = r->seed;
    h.step = r->step;
    h.best_step = r->best_step;
    h.checks_since_best = r->checks_since_best;
    h.finished = r->finished;
    h.stopped_early = r->stopped_early;
    h.curve_len = r->curve_len;
    h.num_envs = e->n;
    h.best_sharpe = r->best_sharpe;
    fwrite(&h, sizeof h, 1, out);
    fwrite(r->curve, sizeof *r->curve, (size_t)r->curve_len, out);
    fwrite(e->day, sizeof *e->day, (size_t)e->n, out);
    fwrite(e->pos, 1, (size_t)e->n * NUM_INDICES, out);
    if (ferror(out) | fclose(out) || rename(tmp, path) != 0)
        die("cannot write %s: %s", path, strerror(errno));
}

/* Reads the bookkeeping and the curve; returns the open file positioned at the environments,
 * or NULL when there is no state file. */
static FILE *read_head(seed_run *r, const char *path, int *num_envs)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return NULL;
    state_head h;
    if (fread(&h, sizeof h, 1, in) != 1 || memcmp(h.magic, STATE_MAGIC, 8) != 0)
        die("%s is not a state file of this version of the trainer", path);
    if (h.sizes[0] != sizeof(curve_row) || h.sizes[1] != sizeof(fh_metrics) ||
        h.seed != r->seed || h.curve_len < 0)
        die("%s was written by another build of the trainer or for another seed", path);
    r->step = (long)h.step;
    r->best_step = (long)h.best_step;
    r->checks_since_best = (long)h.checks_since_best;
    r->finished = h.finished;
    r->stopped_early = h.stopped_early;
    r->best_sharpe = h.best_sharpe;
    r->curve_len = 0;
    for (int i = 0; i < h.curve_len; ++i) {
        curve_row row;
        if (fread(&row, sizeof row, 1, in) != 1)
            die("%s ends early (in the learning curve)", path);
        append_row(r, &row);
    }
    *num_envs = h.num_envs;
    return in;
}

int seed_run_load(seed_run *r)
{
    char path[4200];
    int num_envs = 0;
    seed_path(r, "trainer.state", path, sizeof path);
    FILE *in = read_head(r, path, &num_envs);
    if (!in)
        return 0;
    fclose(in);
    return 1;
}

static void read_state(seed_run *r, envs *e)
{
    char path[4200];
    int num_envs = 0;
    seed_path(r, "trainer.state", path, sizeof path);
    FILE *in = read_head(r, path, &num_envs);
    if (!in)
        die("cannot open %s: %s", path, strerror(errno));
    if (num_envs != e->n)
        die("%s has %d environments, this run %d", path, num_envs, e->n);
    if (fread(e->day, sizeof *e->day, (size_t)e->n, in) != (size_t)e->n ||
        fread(e->pos, 1, (size_t)e->n * NUM_INDICES, in) != (size_t)e->n * NUM_INDICES)
        die("%s ends early (in the environments)", path);
    fclose(in);
}

/* ------------------------------------------------------------------------------------------ */
/* Checks: validation, early stopping, checkpoints. */

static float epsilon_at(long step, long steps)
{
    /* Linear decay over the first half, then a floor that keeps some exploration. */
    double frac = (double)step / (0.5 * (double)steps);
    if (frac >= 1.0)
        return EPS_END;
    return (float)(EPS_START + (EPS_END - EPS_START) * frac);
}

/* A NaN here is a library bug or a diverged run: either way the evaluation would be garbage. */
static fh_metrics finite_metrics(fh_pipeline *p)
{
    fh_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    check(fh_pipeline_metrics(p, &m), "fh_pipeline_metrics");
    const float v[] = {m.td_loss, m.q_mean, m.grad_norm, m.iql_loss_hi, m.iql_loss_lo,
                       m.iqn_loss, m.attn_loss, m.cql_loss, m.conf_loss};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i)
        if (!isfinite(v[i]))
            die("non-finite metric #%zu (%g) after step %llu", i, (double)v[i],
                (unsigned long long)m.step);
    return m;
}

/* flags: FH_SAVE_REPLAY for what --resume continues from, 0 for a checkpoint to evaluate. */
static void save_checkpoint(fh_pipeline *p, const seed_run *r, const char *name, uint32_t flags)
{
    char path[4200];
    seed_path(r, name, path, sizeof path);
    check(fh_pipeline_save_ex(p, path, flags), "fh_pipeline_save_ex");
}

/* What --resume continues from: the pipeline with its replay, then the trainer's state. The
 * checkpoint first: on --resume its step must match the state's (checked). */
static void save_resume_point(fh_pipeline *p, const seed_run *r, const envs *e)
{
    save_checkpoint(p, r, "latest.ckpt", FH_SAVE_REPLAY);
    write_state(r, e);
}

static void format_duration(double s, char *buf, size_t size)
{
    long t = s > 0.0 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
}

static void print_progress(const seed_run *r, int index, const run_plan *plan,
                           const progress *pg, const curve_row *row)
{
    double elapsed = now_seconds() - pg->t_start;
    double rate = elapsed > 0.0 ? (double)pg->steps_done / elapsed : 0.0;
    char eta[32];
    format_duration(rate > 0.0 ? (double)(pg->steps_total - pg->steps_done) / rate : 0.0, eta,
                    sizeof eta);
    /* The seed as the report and the seed-N folders name it, then how many of the run's seeds. */
    printf("seed %llu (%d/%d) step %5ld/%ld %3.0f %%  eps %.2f  td_loss %6.3f  Sharpe: train "
           "%+5.2f, valid %+5.2f (best %+5.2f @ %ld)  %4.1f steps/s  all %3.0f %%, ETA %s\n",
           (unsigned long long)r->seed, index + 1, pg->seeds_total, row->step, plan->steps,
           100.0 * (double)row->step / (double)plan->steps, (double)row->epsilon,
           row->metrics.td_loss, row->train_sharpe, row->valid_sharpe, r->best_sharpe,
           r->best_step, rate, 100.0 * (double)pg->steps_done / (double)pg->steps_total, eta);
    fflush(stdout);
}

static void run_check(seed_run *r, fh_pipeline *p, const market *m, const run_plan *plan,
                      const envs *e, float eps)
{
    curve_row row;
    memset(&row, 0, sizeof row);
    row.step = r->step;
    row.epsilon = eps;
    row.metrics = finite_metrics(p); /* waits for the step on CUDA */
    performance v = evaluate(m, p, STRATEGY_AGENT, market_period(m, PERIOD_VALID), NULL);
    row.valid_log_return = v.log_return;
    row.valid_sharpe = v.sharpe;
    performance t = evaluate(m, p, STRATEGY_AGENT, market_period(m, PERIOD_TRAIN), NULL);
    row.train_log_return = t.log_return;
    row.train_sharpe = t.sharpe;
    append_row(r, &row);
    if (r->curve_len == 1 || v.sharpe > r->best_sharpe) {
        r->best_sharpe = v.sharpe;
        r->best_step = r->step;
        r->checks_since_best = 0;
        save_checkpoint(p, r, "best.ckpt", 0);
    } else {
        ++r->checks_since_best;
    }
    if (r->step >= plan->steps) {
        r->finished = 1;
    } else if (plan->patience > 0 && r->checks_since_best >= plan->patience) {
        r->finished = 1;
        r->stopped_early = 1;
    }
    save_resume_point(p, r, e);
}

/* ------------------------------------------------------------------------------------------ */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

void train_catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The pipeline trains from its own replay on either backend; a backend that cannot have one
 * (or any other refusal) stops the run here, saying what was asked for. */
static fh_pipeline *create_pipeline(const run_plan *plan, uint64_t seed)
{
    fh_config c = plan->cfg;
    c.seed = seed;
    fh_pipeline *p = NULL;
    fh_status s = fh_pipeline_create(&c, &p);
    if (s != FH_OK)
        die("cannot create the %s pipeline (batch %u, a replay of %u rows x %u environments): "
            "%s (%s)%s", backend_name(c.backend), c.batch_size, c.replay_capacity,
            c.replay_envs, fh_status_string(s), fh_last_error_message(),
            c.backend == FH_BACKEND_CUDA ? "; --backend cpu trains on the CPU" : "");
    return p;
}

static void resume(seed_run *r, fh_pipeline *p, envs *e)
{
    char path[4200];
    read_state(r, e);
    seed_path(r, "latest.ckpt", path, sizeof path);
    check(fh_pipeline_load(p, path), "fh_pipeline_load (--resume)");
    fh_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    check(fh_pipeline_metrics(p, &m), "fh_pipeline_metrics");
    if ((long)m.step != r->step)
        die("%s is at step %llu but trainer.state at step %ld: the run stopped while saving; "
            "start this seed again (delete %s)", path, (unsigned long long)m.step, r->step,
            r->dir);
}

int train_seed(seed_run *r, int index, const run_plan *plan, const market *m, progress *pg,
               void (*on_check)(void *ctx), void *ctx)
{
    fh_pipeline *p = create_pipeline(plan, r->seed);
    feed *f = feed_create(m, plan->num_envs);
    envs e;
    envs_init(&e, plan->num_envs, m);
    if (r->step > 0) {
        resume(r, p, &e);
    } else {
        /* Warm-up with random actions: at least one pass over the training days and a batch
         * (or a full replay, if that is less). */
        period train = market_period(m, PERIOD_TRAIN);
        uint64_t warm = (uint64_t)(train.to - train.from + 1);
        uint64_t capacity = (uint64_t)plan->cfg.replay_capacity * plan->cfg.replay_envs;
        if (warm < plan->cfg.batch_size)
            warm = plan->cfg.batch_size;
        if (warm > capacity)
            warm = capacity;
        for (uint64_t stored = 0; stored < warm; stored += (uint64_t)e.n) {
            envs_act(&e, m, p, 1.0f);
            envs_advance(&e, m);
            feed_insert(f, p, e.row);
        }
    }
    loop_clock *c = &r->clock;
    for (long step = r->step + 1; step <= plan->steps && !r->finished; ++step) {
        float eps = epsilon_at(step, plan->steps);
        double t0 = now_seconds();
        envs_act(&e, m, p, eps);
        double t1 = now_seconds();
        /* One update per environment step: the loop's step counter is the pipeline's. */
        check(fh_pipeline_train(p, 1), "fh_pipeline_train");
        double t2 = now_seconds();
        envs_advance(&e, m);
        double t3 = now_seconds();
        feed_insert(f, p, e.row);
        double t4 = now_seconds();
        r->step = step;
        ++pg->steps_done;
        if (step % plan->eval_every == 0 || step == plan->steps) {
            run_check(r, p, m, plan, &e, eps);
            if (r->stopped_early)
                pg->steps_total -= plan->steps - step;
            /* A line at most every PROGRESS_SECONDS, and at the end of each seed. */
            if (!plan->quiet &&
                (r->finished || now_seconds() - pg->t_printed >= PROGRESS_SECONDS)) {
                print_progress(r, index, plan, pg, &r->curve[r->curve_len - 1]);
                pg->t_printed = now_seconds();
            }
            if (on_check)
                on_check(ctx);
        }
        if (interrupted && !r->finished) {
            /* The same resume point as a check's: after the step and the row's insert. */
            save_resume_point(p, r, &e);
            break;
        }
        double t5 = now_seconds();
        c->act += t1 - t0;
        c->launch += t2 - t1;
        c->envs += t3 - t2;
        c->insert += t4 - t3;
        c->checks += t5 - t4;
    }
    envs_free(&e);
    feed_free(f);
    fh_pipeline_destroy(p);
    return r->finished;
}
