// CQL's part of the branch heads' gradients in one pass (cuda/cql.cu; the trial of
// src/cql_paths.hpp). Internal to the CUDA backend; every pointer is device memory the caller
// owns; enqueued on stream `s` without waiting; a failed launch throws fh::Error with
// FH_ERR_CUDA (common.hpp).
#pragma once
#include <cuda_runtime.h>

namespace fh::cuda {

// For each of NB branches b: dU_b = dzc_bᵀ g_b [A, HB] and de_b = Σ_i dzc_b [A] (SPEC §5.5 step
// 5's gradient on U_b, e_b, before it is added to the TD part). dzc: [NB][B, A] float32; g:
// [NB][B, HB] float32 (the branch layers' outputs); dU: [NB][A, HB] and de: [NB][A], written
// (not added to). part: scratch of NB · cql_head_blocks · (A·HB + A) doubles (cql_paths.hpp).
// Exact float products summed in double over each block's rows in row order, then over the
// blocks in reduce_partials' fixed pattern, rounded once to float: no atomics, the same bits
// every run. Needs 1 <= A <= kCqlHeadMaxA, B >= 1, HB >= 1 (FH_ERR_INTERNAL otherwise, nothing
// enqueued).
void cql_head_sums(const float *dzc, const float *g, int B, int A, int HB, int NB, double *part,
                   float *dU, float *de, cudaStream_t s);

}  // namespace fh::cuda
