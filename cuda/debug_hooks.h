/* Test hooks of the CUDA backend (internal; not part of the C ABI, not exported from the shared
 * library). The tests link the static archive and declare these weak, so a build without CUDA
 * simply lacks them.
 *
 * The host waits of upload() and insert() are counted by fh_cuda_debug_back_pressure_waits()
 * (sync_points.hpp): they only block when both pinned staging slots are still being copied
 * from (the host more than two calls ahead of the copies); step() never blocks.
 * fh_cuda_debug_step_pending(): 1 if the most recently launched step (of any pipeline) has not
 *   finished on the GPU yet, 0 if it has, -1 if no step was launched (cudaEventQuery on the
 *   event recorded after the graph launch; it does not wait).
 */
#ifndef FOXHUNT_CUDA_DEBUG_HOOKS_H
#define FOXHUNT_CUDA_DEBUG_HOOKS_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int fh_cuda_debug_step_pending(void);
/* Nodes of child graph `child` (a ChildId: 0..6 = her, spectral, ddqn, forward, aux, adam,
 * sample) of the most recently created CUDA pipeline; -1 if none (sample: without a replay). */
long fh_cuda_debug_child_nodes(int child);
/* The fh_iql_gemm the most recently created CUDA pipeline's IQL learner actually uses (after
 * AUTO's choice and any fallback); -1 if none was created. */
int fh_cuda_debug_iql_gemm_mode(void);
/* The device buffer of the IQL learner's gradient [hi | lo] (2·layout.iql.total floats, *n) of
 * the most recently created CUDA pipeline, as its last step left it; null if none. Read it after
 * fh_pipeline_sync(), before the pipeline is destroyed or another one created. */
const float *fh_cuda_debug_iql_grad(size_t *n);
/* The device batch block of the most recently created CUDA pipeline, the batch its next (or
 * last) step's HER child reads: pointers to obs, next_obs, reward, goal, next_achieved_goal,
 * her_goal, action, regime, done ([B, ...] each, as in fh_batch); nulls if none. Read it after
 * fh_pipeline_sync(). */
void fh_cuda_debug_batch_block(void *fields[9]);

/* FH_MATH_BF16's operands stored as bfloat16 values, of the most recently created CUDA pipeline,
 * for a test of the precondition of the GEMMs that multiply them unstaged (gemm_bf16_values):
 * device pointers and float counts, in pairs (source, its rounded copy or the store itself):
 * [0] x~ (B·D floats of the [x~; x~'] buffer) and [1] HER's rounded x~ (null outside BF16);
 * [2] CQL's dzc and [3] the TD dz buffer, where CQL writes dzc rounded in BF16 (NB·B·A each);
 * [4] the branches' g of the forward child (NB·B·HB) and [5] the trunk's dpre1 (B·H), stored
 * rounded by the fused layers. Nulls if none. Read after fh_pipeline_sync(), before the
 * pipeline is destroyed or another one created. */
void fh_cuda_debug_bf16_operands(const float *ptrs[6], size_t counts[6]);

/* NCCL groups (cuda/allreduce.hpp) that CUDA pipelines of this process have enqueued under
 * stream capture so far, i.e. all-reduce points captured into step graphs: 4 per pipeline with
 * a communicator (3 with num_regimes = 1), 0 without. */
long fh_cuda_debug_nccl_groups_captured(void);

#ifdef __cplusplus
}
#endif
#endif
