/*
 * foxhunt-trainer: a branching double-DQN agent trading four European stock indices, run as an
 * experiment: several seeds, a checkpoint chosen on a validation period (early stopping), the
 * result reported out of sample beside simple baselines.
 *
 * Data: daily closes of DAX, SMI, CAC and FTSE, 1991-1998 (examples/data/eustockmarkets.csv).
 * Training 1991-1995, validation 1996, test 1997 to August 1998.
 * One action branch per index, three sub-actions each: short, flat, long (positions -1, 0, +1).
 *
 * Environment (choices the library leaves to the trainer are made, and explained, here):
 * - Day i's observation is 128 floats. The first 124 are the last 31 daily log returns of the
 *   four indices, 100x (so a 1 % move is 1.0), laid out day by day: obs[4k + b] is index b's
 *   return k days into the window (k = 30 is day i). With attn_token_dim = 4 each attention
 *   token is then one trading day across the four markets, which is what an attention model
 *   over time should see. The last 4 floats are the agent's current positions, in {-1, 0, 1}.
 * - Acting on day i with action a gives new positions p' = a - 1. The position is held from
 *   the close of day i to the close of day i + 1.
 * - The book is four sleeves of one unit notional each. Real-unit daily return of sleeve b:
 *       p'_b * r_b(i+1) - 0.0005 * |p'_b - p_b|        (5 bp per unit of position change)
 *   with r_b the log return. The training reward is 100 x the SUM over the four sleeves: each
 *   branch then sees its own sleeve's move at full size (a 1 % move is 1.0) instead of a
 *   quarter of it. Reported returns are for an equal-weight book of capital 1 (a quarter per
 *   sleeve), i.e. the sum divided by 4, compounded as exp(sum over days).
 * - Regime = quartile (0..3) of the trailing 20-day volatility, averaged over the four indices;
 *   the quartile thresholds come from the training days only.
 * - Training: parallel copies of the training period, each one episode per pass, the last
 *   transition terminal. Each lockstep step of the copies is one row of the pipeline's replay,
 *   from which every training step draws its batch (SPEC §2.1, §5.0).
 * - Validation and test: the greedy policy, starting flat.
 *
 * Files: options.c (command line), market.c (data, features, regimes, returns), feed.c (how
 * transitions reach the pipeline's replay), train.c (one seed: environments, loop, checks,
 * --resume state), evaluate.c (agent and baselines on a period), report.c (tables, CSV),
 * common.c (errors, clock); plot.py draws the CSV files.
 */
#define _POSIX_C_SOURCE 200809L

#include <foxhunt.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "evaluate.h"
#include "market.h"
#include "options.h"
#include "report.h"
#include "train.h"

/* Transitions the pipeline's replay keeps (about 1 KB each: obs and next obs are 128 floats). */
#define REPLAY_TRANSITIONS (1u << 18)

/* The defaults depend on the backend, which AUTO only reveals after creation: a tiny probe
 * pipeline answers that cheaply before the real one is sized. With --backend cuda the probe
 * checks that there is a device before any file of the run is written. */
static int resolve_backend(int requested)
{
    if (requested == FH_BACKEND_CPU)
        return requested;
    fh_config c;
    check(fh_config_init(&c), "fh_config_init");
    c.backend = requested;
    c.batch_size = 1;
    c.obs_dim = 4;
    c.goal_dim = 0;
    c.num_branches = 1;
    c.actions_per_branch = 2;
    c.trunk_hidden = c.branch_hidden = c.iql_hidden = c.iqn_hidden = 8;
    c.iqn_cos = 8;
    c.attn_d_model = 8;
    c.attn_heads = 1;
    c.attn_head_hidden = 8;
    fh_pipeline *probe = NULL;
    const fh_status st = fh_pipeline_create(&c, &probe);
    if (st == FH_ERR_NO_CUDA)
        die("--backend cuda: %s (%s); --backend cpu trains on the CPU", fh_status_string(st),
            fh_last_error_message());
    check(st, "fh_pipeline_create (backend probe)");
    int32_t backend = FH_BACKEND_CPU;
    check(fh_pipeline_backend(probe, &backend), "fh_pipeline_backend");
    fh_pipeline_destroy(probe);
    return backend;
}

