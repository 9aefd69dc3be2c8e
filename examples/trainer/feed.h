/* Where the training batches come from: the one module that knows how transitions reach the
 * step.
 *
 * Today: a replay buffer in host memory, sampled uniformly on the host and copied into the
 * pipeline with fh_pipeline_upload() while the previous step still runs (the upload is
 * double-buffered on CUDA); feed_step() then trains on that batch with fh_pipeline_step().
 * A replay owned by the pipeline (SPEC v1.3 §2.1, §5.0) would replace this file alone:
 * feed_insert() would append the row of transitions to it, feed_prepare() would do nothing
 * and feed_step() would sample and train in one call. */
#ifndef FOXHUNT_TRAINER_FEED_H
#define FOXHUNT_TRAINER_FEED_H

#include <stdint.h>
#include <stdio.h>

#include <foxhunt.h>

#include "market.h"

/* One environment's transition. Stored by its day and positions rather than as two 128-float
 * observations: the market part of obs is a pure function of the day, so this is exact and
 * 30x smaller, and the batch is materialised only when it is sampled. */
typedef struct transition {
    int32_t day;                 /* s = obs(day, pos), s' = obs(day + 1, action - 1) */
    int32_t action[NUM_INDICES];
    int8_t pos[NUM_INDICES];
    float reward;
    uint8_t done;                /* s' is the last training day (see trainer.c) */
} transition;

typedef struct feed feed;

feed *feed_create(const market *m, uint32_t batch_size, uint32_t capacity, uint64_t seed);
void feed_free(feed *f);
uint32_t feed_count(const feed *f);  /* transitions stored */

/* Store the row of n environments' transitions of one time step (p is unused today; a
 * replay in the pipeline would receive the row through it). */
void feed_insert(feed *f, fh_pipeline *p, const transition *row, int n);
/* Make ready the batch of the next feed_step(): sample it and upload it. */
void feed_prepare(feed *f, fh_pipeline *p);
/* Launch one training step on the prepared batch (on CUDA it returns while the step runs). */
void feed_step(feed *f, fh_pipeline *p);

/* The replay and the sampler's state, for --resume: what feed_prepare() would draw next
 * depends only on them. feed_read() dies on a short or inconsistent file. (A replay in the
 * pipeline would be saved with it, if its checkpoint holds the replay, or here.) */
void feed_write(const feed *f, FILE *out);
void feed_read(feed *f, FILE *in, const char *path);

#endif
