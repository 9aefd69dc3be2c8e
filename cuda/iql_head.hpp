// IQL's expectile head on the unfused path (SPEC §5.5 step 2; cuda/iql.cu runs it where the fused
// kernel of iql_fused.cu does not): per row of each net V = h2·w3 + b3, ũ = Q̄sa − V, the
// expectile loss |τ − [ũ < 0]| ũ² (Kostrikov et al. 2021), ω = min(exp(β ũ_hi), ω_max) and
// dpre2 = (dV w3) ⊙ SiLU'(pre2 + b2), with per-block partials of db2, dw3, db3 and the loss
// terms (float64, summed in block order by the caller). A warp per row, no atomics.
#pragma once
#include <cstddef>

namespace fh::cuda::iql {

struct HeadArgs {
    const float *h2;      // [2, B, Hi]
    float *pre2;          // [2, B, Hi]: in h1 W2ᵀ (bias_silu leaves b2 out), out dpre2
    const float *params;  // [2, total]
    size_t total, off_w3, off_b3, off_b2;
    const float *qsa;     // [B]
    int B, Hi;
    float rows;           // W·B, the rows of the mean (SPEC §9)
    float tau[2];
    float awr_beta, awr_max;
    float *v_out[2];      // v_hi, v_lo [B]
    float *omega;         // [B]
    double *partial;      // [2, blocks, 2·Hi + 2]: db2 | dw3 | db3 | Σ loss terms
    int rows_per_blk;
};

// The head's kernel for iql_hidden = Hi: the lane's columns in registers up to Hi = 128 (IQL
// 0.180 → 0.162 ms at B = 16384 on the H200, bench/results/h200-2026-12-02-iql-head-before-
// after.json), the shared-memory one beyond. Launch it with launch_pdl on grid (blocks, 2 nets),
// a.rows_per_blk rows a block, and aux::plan_rows's shared memory; its argument is one HeadArgs.
const void *head_kernel(int Hi);

}  // namespace fh::cuda::iql
