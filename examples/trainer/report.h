/* The run's results: the tables printed at the end and the CSV files of the output directory. */
#ifndef FOXHUNT_TRAINER_REPORT_H
#define FOXHUNT_TRAINER_REPORT_H

#include <stdint.h>

#include "evaluate.h"
#include "market.h"
#include "train.h"

/* One seed's agent, evaluated from its best checkpoint (the one validation chose). */
typedef struct seed_result {
    uint64_t seed;
    long best_step, steps;
    int stopped_early;
    performance perf[NUM_PERIODS];
    double *test_daily;   /* [test days] daily log returns */
} seed_result;

/* The baselines on every period, and their daily returns on the test period. */
typedef struct baselines {
    performance perf[NUM_PERIODS][NUM_STRATEGIES]; /* STRATEGY_AGENT's column unused */
    double *test_daily[NUM_STRATEGIES];
} baselines;

void baselines_compute(baselines *b, const market *m);
void baselines_free(baselines *b);

/* Out of sample first, then validation, then in sample, each labelled for what it is. */
void report_print(const market *m, const seed_result *s, int n, const baselines *b);

/* summary.csv: period, strategy, seed, days, trades, log_return, return_pct, sharpe,
 * best_step: one row per period and baseline, and per period and seed for the agent. */
void write_summary_csv(const char *path, const seed_result *s, int n, const baselines *b);
/* equity.csv: the value of capital 1 at each close of the test period, per strategy and seed
 * (first row: the close before it, all 1). */
void write_equity_csv(const char *path, const market *m, const seed_result *s, int n,
                      const baselines *b);
/* learning_curve.csv: one row per validation check of every seed so far. */
void write_curve_csv(const char *path, const seed_run *runs, int n);

#endif
