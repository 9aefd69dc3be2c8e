/* Training one seed: parallel environments acting on the training days, their transitions fed
 * to the pipeline's replay, and the validation checks that pick the checkpoint (early
 * stopping) and save what --resume needs. */
#ifndef FOXHUNT_TRAINER_TRAIN_H
#define FOXHUNT_TRAINER_TRAIN_H

#include <stdint.h>

#include <foxhunt.h>

#include "market.h"

typedef struct run_plan {
    fh_config cfg;      /* everything but the seed, which each run sets; replay_envs is
                           num_envs (one row of the replay per environment step) */
    long steps;         /* per seed */
    long eval_every;    /* steps between validation checks (and checkpoints) */
    long patience;      /* checks without a better validation Sharpe before stopping; 0 = never */
    int num_envs;       /* environments acting in parallel, one fh_pipeline_act call for all */
    int quiet;
} run_plan;

/* One row of learning_curve.csv: the metrics of the check's step and the greedy policy's
 * results at that moment on the validation period (which picks the checkpoint) and on the
 * training period (in sample: how well it fits what it learns from). */
typedef struct curve_row {
    long step;
    float epsilon;
    fh_metrics metrics;
    double valid_log_return, valid_sharpe;
    double train_log_return, train_sharpe;
} curve_row;

/* Host seconds per phase of the training loop (this process only). `launch` is
 * fh_pipeline_train: the whole step, its sampling from the replay included, on the CPU; on CUDA
 * the step runs asynchronously, so time spent waiting for it shows in `act`, the first call
 * that needs it. `insert` builds the row of transitions and appends it to the replay. */
typedef struct loop_clock {
    double act, launch, envs, insert, checks;
} loop_clock;

typedef struct seed_run {
    uint64_t seed;
    char dir[4096];          /* DIR/seed-<seed> */
    long step;               /* steps completed */
    int finished;            /* reached plan.steps or stopped early */
    int stopped_early;
    long best_step;          /* the step of best.ckpt */
    double best_sharpe;      /* its validation Sharpe */
    long checks_since_best;
    curve_row *curve;
    int curve_len, curve_cap;
    loop_clock clock;
} seed_run;

/* Progress over all seeds of this process, for the percentage and the ETA. */
typedef struct progress {
    double t_start, t_printed;
    long steps_done, steps_total;
    int seeds_total;
} progress;

/* Train r to completion (fresh, or from its latest checkpoint when r->step > 0, which
 * seed_run_load() set). on_check runs after every check, e.g. to rewrite the curve files.
 * Returns 0 when interrupted (see train_catch_interrupts), having saved a resume point. */
int train_seed(seed_run *r, int index, const run_plan *plan, const market *m, progress *pg,
               void (*on_check)(void *ctx), void *ctx);

/* From now on SIGINT and SIGTERM stop training at the end of the current step, after saving
 * what --resume needs (a second signal kills at once). */
void train_catch_interrupts(void);

/* seed-<seed>/trainer.state: the run's bookkeeping and the environments (the replay is saved
 * in seed-<seed>/latest.ckpt, with the pipeline). */
void seed_run_init(seed_run *r, const char *out_dir, uint64_t seed);
int seed_run_load(seed_run *r);   /* 0 when there is no state file */
void seed_run_free(seed_run *r);
/* path of a file in the seed's directory */
void seed_path(const seed_run *r, const char *name, char *buf, size_t size);

#endif
