/* The trainer's data feed: a host replay, sampled on the host and uploaded (see feed.h). */
#define _POSIX_C_SOURCE 200809L

#include "feed.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

struct feed {
    const market *m;
    transition *items;
    uint32_t capacity, count, head;
    rng sampler;
    /* Host arrays of one batch, reused every step. */
    uint32_t size;
    float *obs, *next_obs, *reward;
    int32_t *action, *regime;
    uint8_t *done;
};

feed *feed_create(const market *m, uint32_t batch_size, uint32_t capacity, uint64_t seed)
{
    feed *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->items = xcalloc(capacity, sizeof *f->items);
    f->capacity = capacity;
    f->sampler.state = seed ^ 0x5DEECE66Dull;
    f->size = batch_size;
    f->obs = xcalloc((size_t)batch_size * OBS_DIM, sizeof *f->obs);
    f->next_obs = xcalloc((size_t)batch_size * OBS_DIM, sizeof *f->next_obs);
    f->reward = xcalloc(batch_size, sizeof *f->reward);
    f->action = xcalloc((size_t)batch_size * NUM_INDICES, sizeof *f->action);
    f->regime = xcalloc(batch_size, sizeof *f->regime);
    f->done = xcalloc(batch_size, sizeof *f->done);
    return f;
}

void feed_free(feed *f)
{
    if (!f)
        return;
    free(f->items);
    free(f->obs);
    free(f->next_obs);
    free(f->reward);
    free(f->action);
    free(f->regime);
    free(f->done);
    free(f);
}

uint32_t feed_count(const feed *f)
{
    return f->count;
}

void feed_insert(feed *f, fh_pipeline *p, const transition *row, int n)
{
    (void)p;
    for (int k = 0; k < n; ++k) {
        f->items[f->head] = row[k];
        f->head = (f->head + 1) % f->capacity;
        if (f->count < f->capacity)
            ++f->count;
    }
}

/* Uniform with replacement over the stored transitions. */
void feed_prepare(feed *f, fh_pipeline *p)
{
    for (uint32_t i = 0; i < f->size; ++i) {
        const transition *t = &f->items[rng_below(&f->sampler, f->count)];
        int8_t next_pos[NUM_INDICES];
        actions_to_positions(t->action, next_pos);
        build_obs(f->m, t->day, t->pos, f->obs + (size_t)i * OBS_DIM);
        build_obs(f->m, t->day + 1, next_pos, f->next_obs + (size_t)i * OBS_DIM);
        memcpy(f->action + (size_t)i * NUM_INDICES, t->action, sizeof t->action);
        f->reward[i] = t->reward;
        f->done[i] = t->done;
        f->regime[i] = f->m->regime[t->day];
    }
    fh_batch b = FH_BATCH_INIT;
    b.batch_size = f->size;
    b.obs = f->obs;
    b.action = f->action;
    b.reward = f->reward;
    b.done = f->done;
    b.next_obs = f->next_obs;
    b.regime = f->regime;
    check(fh_pipeline_upload(p, &b), "fh_pipeline_upload");
}

void feed_step(feed *f, fh_pipeline *p)
{
    (void)f;
    check(fh_pipeline_step(p), "fh_pipeline_step");
}

void feed_write(const feed *f, FILE *out)
{
    uint32_t head[3] = {f->capacity, f->count, f->head};
    fwrite(head, sizeof head, 1, out);
    fwrite(&f->sampler.state, sizeof f->sampler.state, 1, out);
    fwrite(f->items, sizeof *f->items, f->count, out);
}

void feed_read(feed *f, FILE *in, const char *path)
{
    uint32_t head[3];
    if (fread(head, sizeof head, 1, in) != 1 || head[0] != f->capacity || head[1] > head[0] ||
        head[2] >= head[0] || (head[1] < head[0] && head[2] != head[1]))
        die("%s: the replay's header does not fit this run", path);
    f->count = head[1];
    f->head = head[2];
    if (fread(&f->sampler.state, sizeof f->sampler.state, 1, in) != 1 ||
        fread(f->items, sizeof *f->items, f->count, in) != f->count)
        die("%s ends early (in the replay)", path);
}
