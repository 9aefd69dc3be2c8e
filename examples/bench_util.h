/* Shared by the benchmarks (bench.c, bench_dp.c): status checks, a monotonic clock, medians,
 * random valid batches (SPEC §2) and output folders. */
#ifndef FOXHUNT_BENCH_UTIL_H
#define FOXHUNT_BENCH_UTIL_H

#include <foxhunt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Prints "<prog>: <what> failed (status s): <message>" and exits 1. */
void bench_die(const char *what, fh_status s);
#define CHECK(call)                            \
    do {                                       \
        fh_status s_ = (call);                 \
        if (s_ != FH_OK) bench_die(#call, s_); \
    } while (0)

void *xmalloc(size_t n);  /* exits on failure */
double now_ms(void);      /* monotonic */
double median(double *v, int n);  /* sorts v */
/* out[c] = the median of column c of v [rows, cols] (row-major). */
void column_medians(const double *v, int rows, int cols, double *out);

/* A random valid batch of config c (host arrays it owns), b pointing at them. */
typedef struct {
    float *obs, *goal, *reward, *next_obs, *nag, *her_goal;
    int32_t *action, *regime;
    uint8_t *done;
    fh_batch b;
} host_batch;
void make_batch(host_batch *h, const fh_config *c);
/* n random valid transitions (SPEC §2, §2.1) into h's arrays; h->b is left empty. */
void make_rows(host_batch *h, const fh_config *c, size_t n);
void free_batch(host_batch *h);

/* The benchmarks' modes: lanes (multi- or single-stream) x math (TF32, strict FP32, BF16), by
 * name ("multi-tf32", ...). */
typedef struct {
    const char *name;
    int exec_mode, math_mode; /* fh_exec_mode, fh_math_mode */
} bench_mode;
enum { NUM_BENCH_MODES = 6 };
extern const bench_mode bench_modes[NUM_BENCH_MODES];
/* The mode called `name` (case-insensitive), or NULL. */
const bench_mode *bench_mode_named(const char *name);
/* "<program>: unknown mode 'name' (modes: multi-tf32 ...)" on stderr (the program named as
 * bench_die names it). */
void bench_unknown_mode(const char *name);

/* Creates the folders of path (everything before its last '/'). */
void mkdirs_for(const char *path);
/* path opened for writing, its folders created first; exits with a message on failure. */
FILE *open_output(const char *path);

/* Command-line values. Each exits 2 with "<prog>: <flag> wants ..., got '<text>'" when the
 * value does not fit. */
/* A decimal integer in [lo, hi], the whole of text. */
long arg_long(const char *flag, const char *text, long lo, long hi);
/* text split at commas into 1 to max non-empty items (pointers into one copy, kept until exit);
 * returns their count. */
int arg_list(const char *flag, const char *text, char **items, int max);

#endif
