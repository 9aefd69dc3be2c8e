/* Evaluation of the agent and of the baselines on one period: daily returns of an equal-weight
 * book of the four indices (capital 1, a quarter per index), net of costs, starting flat. */
#ifndef FOXHUNT_TRAINER_EVALUATE_H
#define FOXHUNT_TRAINER_EVALUATE_H

#include <foxhunt.h>

#include "market.h"

enum { TRADING_DAYS = 252 }; /* annualisation of the Sharpe ratio */

typedef enum strategy {
    STRATEGY_AGENT,       /* the pipeline's greedy policy (epsilon 0) */
    STRATEGY_BUY_HOLD,    /* long all four from the first decision on */
    STRATEGY_FLAT,        /* never in the market: 0 every day */
    STRATEGY_MOMENTUM,    /* momentum_positions() (market.h), rebalanced daily */
    NUM_STRATEGIES
} strategy;
extern const char *const STRATEGY_NAMES[NUM_STRATEGIES]; /* "agent", "buy & hold", ... */
extern const char *const STRATEGY_KEYS[NUM_STRATEGIES];  /* "agent", "buy_hold", ... */

typedef struct performance {
    int days, trades;     /* trades: position changes, counted per index */
    double log_return;    /* sum of the daily log returns */
    double sharpe;        /* annualised: mean / std (population) x sqrt(252); 0 if std = 0 */
} performance;

/* Runs strategy s over the decision days of `per`; p is used by STRATEGY_AGENT only. When
 * daily is not NULL it receives the per-day log returns (per.to - per.from + 1 of them). */
performance evaluate(const market *m, fh_pipeline *p, strategy s, period per, double *daily);

/* Simple return in percent of a total log return. */
double percent(double log_return);

#endif
