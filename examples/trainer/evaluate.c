/* The agent and the baselines on one period (see evaluate.h). */
#define _POSIX_C_SOURCE 200809L

#include "evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

const char *const STRATEGY_NAMES[NUM_STRATEGIES] = {"agent", "buy & hold", "flat", "momentum"};
const char *const STRATEGY_KEYS[NUM_STRATEGIES] = {"agent", "buy_hold", "flat", "momentum"};

static performance summarise(const double *daily, int days, int trades)
{
    performance perf = {days, trades, 0.0, 0.0};
    double sum = 0.0;
    for (int i = 0; i < days; ++i)
        sum += daily[i];
    double mean = sum / days, ss = 0.0;
    for (int i = 0; i < days; ++i)
        ss += (daily[i] - mean) * (daily[i] - mean);
    double sd = sqrt(ss / days);
    perf.log_return = sum;
    perf.sharpe = sd > 0.0 ? mean / sd * sqrt((double)TRADING_DAYS) : 0.0;
    return perf;
}

static void decide(const market *m, fh_pipeline *p, strategy s, int day, const int8_t *pos,
                   int8_t *next_pos)
{
    switch (s) {
    case STRATEGY_AGENT: {
        float obs[OBS_DIM];
        int32_t action[NUM_INDICES];
        build_obs(m, day, pos, obs);
        check(fh_pipeline_act(p, obs, NULL, 1, 0.0f, action, NULL), "fh_pipeline_act");
        actions_to_positions(action, next_pos);
        break;
    }
    case STRATEGY_BUY_HOLD:
        memset(next_pos, 1, NUM_INDICES);
        break;
    case STRATEGY_MOMENTUM:
        momentum_positions(m, day, next_pos);
        break;
    default:
        memset(next_pos, 0, NUM_INDICES);
    }
}

performance evaluate(const market *m, fh_pipeline *p, strategy s, period per, double *daily)
{
    int days = per.to - per.from + 1, trades = 0;
    double *r = daily ? daily : xcalloc((size_t)days, sizeof *r);
    int8_t pos[NUM_INDICES] = {0, 0, 0, 0}, next_pos[NUM_INDICES];
    for (int d = per.from; d <= per.to; ++d) {
        decide(m, p, s, d, pos, next_pos);
        r[d - per.from] = sleeves_return(m, d, pos, next_pos, &trades) / NUM_INDICES;
        memcpy(pos, next_pos, sizeof pos);
    }
    performance perf = summarise(r, days, trades);
    if (!daily)
        free(r);
    return perf;
}

double percent(double log_return)
{
    return 100.0 * (exp(log_return) - 1.0);
}