/* Fills the backend's defaults into o (steps, batch, eval_every) and sizes the pipeline. */
static run_plan make_plan(options *o)
{
    run_plan plan;
    fh_config *c = &plan.cfg;
    check(fh_config_init(c), "fh_config_init");
    c->backend = o->backend;
    c->math_mode = o->math;
    c->obs_dim = OBS_DIM;
    c->goal_dim = 0; /* no goal, so no HER */
    c->num_branches = NUM_INDICES;
    c->actions_per_branch = NUM_ACTIONS;
    c->attn_token_dim = NUM_INDICES; /* one token = one day across the four markets */
    c->num_regimes = NUM_REGIMES;
    /* Daily returns are mostly noise: a ~10-day horizon (gamma 0.9) keeps the bootstrapped
     * target's variance low while still valuing holding a position past its entry cost. */
    c->gamma = o->gamma;
    if (o->backend == FH_BACKEND_CPU) {
        /* Sized to finish in a few minutes on two cores. IQN and attention feed the Q net
         * nothing (only the confidence head, which acting ignores), so halving their samples
         * and heads halves their cost and leaves the learned policy bit for bit the same. */
        c->trunk_hidden = 128;
        c->branch_hidden = 64;
        c->iql_hidden = 64;
        c->iqn_hidden = 64;
        c->iqn_cos = 32;
        c->iqn_n = 4;
        c->iqn_n_target = 4;
        c->attn_d_model = 32;
        c->attn_heads = 2;
        c->attn_head_hidden = 32;
        plan.num_envs = 4;
        if (!o->steps)
            o->steps = 2000;
        if (!o->batch)
            o->batch = 256;
    } else {
        /* At B = 16384 every step revisits each training day ~14 times: more steps mostly
         * memorise the training days harder; validation picks the checkpoint. */
        plan.num_envs = 64;
        if (!o->steps)
            o->steps = 5000;
        if (!o->batch)
            o->batch = 16384;
    }
    /* The replay keeps the newest REPLAY_TRANSITIONS transitions, one row per environment
     * step. */
    c->replay_envs = (uint32_t)plan.num_envs;
    c->replay_capacity = REPLAY_TRANSITIONS / c->replay_envs;
    if (!o->eval_every)
        o->eval_every = o->steps >= 25 ? o->steps / 25 : 1;
    c->batch_size = (uint32_t)o->batch;
    plan.steps = o->steps;
    plan.eval_every = o->eval_every;
    plan.patience = o->patience;
    plan.quiet = o->quiet;
    return plan;
}

static void join(char *buf, size_t size, const char *dir, const char *name)
{
    if ((size_t)snprintf(buf, size, "%s/%s", dir, name) >= size)
        die("path too long: %s/%s", dir, name);
}

/* mkdir -p */
static void make_dir(const char *path)
{
    char buf[4200];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
        die("path too long: %s", path);
    for (char *s = buf + 1;; ++s) {
        int end = *s == '\0';
        if (*s != '/' && !end)
            continue;
        *s = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            die("cannot create directory %s: %s", buf, strerror(errno));
        if (end)
            break;
        *s = '/';
    }
}

static void print_setup(const market *m, const run_plan *plan, const options *o)
{
    const fh_config *c = &plan->cfg;
    uint32_t v = fh_version();
    printf("foxhunt-trainer, libfoxhunt %u.%u.%u, backend %s%s\n", v / 10000, v / 100 % 100,
           v % 100, backend_name(c->backend), o->resume ? ", resuming" : "");
    printf("data: %s, %d days; periods (decisions): train %d, validation %d, test %d\n",
           o->data, m->n, market_period(m, PERIOD_TRAIN).to - m->first + 1,
           m->test_start - m->valid_start, m->n - m->test_start);
    printf("run: %d seed(s) from %llu, %ld steps each, batch %u, validation check every %ld "
           "steps, patience %ld, gamma %.3f, %d envs, replay %u rows x %u, math %s%s\n", o->seeds,
           (unsigned long long)o->seed, plan->steps, c->batch_size, plan->eval_every,
           plan->patience, (double)c->gamma, plan->num_envs, c->replay_capacity,
           c->replay_envs, math_name(c->math_mode),
           c->backend == FH_BACKEND_CPU ? " (the CPU backend computes in float32 whatever the mode)"
                                        : "");
    printf("output: %s\n", o->out);
    fflush(stdout);
}

typedef struct curve_ctx {
    const char *path;
    const seed_run *runs;
    int n;
} curve_ctx;

static void on_check(void *ctx)
{
    const curve_ctx *c = ctx;
    write_curve_csv(c->path, c->runs, c->n);
}

/* The seed's agent from its best checkpoint, on every period. */
static seed_result evaluate_seed(const seed_run *r, const run_plan *plan, const market *m)
{
    seed_result s;
    memset(&s, 0, sizeof s);
    s.seed = r->seed;
    s.best_step = r->best_step;
    s.steps = r->step;
    s.stopped_early = r->stopped_early;
    fh_config c = plan->cfg;
    c.seed = r->seed;
    /* Acting needs no replay, and best.ckpt holds none. */
    c.replay_capacity = 0;
    c.replay_envs = 0;
    fh_pipeline *p = NULL;
    check(fh_pipeline_create(&c, &p), "fh_pipeline_create");
    char path[4200];
    seed_path(r, "best.ckpt", path, sizeof path);
    check(fh_pipeline_load(p, path), "fh_pipeline_load");
    period test = market_period(m, PERIOD_TEST);
    s.test_daily = xcalloc((size_t)(test.to - test.from + 1), sizeof *s.test_daily);
    for (int per = 0; per < NUM_PERIODS; ++per)
        s.perf[per] = evaluate(m, p, STRATEGY_AGENT, market_period(m, (period_id)per),
                               per == PERIOD_TEST ? s.test_daily : NULL);
    fh_pipeline_destroy(p);
    return s;
}

