/* The market of the trading example: CSV parsing, returns, volatility regimes, features. */
#define _POSIX_C_SOURCE 200809L

#include "market.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

const char *const INDEX_NAMES[NUM_INDICES] = {"DAX", "SMI", "CAC", "FTSE"};
const char *const PERIOD_NAMES[NUM_PERIODS] = {"train", "valid", "test"};

static char *skip_space(char *s)
{
    while (*s == ' ' || *s == '\t')
        ++s;
    return s;
}

/* Strip the line end (LF or CRLF) and trailing blanks, so Windows files parse the same. */
static void chomp(char *s)
{
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1]))
        s[--len] = '\0';
}

static void check_header(char *line, const char *path)
{
    static const char *const want[1 + NUM_INDICES] = {"t", "DAX", "SMI", "CAC", "FTSE"};
    char *s = line;
    if ((unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
        s += 3; /* UTF-8 byte-order mark */
    for (int c = 0; c < 1 + NUM_INDICES; ++c) {
        s = skip_space(s);
        size_t len = strlen(want[c]);
        if (strncmp(s, want[c], len) != 0)
            die("%s: header must be 't,DAX,SMI,CAC,FTSE' (column %d)", path, c + 1);
        s = skip_space(s + len);
        if (c < NUM_INDICES && *s++ != ',')
            die("%s: header must be 't,DAX,SMI,CAC,FTSE' (after column %d)", path, c + 1);
    }
    if (*s != '\0')
        die("%s: header has more than 5 columns", path);
}

/* One data row: five comma-separated finite numbers, prices positive. */
static void parse_row(char *line, const char *path, int lineno, double *year, double *price)
{
    char *s = line;
    for (int c = 0; c < 1 + NUM_INDICES; ++c) {
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno == ERANGE || !isfinite(v))
            die("%s:%d: column %d is not a finite number", path, lineno, c + 1);
        s = skip_space(end);
        if (c < NUM_INDICES && *s++ != ',')
            die("%s:%d: expected 5 comma-separated columns", path, lineno);
        if (c == 0)
            *year = v;
        else if (v <= 0.0)
            die("%s:%d: %s close %g is not positive", path, lineno, INDEX_NAMES[c - 1], v);
        else
            price[c - 1] = v;
    }
    if (*s != '\0')
        die("%s:%d: more than 5 columns", path, lineno);
}

static void load_csv(market *m, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot open %s: %s (use --data PATH)", path, strerror(errno));
    int cap = 2048, lineno = 0, have_header = 0;
    char line[512];
    m->n = 0;
    m->year = xcalloc((size_t)cap, sizeof *m->year);
    m->price = xcalloc((size_t)cap * NUM_INDICES, sizeof *m->price);
    while (fgets(line, sizeof line, f)) {
        ++lineno;
        if (!strchr(line, '\n') && !feof(f))
            die("%s:%d: line too long", path, lineno);
        chomp(line);
        if (line[0] == '\0')
            continue;
        if (!have_header) {
            check_header(line, path);
            have_header = 1;
            continue;
        }
        if (m->n == cap) {
            cap *= 2;
            m->year = realloc(m->year, (size_t)cap * sizeof *m->year);
            m->price = realloc(m->price, (size_t)cap * NUM_INDICES * sizeof *m->price);
            if (!m->year || !m->price)
                die("out of memory reading %s", path);
        }
        parse_row(line, path, lineno, &m->year[m->n], &m->price[(size_t)m->n * NUM_INDICES]);
        if (m->n > 0 && !(m->year[m->n] > m->year[m->n - 1]))
            die("%s:%d: dates must increase", path, lineno);
        ++m->n;
    }
    if (ferror(f))
        die("error reading %s", path);
    fclose(f);
    if (!have_header)
        die("%s is empty", path);
}

static void compute_returns(market *m)
{
    m->ret = xcalloc((size_t)m->n * NUM_INDICES, sizeof *m->ret);
    for (int i = 1; i < m->n; ++i)
        for (int b = 0; b < NUM_INDICES; ++b)
            m->ret[i * NUM_INDICES + b] =
                log(m->price[i * NUM_INDICES + b] / m->price[(i - 1) * NUM_INDICES + b]);
}

static void compute_volatility(market *m)
{
    m->vol = xcalloc((size_t)m->n, sizeof *m->vol);
    for (int i = VOL_WINDOW; i < m->n; ++i) {
        double sum_std = 0.0;
        for (int b = 0; b < NUM_INDICES; ++b) {
            double s = 0.0, s2 = 0.0;
            for (int k = i - VOL_WINDOW + 1; k <= i; ++k) {
                double r = m->ret[k * NUM_INDICES + b];
                s += r;
                s2 += r * r;
            }
            double mean = s / VOL_WINDOW;
            double var = s2 / VOL_WINDOW - mean * mean;
            sum_std += sqrt(var > 0.0 ? var : 0.0);
        }
        m->vol[i] = sum_std / NUM_INDICES;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Thresholds from the training days only; validation and test reuse them unchanged. */
static void compute_regimes(market *m)
{
    int count = m->valid_start - m->first;
    double *sorted = xcalloc((size_t)count, sizeof *sorted);
    memcpy(sorted, m->vol + m->first, (size_t)count * sizeof *sorted);
    qsort(sorted, (size_t)count, sizeof *sorted, cmp_double);
    for (int q = 0; q < NUM_REGIMES - 1; ++q)
        m->vol_q[q] = sorted[(size_t)count * (size_t)(q + 1) / NUM_REGIMES];
    free(sorted);
    m->regime = xcalloc((size_t)m->n, sizeof *m->regime);
    for (int i = 0; i < m->n; ++i) {
        int z = 0;
        while (z < NUM_REGIMES - 1 && m->vol[i] >= m->vol_q[z])
            ++z;
        m->regime[i] = z;
    }
}

static void compute_features(market *m)
{
    m->features = xcalloc((size_t)m->n * FEATURE_DIM, sizeof *m->features);
    for (int i = m->first; i < m->n; ++i) {
        float *f = m->features + (size_t)i * FEATURE_DIM;
        for (int k = 0; k < WINDOW; ++k)
            for (int b = 0; b < NUM_INDICES; ++b)
                f[k * NUM_INDICES + b] =
                    (float)(FEATURE_SCALE * m->ret[(i - WINDOW + 1 + k) * NUM_INDICES + b]);
    }
}

static int first_day_of(const market *m, double year)
{
    for (int i = 0; i < m->n; ++i)
        if (m->year[i] >= year - 1e-9)
            return i;
    return m->n;
}

void market_load(market *m, const char *path)
{
    memset(m, 0, sizeof *m);
    load_csv(m, path);
    /* A return window needs WINDOW returns, i.e. WINDOW + 1 prices. */
    m->first = WINDOW > VOL_WINDOW ? WINDOW : VOL_WINDOW;
    m->valid_start = first_day_of(m, VALID_START_YEAR);
    m->test_start = first_day_of(m, TEST_START_YEAR);
    if (m->valid_start - m->first < 100 || m->test_start - m->valid_start < 20 ||
        m->n - m->test_start < 20)
        die("%s: need >= 100 training days before %.0f, >= 20 validation days before %.0f and "
            ">= 20 test days after (have %d, %d, %d)", path, VALID_START_YEAR, TEST_START_YEAR,
            m->valid_start - m->first, m->test_start - m->valid_start, m->n - m->test_start);
    compute_returns(m);
    compute_volatility(m);
    compute_regimes(m);
    compute_features(m);
}

void market_free(market *m)
{
    free(m->year);
    free(m->price);
    free(m->ret);
    free(m->vol);
    free(m->regime);
    free(m->features);
}

void build_obs(const market *m, int day, const int8_t *pos, float *obs)
{
    memcpy(obs, m->features + (size_t)day * FEATURE_DIM, FEATURE_DIM * sizeof *obs);
    for (int b = 0; b < NUM_INDICES; ++b)
        obs[FEATURE_DIM + b] = (float)pos[b];
}

double sleeves_return(const market *m, int day, const int8_t *old_pos,
                      const int8_t *new_pos, int *trades)
{
    double r = 0.0;
    for (int b = 0; b < NUM_INDICES; ++b) {
        int change = abs(new_pos[b] - old_pos[b]);
        r += new_pos[b] * m->ret[(day + 1) * NUM_INDICES + b] - COST_PER_UNIT * change;
        if (trades && change)
            ++*trades;
    }
    return r;
}

void actions_to_positions(const int32_t *action, int8_t *pos)
{
    for (int b = 0; b < NUM_INDICES; ++b)
        pos[b] = (int8_t)(action[b] - 1);
}

period market_period(const market *m, period_id which)
{
    int ends[NUM_PERIODS + 1] = {m->first, m->valid_start, m->test_start, m->n};
    period p = {ends[which] - 1, ends[which + 1] - 2};
    if (which == PERIOD_TRAIN)
        p.from = m->first; /* the first day with a full observation window */
    return p;
}

/* Compares closes rather than summing the window's log returns: the sign of a sum that is
 * zero in exact arithmetic would be rounding noise. */
void momentum_positions(const market *m, int day, int8_t *pos)
{
    for (int b = 0; b < NUM_INDICES; ++b) {
        double now = m->price[day * NUM_INDICES + b];
        double then = m->price[(day - WINDOW) * NUM_INDICES + b];
        pos[b] = (int8_t)((now > then) - (now < then));
    }
}
