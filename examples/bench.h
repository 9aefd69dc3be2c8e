/* foxhunt-bench's pieces shared by bench.c (the runs, the table, the JSON) and bench_feed.c
 * (random batches and rows, and the ways of feeding the step: uploads from host or device
 * memory, the replay's inserts and train(k)). */
#ifndef FOXHUNT_BENCH_H
#define FOXHUNT_BENCH_H

#include <foxhunt.h>

#include <stdint.h>

#include "bench_util.h"

enum { NUM_FIELDS = 12 };

/* The replay runs' shape: K rows of E environments, inserts of R rows. */
typedef struct {
    uint32_t capacity, envs, insert_rows;
} replay_opts;

typedef struct {
    uint32_t batch;
    const bench_mode *mode;
    int iql_gemm;
    const char *variant;  /* value of the --variant variable, or "" */
    double median[NUM_FIELDS];
    double wall_ms, steps_per_s;
    double fed_ms, upload_ms;  /* wall per (upload + step); median host time in one upload */
    double dfed_ms, dupload_ms; /* the same with the batch in device memory (0: not measured) */
    double train_ms;           /* wall per step of train(steps) sampling from a replay */
    double insert_tps;         /* host inserts into that replay, transitions per second */
    fh_memory_report mem;
} result;

/* `steps` times: upload one of two batches (alternating), then step; wall ms per step and the
 * median host ms of one upload call into r->fed_ms / r->upload_ms, and, in a build with CUDA,
 * the same with the batches in device memory into r->dfed_ms / r->dupload_ms. */
void measure_fed(result *r, fh_pipeline *p, const fh_config *c, const host_batch *a,
                 const host_batch *b, int steps);

/* A pipeline of config c with a replay of shape o: fills it with host inserts of o->insert_rows
 * rows (r->insert_tps: transitions per second until the last has reached the ring), then
 * train(warmup) and train(steps) (r->train_ms: wall ms per step of the latter). */
void measure_replay(result *r, fh_config c, const replay_opts *o, int steps, int warmup);

#endif
