// IQL's two value nets (SPEC §4, §5.5 step 2) with their forward pass, expectile head and the
// backward down to dpre1 fused on tensor cores (cuda/iql_fused.cu), at iql_hidden = 128 and
// D = obs_dim + goal_dim a multiple of 8 up to 128 (src/iql_paths.hpp decides). The weight
// gradients dW2 = dpre2ᵀ h1 and dW1 = dpre1ᵀ x̃ stay cuBLAS GEMMs over the batch (cuda/iql.cu).
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace fh::cuda::iql {

struct FusedArgs {
    const float *x;                 // [B, D] x̃, rows 16-byte aligned (D % 8 == 0)
    const float *params;            // [2, total]: V_hi's tensors, then V_lo's at +total
    size_t total, off_W1, off_b1, off_W2, off_b2, off_w3, off_b3;  // floats; multiples of 4
    const float *qsa;               // [B] Q̄sa
    int B, D;
    float rows;                     // W·B, the rows of the means (SPEC §9)
    float tau[2];                   // expectiles of V_hi, V_lo
    float awr_beta, awr_max;
    // Outputs ([2, B, 128]: V_hi's rows, then V_lo's at +B·128):
    float *v_out[2];                // [B] V_hi(x̃), V_lo(x̃) before the update
    float *omega;                   // [B] ω = min(exp(β (Q̄sa − V_hi)), ω_max)
    float *h1;                      // SiLU(x̃ W1ᵀ + b1)
    float *dpre2;                   // dL/d(h1 W2ᵀ + b2)
    float *dpre1;                   // dL/d(x̃ W1ᵀ + b1)
    double *part_head;              // [2, blocks, 2·128 + 2]: db2 | dw3 | db3 | Σ loss terms
    double *part_b1;                // [2, blocks, 128]: db1
    // FH_MATH_BF16: h1, dpre2 and dpre1 stored rounded to bfloat16 values (round to nearest even;
    // their only readers are dW2's and dW1's GEMMs, on bfloat16 operands); the kernel's own
    // products and sums use them unrounded, as in TF32.
    bool bf16_stores = false;
};

constexpr int kFusedRowsPerTile = 128;

int fused_blocks(int B);  // blocks per net (grid (this, 2)); at most ceil(B / 128)
void fused_prepare();     // opts the kernel into its shared memory (once)
void fused(const FusedArgs &a, int blocks, cudaStream_t s);

}  // namespace fh::cuda::iql
