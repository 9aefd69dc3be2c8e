/* Test hooks of the CUDA backend (internal; not part of the C ABI, not exported from the shared
 * library). The tests link the static archive and declare these weak, so a build without CUDA
 * simply lacks them.
 *
 * fh_cuda_debug_host_waits(): how many times upload(), insert() or step() of any CUDA pipeline
 *   in this process blocked the host on the GPU. upload() and a host insert() only block when
 *   both of their pinned staging slots are still being copied from (the host more than two
 *   calls ahead of the copies), and step() never blocks. read/write/metrics/timings/act are the places
 *   that wait, and they are not counted here.
 * fh_cuda_debug_step_pending(): 1 if the most recently launched step (of any pipeline) has not
 *   finished on the GPU yet, 0 if it has, -1 if no step was launched (cudaEventQuery on the
 *   event recorded after the graph launch; it does not wait).
 */
#ifndef FOXHUNT_CUDA_DEBUG_HOOKS_H
#define FOXHUNT_CUDA_DEBUG_HOOKS_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t fh_cuda_debug_host_waits(void);
int fh_cuda_debug_step_pending(void);
/* Nodes of child graph `child` (a ChildId: 0..6 = her, spectral, ddqn, forward, aux, adam,
 * sample) of the most recently created CUDA pipeline; -1 if none (sample: without a replay). */
long fh_cuda_debug_child_nodes(int child);
/* The fh_iql_gemm the most recently created CUDA pipeline's IQL learner actually uses (after
 * AUTO's choice and any fallback); -1 if none was created. */
int fh_cuda_debug_iql_gemm_mode(void);
/* The device batch block of the most recently created CUDA pipeline, the batch its next (or
 * last) step's HER child reads: pointers to obs, next_obs, reward, goal, next_achieved_goal,
 * her_goal, action, regime, done ([B, ...] each, as in fh_batch); nulls if none. Read it after
 * fh_pipeline_sync(). */
void fh_cuda_debug_batch_block(void *fields[9]);

#ifdef __cplusplus
}
#endif
#endif
