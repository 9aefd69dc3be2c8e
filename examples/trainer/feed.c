/* The trainer's data feed: rows of transitions into the pipeline's replay (see feed.h). */
#define _POSIX_C_SOURCE 200809L

#include "feed.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

struct feed {
    const market *m;
    int n;
    /* One row's [n, ...] arrays, reused for every insert. */
    float *obs, *next_obs, *reward;
    int32_t *action, *regime;
    uint8_t *done, *episode_end;
};

feed *feed_create(const market *m, int num_envs)
{
    size_t n = (size_t)num_envs;
    feed *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->n = num_envs;
    f->obs = xcalloc(n * OBS_DIM, sizeof *f->obs);
    f->next_obs = xcalloc(n * OBS_DIM, sizeof *f->next_obs);
    f->reward = xcalloc(n, sizeof *f->reward);
    f->action = xcalloc(n * NUM_INDICES, sizeof *f->action);
    f->regime = xcalloc(n, sizeof *f->regime);
    f->done = xcalloc(n, sizeof *f->done);
    f->episode_end = xcalloc(n, sizeof *f->episode_end);
    return f;
}

void feed_free(feed *f)
{
    if (!f)
        return;
    free(f->obs);
    free(f->next_obs);
    free(f->reward);
    free(f->action);
    free(f->regime);
    free(f->done);
    free(f->episode_end);
    free(f);
}

void feed_insert(feed *f, fh_pipeline *p, const transition *row)
{
    for (int k = 0; k < f->n; ++k) {
        const transition *t = &row[k];
        int8_t next_pos[NUM_INDICES];
        actions_to_positions(t->action, next_pos);
        build_obs(f->m, t->day, t->pos, f->obs + (size_t)k * OBS_DIM);
        build_obs(f->m, t->day + 1, next_pos, f->next_obs + (size_t)k * OBS_DIM);
        memcpy(f->action + (size_t)k * NUM_INDICES, t->action, sizeof t->action);
        f->reward[k] = t->reward;
        f->done[k] = t->done;
        f->episode_end[k] = t->episode_end;
        f->regime[k] = f->m->regime[t->day];
    }
    fh_replay_rows r = FH_REPLAY_ROWS_INIT;
    r.num_rows = 1;
    r.num_envs = (uint32_t)f->n;
    r.obs = f->obs;
    r.action = f->action;
    r.reward = f->reward;
    r.done = f->done;
    r.next_obs = f->next_obs;
    r.regime = f->regime;
    r.episode_end = f->episode_end;
    check(fh_pipeline_insert(p, &r), "fh_pipeline_insert");
}
