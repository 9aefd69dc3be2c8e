/* The market of the trading example: four European stock indices, daily closes, as features,
 * regimes and sleeve returns. The choices are explained at the top of trainer.c. */
#ifndef FOXHUNT_TRAINER_MARKET_H
#define FOXHUNT_TRAINER_MARKET_H

#include <stdint.h>

enum {
    NUM_INDICES = 4,                         /* DAX, SMI, CAC, FTSE = num_branches */
    NUM_ACTIONS = 3,                         /* short, flat, long */
    WINDOW = 31,                             /* daily returns per index in the obs */
    FEATURE_DIM = WINDOW * NUM_INDICES,      /* 124 market features */
    OBS_DIM = FEATURE_DIM + NUM_INDICES,     /* + current positions = 128 */
    VOL_WINDOW = 20,                         /* trailing days of the regime volatility */
    NUM_REGIMES = 4                          /* volatility quartiles */
};

#define FEATURE_SCALE 100.0  /* log return -> percent, O(1) inputs */
#define COST_PER_UNIT 0.0005 /* 5 bp per unit of position change */
#define VALID_START_YEAR 1996.0 /* validation: 1996, picks the checkpoint (early stopping) */
#define TEST_START_YEAR 1997.0  /* test: 1997 to the end of the data, out of sample */

extern const char *const INDEX_NAMES[NUM_INDICES];

typedef struct market {
    int n;              /* days */
    double *year;       /* [n] fractional year */
    double *price;      /* [n, 4] closes */
    double *ret;        /* [n, 4] log return into day i; row 0 is 0 */
    double *vol;        /* [n] mean over indices of the trailing VOL_WINDOW-day std */
    int32_t *regime;    /* [n] volatility quartile */
    float *features;    /* [n, FEATURE_DIM]; valid from day `first` on */
    double vol_q[NUM_REGIMES - 1]; /* quartile thresholds (training days) */
    int first;          /* first day with a full return window */
    int valid_start;    /* first day of 1996 */
    int test_start;     /* first day of 1997 */
} market;

/* The three periods, as the decision days [from, to]: a decision on day d earns the return
 * into day d + 1, so a period's first decision is made at the close before its first day. */
typedef enum period_id { PERIOD_TRAIN, PERIOD_VALID, PERIOD_TEST, NUM_PERIODS } period_id;
typedef struct period {
    int from, to;
} period;
period market_period(const market *m, period_id which);
extern const char *const PERIOD_NAMES[NUM_PERIODS];

/* Reads the CSV (header t,DAX,SMI,CAC,FTSE) and derives returns, volatility, regimes and
 * features; dies with the file and line on malformed input. */
void market_load(market *m, const char *path);
void market_free(market *m);

/* obs of `day` with the given positions: [FEATURE_DIM features | NUM_INDICES positions]. */
void build_obs(const market *m, int day, const int8_t *pos, float *obs);
/* Real-unit return of the four one-unit sleeves, summed, for holding new_pos into day+1;
 * counts position changes into *trades when trades is not NULL. */
double sleeves_return(const market *m, int day, const int8_t *old_pos, const int8_t *new_pos,
                      int *trades);
/* Sub-actions {0, 1, 2} -> positions {-1, 0, +1}. */
void actions_to_positions(const int32_t *action, int8_t *pos);
/* Time-series momentum over the observation window: per index, long if it closed higher on
 * day d than WINDOW days before (its last WINDOW log returns sum to more than zero), short if
 * lower, flat if equal. */
void momentum_positions(const market *m, int day, int8_t *pos);

#endif
