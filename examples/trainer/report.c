/* The run's results on stdout and as CSV (see report.h). */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void baselines_compute(baselines *b, const market *m)
{
    memset(b, 0, sizeof *b);
    period test = market_period(m, PERIOD_TEST);
    for (int s = STRATEGY_BUY_HOLD; s < NUM_STRATEGIES; ++s) {
        b->test_daily[s] = xcalloc((size_t)(test.to - test.from + 1), sizeof(double));
        for (int per = 0; per < NUM_PERIODS; ++per)
            b->perf[per][s] = evaluate(m, NULL, (strategy)s, market_period(m, (period_id)per),
                                       per == PERIOD_TEST ? b->test_daily[s] : NULL);
    }
}

void baselines_free(baselines *b)
{
    for (int s = 0; s < NUM_STRATEGIES; ++s)
        free(b->test_daily[s]);
}

/* ------------------------------------------------------------------------------------------ */
/* Printing. */

/* EuStockMarkets has fractional years, not dates: good to the month. */
static void year_month(double year, char *buf, size_t size)
{
    int y = (int)floor(year);
    int month = (int)floor((year - y) * 12.0) + 1;
    snprintf(buf, size, "%d-%02d", y, month > 12 ? 12 : month);
}

static void mean_sd(const double *x, int n, double *mean, double *sd)
{
    double sum = 0.0, ss = 0.0;
    for (int i = 0; i < n; ++i)
        sum += x[i];
    *mean = sum / n;
    for (int i = 0; i < n; ++i)
        ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : NAN;
}

static void print_agent(const seed_result *s, int n, period_id per)
{
    double ret[n], sharpe[n], trades[n]; /* n >= 1 */
    for (int i = 0; i < n; ++i) {
        ret[i] = percent(s[i].perf[per].log_return);
        sharpe[i] = s[i].perf[per].sharpe;
        trades[i] = s[i].perf[per].trades;
    }
    double rm, rs, sm, ss, tm, ts;
    mean_sd(ret, n, &rm, &rs);
    mean_sd(sharpe, n, &sm, &ss);
    mean_sd(trades, n, &tm, &ts);
    char label[32];
    snprintf(label, sizeof label, "agent, %d seed%s", n, n > 1 ? "s" : "");
    if (n > 1)
        printf("  %-16s %+9.2f ± %6.2f   %+6.2f ± %4.2f   %6.0f ± %4.0f   (mean ± sd over seeds)\n",
               label, rm, rs, sm, ss, tm, ts);
    else
        printf("  %-16s %+9.2f            %+6.2f          %6.0f\n", label, rm, sm, tm);
}

static void print_period(const market *m, period_id per, const char *title, const seed_result *s,
                         int n, const baselines *b)
{
    period p = market_period(m, per);
    char from[16], to[16];
    year_month(m->year[p.from + 1], from, sizeof from);
    year_month(m->year[p.to + 1], to, sizeof to);
    printf("\n%s: %s to %s, %d trading days\n", title, from, to, p.to - p.from + 1);
    printf("  %-16s %9s            %6s          %6s\n", "strategy", "return %", "Sharpe",
           "trades");
    print_agent(s, n, per);
    for (int k = STRATEGY_BUY_HOLD; k < NUM_STRATEGIES; ++k)
        printf("  %-16s %+9.2f            %+6.2f          %6d\n", STRATEGY_NAMES[k],
               percent(b->perf[per][k].log_return), b->perf[per][k].sharpe,
               b->perf[per][k].trades);
    printf("  by seed (return %%, Sharpe):");
    for (int i = 0; i < n; ++i)
        printf("%s seed %llu %+.2f, %+.2f", i ? ";" : "", (unsigned long long)s[i].seed,
               percent(s[i].perf[per].log_return), s[i].perf[per].sharpe);
    printf("\n");
    if (per != PERIOD_TEST)
        return;
    printf("  checkpoints (step of the best validation Sharpe / steps trained):");
    for (int i = 0; i < n; ++i)
        printf("%s seed %llu %ld/%ld%s", i ? ";" : "", (unsigned long long)s[i].seed,
               s[i].best_step, s[i].steps, s[i].stopped_early ? " (stopped early)" : "");
    printf("\n");
}