static void print_speed(const seed_run *runs, int n, long steps_done, double seconds, int backend)
{
    loop_clock c = {0, 0, 0, 0, 0};
    for (int i = 0; i < n; ++i) {
        c.act += runs[i].clock.act;
        c.launch += runs[i].clock.launch;
        c.envs += runs[i].clock.envs;
        c.insert += runs[i].clock.insert;
        c.checks += runs[i].clock.checks;
    }
    if (steps_done == 0)
        return;
    double k = 1e3 / (double)steps_done;
    printf("\nspeed: %ld steps in %.1f s, %.1f steps/s; host ms per step: act %.3f (with any "
           "wait for the step in flight), launch %.3f%s, envs %.3f, insert %.3f, "
           "checks %.3f\n",
           steps_done, seconds, (double)steps_done / seconds, c.act * k, c.launch * k,
           backend == FH_BACKEND_CPU ? " (the step itself: the CPU backend runs it in the call)"
                                     : "",
           c.envs * k, c.insert * k, c.checks * k);
}

int main(int argc, char **argv)
{
    options o;
    parse_options(&o, argc, argv);
    char path[4200];
    join(path, sizeof path, o.out, "options.txt");
    if (o.resume)
        options_load(&o, path);
    market m;
    market_load(&m, o.data);
    o.backend = resolve_backend(o.backend);
    run_plan plan = make_plan(&o);
    make_dir(o.out);
    if (!o.resume)
        options_save(&o, path);
    if (!o.quiet)
        print_setup(&m, &plan, &o);

    seed_run *runs = xcalloc((size_t)o.seeds, sizeof *runs);
    progress pg = {now_seconds(), 0.0, 0, 0, o.seeds};
    for (int i = 0; i < o.seeds; ++i) {
        seed_run_init(&runs[i], o.out, o.seed + (uint64_t)i);
        make_dir(runs[i].dir);
        char state[4200];
        seed_path(&runs[i], "trainer.state", state, sizeof state);
        if (o.resume)
            seed_run_load(&runs[i]);
        else if (unlink(state) != 0 && errno != ENOENT) /* of an earlier run in DIR */
            die("cannot remove %s: %s", state, strerror(errno));
        if (!runs[i].finished)
            pg.steps_total += plan.steps - runs[i].step;
    }
    char curve[4200];
    join(curve, sizeof curve, o.out, "learning_curve.csv");
    curve_ctx ctx = {curve, runs, o.seeds};
    train_catch_interrupts();
    for (int i = 0; i < o.seeds; ++i)
        if (!runs[i].finished && !train_seed(&runs[i], i, &plan, &m, &pg, on_check, &ctx)) {
            write_curve_csv(curve, runs, o.seeds);
            fprintf(stderr, "foxhunt-trainer: interrupted at step %ld of seed %llu; "
                    "--resume --out %s continues from there\n", runs[i].step,
                    (unsigned long long)runs[i].seed, o.out);
            return 130; /* 128 + SIGINT, as a shell reports it */
        }
    write_curve_csv(curve, runs, o.seeds);
    double train_seconds = now_seconds() - pg.t_start;

    seed_result *results = xcalloc((size_t)o.seeds, sizeof *results);
    for (int i = 0; i < o.seeds; ++i)
        results[i] = evaluate_seed(&runs[i], &plan, &m);
    baselines base;
    baselines_compute(&base, &m);
    report_print(&m, results, o.seeds, &base);
    if (!o.quiet)
        print_speed(runs, o.seeds, pg.steps_done, train_seconds, plan.cfg.backend);
    join(path, sizeof path, o.out, "summary.csv");
    write_summary_csv(path, results, o.seeds, &base);
    join(path, sizeof path, o.out, "equity.csv");
    write_equity_csv(path, &m, results, o.seeds, &base);
    printf("files: %s/{summary,equity,learning_curve}.csv, options.txt, "
           "seed-N/{best.ckpt,latest.ckpt,trainer.state}; plots (matplotlib): "
           "python3 examples/plot.py %s\n", o.out, o.out);

    for (int i = 0; i < o.seeds; ++i) {
        free(results[i].test_daily);
        seed_run_free(&runs[i]);
    }
    free(results);
    free(runs);
    baselines_free(&base);
    market_free(&m);
    return EXIT_SUCCESS;
}
