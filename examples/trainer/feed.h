/* Where the training batches come from: the one module that knows how transitions reach the
 * step.
 *
 * The pipeline owns the replay (SPEC v1.3 §2.1, §5.0): every lockstep environment step is one
 * row of E transitions, materialised here as the [E, ...] arrays of an fh_replay_rows and
 * appended with fh_pipeline_insert(). Each training step then draws its own batch from that
 * replay inside the library (fh_pipeline_train()), so nothing is sampled or uploaded on the
 * host, and the replay is saved with the checkpoint (FH_SAVE_REPLAY), not by the trainer.
 * The trainer has no goals (goal_dim = 0), so the replay's HER goals do not apply. */
#ifndef FOXHUNT_TRAINER_FEED_H
#define FOXHUNT_TRAINER_FEED_H

#include <stdint.h>

#include <foxhunt.h>

#include "market.h"

/* One environment's transition, by its day and positions: obs is a pure function of them
 * (market.h's build_obs), built only when the row is inserted. */
typedef struct transition {
    int32_t day;                 /* s = obs(day, pos), s' = obs(day + 1, action - 1) */
    int32_t action[NUM_INDICES];
    int8_t pos[NUM_INDICES];
    float reward;
    uint8_t done;                /* s' is terminal (see envs_advance in train.c) */
    uint8_t episode_end;         /* the episode ended here: terminated or truncated */
} transition;

typedef struct feed feed;

/* Staging for rows of num_envs transitions (the pipeline's replay_envs). */
feed *feed_create(const market *m, int num_envs);
void feed_free(feed *f);

/* Append the row of the num_envs environments' transitions of one time step to p's replay. */
void feed_insert(feed *f, fh_pipeline *p, const transition *row);

#endif