void report_print(const market *m, const seed_result *s, int n, const baselines *b)
{
    printf("\nReturns: an equal-weight book of the four indices, capital 1, each day the mean "
           "over indices of\nposition x log return, net of %.0f bp per unit of position change; "
           "return %% = 100 (exp(sum) - 1).\nSharpe: annualised, mean / standard deviation of "
           "the daily returns x sqrt(%d), risk-free rate 0\n(flat: 0). The agent acts greedily "
           "from each seed's checkpoint with the best validation Sharpe.\n",
           COST_PER_UNIT * 1e4, TRADING_DAYS);
    print_period(m, PERIOD_TEST, "OUT OF SAMPLE (test, never seen in training or selection)", s,
                 n, b);
    int beat = 0;
    for (int i = 0; i < n; ++i)
        beat += s[i].perf[PERIOD_TEST].log_return >
                b->perf[PERIOD_TEST][STRATEGY_BUY_HOLD].log_return;
    printf("  the agent beat buy & hold out of sample in %d of %d seeds\n", beat, n);
    print_period(m, PERIOD_VALID, "Validation (chose the checkpoints: optimistic for the agent)",
                 s, n, b);
    print_period(m, PERIOD_TRAIN, "In sample (the training days, which the agent is fitted "
                                  "to: not evidence of skill)", s, n, b);
}

/* ------------------------------------------------------------------------------------------ */
/* CSV files. */

static FILE *open_csv(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    return f;
}

static void close_csv(FILE *f, const char *path)
{
    if (ferror(f) | fclose(f))
        die("cannot write %s: %s", path, strerror(errno));
}

static void summary_row(FILE *f, period_id per, const char *strategy, const char *seed,
                        performance p, const char *best_step)
{
    fprintf(f, "%s,%s,%s,%d,%d,%.9g,%.9g,%.9g,%s\n", PERIOD_NAMES[per], strategy, seed, p.days,
            p.trades, p.log_return, percent(p.log_return), p.sharpe, best_step);
}

void write_summary_csv(const char *path, const seed_result *s, int n, const baselines *b)
{
    FILE *f = open_csv(path);
    fprintf(f, "period,strategy,seed,days,trades,log_return,return_pct,sharpe,best_step\n");
    for (int per = 0; per < NUM_PERIODS; ++per) {
        for (int k = STRATEGY_BUY_HOLD; k < NUM_STRATEGIES; ++k)
            summary_row(f, (period_id)per, STRATEGY_KEYS[k], "", b->perf[per][k], "");
        for (int i = 0; i < n; ++i) {
            char seed[32], best[32];
            snprintf(seed, sizeof seed, "%llu", (unsigned long long)s[i].seed);
            snprintf(best, sizeof best, "%ld", s[i].best_step);
            summary_row(f, (period_id)per, STRATEGY_KEYS[STRATEGY_AGENT], seed,
                        s[i].perf[per], best);
        }
    }
    close_csv(f, path);
}

void write_equity_csv(const char *path, const market *m, const seed_result *s, int n,
                      const baselines *b)
{
    period test = market_period(m, PERIOD_TEST);
    int days = test.to - test.from + 1;
    FILE *f = open_csv(path);
    fprintf(f, "year");
    for (int k = STRATEGY_BUY_HOLD; k < NUM_STRATEGIES; ++k)
        fprintf(f, ",%s", STRATEGY_KEYS[k]);
    for (int i = 0; i < n; ++i)
        fprintf(f, ",agent_seed_%llu", (unsigned long long)s[i].seed);
    fprintf(f, "\n");
    double sum[NUM_STRATEGIES] = {0}, *agent = xcalloc((size_t)n, sizeof *agent);
    for (int d = 0; d <= days; ++d) {
        fprintf(f, "%.6f", m->year[test.from + d]);
        for (int k = STRATEGY_BUY_HOLD; k < NUM_STRATEGIES; ++k) {
            fprintf(f, ",%.9g", exp(sum[k]));
            if (d < days)
                sum[k] += b->test_daily[k][d];
        }
        for (int i = 0; i < n; ++i) {
            fprintf(f, ",%.9g", exp(agent[i]));
            if (d < days)
                agent[i] += s[i].test_daily[d];
        }
        fprintf(f, "\n");
    }
    free(agent);
    close_csv(f, path);
}

void write_curve_csv(const char *path, const seed_run *runs, int n)
{
    FILE *f = open_csv(path);
    fprintf(f, "seed,step,epsilon,td_loss,q_mean,grad_norm,cql_loss,iql_loss_hi,iql_loss_lo,"
               "iqn_loss,attn_loss,conf_loss,valid_log_return,valid_return_pct,valid_sharpe,"
               "train_log_return,train_return_pct,train_sharpe\n");
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < runs[i].curve_len; ++j) {
            const curve_row *r = &runs[i].curve[j];
            const fh_metrics *m = &r->metrics;
            fprintf(f, "%llu,%ld,%.6g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,"
                       "%.9g,%.9g,%.9g,%.9g\n", (unsigned long long)runs[i].seed, r->step,
                    (double)r->epsilon, m->td_loss, m->q_mean, m->grad_norm, m->cql_loss,
                    m->iql_loss_hi, m->iql_loss_lo, m->iqn_loss, m->attn_loss, m->conf_loss,
                    r->valid_log_return, percent(r->valid_log_return), r->valid_sharpe,
                    r->train_log_return, percent(r->train_log_return), r->train_sharpe);
        }
    close_csv(f, path);
}
