// How the CUDA executor forms CQL's part of the branch heads' gradient (cuda/cql.cu): plain data
// here so that the memory plan counts the buffers it allocates.
#pragma once
#include <cstdint>

#include "config.hpp"

namespace fh {

// k_cql_grad: each block takes chunks of kCqlGradRows rows (its dzc in shared memory, NB·A floats
// a row) and sums dU_b = dzc_bᵀ g_b and de_b into one partial row; at most kCqlGradMaxBlocks.
constexpr uint32_t kCqlGradRows = 64, kCqlGradMaxBlocks = 256;

// Trial switch FOXHUNT_CQL_GRAD = gemm (the default: one cuBLAS GEMM per branch and column
// sums) | fused (k_cql_grad, where NB·A ≤ 192 so that a chunk's dzc fits 48 KiB); any other
// value fails with FH_ERR_BAD_VALUE.
bool cql_grad_fused(const Dims &d);
// k_cql_grad's blocks: one per chunk of rows, at most kCqlGradMaxBlocks.
uint32_t cql_grad_blocks(const Dims &d);
// Doubles of one block's partial row: NB·A·HB of dU, NB·A of de.
uint64_t cql_grad_partial_doubles(const Dims &d);

}  // namespace fh
