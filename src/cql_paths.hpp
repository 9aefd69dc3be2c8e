// How the CUDA executor sums CQL's part of the branch heads' gradients (SPEC §5.5 step 5,
// cuda/cql.cu): plain data here so that the memory plan counts the partial rows it writes.
#pragma once
#include <cstdint>

#include "config.hpp"

namespace fh {

// The one pass (cql.cu, k_cql_head_sums): dU_b = dzcᵀ g_b and de_b = Σ_i dzc_b of every branch
// in one launch, blocks of kCqlHeadRows rows, at most kCqlHeadBlocks blocks a branch (each
// takes every kCqlHeadBlocks-th chunk of rows), then one final reduction. Its limit on the
// actions a branch has: a thread holds A sums.
constexpr uint32_t kCqlHeadRows = 64, kCqlHeadBlocks = 128, kCqlHeadMaxA = 8;

// Whether the one pass runs (else NB cuBLAS GEMMs dU_b = dzcᵀ g_b and a column sum): a trial
// until its timing is in bench/results. FOXHUNT_CQL_GRADS = gemm (the default) or pass; the pass
// needs A <= kCqlHeadMaxA. Any other value fails with FH_ERR_BAD_VALUE.
bool cql_head_pass(const Dims &d);
// The pass's blocks a branch: one per chunk of kCqlHeadRows rows, at most kCqlHeadBlocks.
uint32_t cql_head_blocks(uint32_t B);
// The doubles of CQL's partial sums (CudaStep::cql_part): the pass's rows, [NB][blocks][A·HB +
// A], or the column sum's, [NB][colsum chunks][A].
uint64_t cql_partial_doubles(const Dims &d);

}  // namespace fh
