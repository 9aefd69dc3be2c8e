/* Test hooks of the CUDA backend (internal; not part of the C ABI, not exported from the shared
 * library). The tests link the static archive and declare these weak, so a build without CUDA
 * simply lacks them.
 *
 * fh_cuda_debug_host_waits(): how many times upload() or step() of any CUDA pipeline in this
 *   process blocked the host on the GPU. By design this stays 0: upload() only blocks when all
 *   of its pinned staging slots are still being copied from (the host more than two uploads
 *   ahead of the GPU), and step() never blocks. read/write/metrics/timings/act are the places
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
/* Nodes of child graph `child` (schedule order: her, spectral, ddqn, forward, aux, adam) of the
 * most recently created CUDA pipeline; -1 if none. */
long fh_cuda_debug_child_nodes(int child);
/* The fh_iql_gemm the most recently created CUDA pipeline's IQL learner actually uses (after
 * AUTO's choice and any fallback); -1 if none was created. */
int fh_cuda_debug_iql_gemm_mode(void);
/* NCCL groups (cuda/allreduce.hpp) that CUDA pipelines of this process have enqueued under
 * stream capture so far, i.e. all-reduce points captured into step graphs: 4 per pipeline with
 * a communicator (3 with num_regimes = 1), 0 without. */
long fh_cuda_debug_nccl_groups_captured(void);

#ifdef __cplusplus
}
#endif
#endif
