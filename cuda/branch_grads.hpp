// A branch's gradients below its head in one pass (SPEC §5.4's branch backward without dV):
// the kernel and its final reduction live in cuda/td.cu. Internal to the CUDA backend; all
// tensors are float32 device memory the caller owns, enqueued on stream `s` without waiting; a
// failed launch throws fh::Error with FH_ERR_CUDA (common.hpp).
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace fh::cuda {

struct BranchGradArgs {
    const float *dz;    // [B, A] dL/dz_b (the TD loss's, SPEC §5.4)
    const float *g;     // [B, HB] g_b = SiLU(preg + c_b)
    const float *preg;  // [B, HB] h2 V_bᵀ, the branch layer's product without its bias
    const float *U;     // [A, HB] the head's weights U_b
    const float *c;     // [HB] the branch layer's bias c_b
    int B, HB, A;
    int ld;             // dpre's row stride (HB, or NB·HB where the branches sit side by side)
    float *dpre;        // out [B, ld]: dpre_b = (dz U_b) ⊙ SiLU'(preg + c_b)
    double *part;       // scratch: branch_grad_partials(B, HB, A) doubles
    float *dU, *dc, *de;  // out: dU_b = dzᵀ g [A, HB], dc_b = Σ_i dpre [HB], de_b = Σ_i dz [A]
    // FH_MATH_BF16: dpre stored rounded to bfloat16 (round to nearest even; its readers are
    // GEMMs on bfloat16 operands, which would round it so), dc summed from the unrounded values.
    bool dpre_bf16 = false;
};

// The scratch `part` needs, in doubles.
size_t branch_grad_partials(int B, int HB, int A);

// Enqueues the pass and its reduction and returns true for 1 ≤ A ≤ 8; else enqueues nothing and
// returns false. dg = dz U_b is a float32 fused multiply-add chain over a = 0 .. A−1 per element;
// dpre's expression is dsilu_colsum's; dU, dc and de are sums in double over each block's rows in
// order, then over the blocks in reduce_partials' fixed pattern: no atomics, the same bits every
// run.
bool branch_grads(const BranchGradArgs &a, cudaStream_t s);

}  // namespace fh::cuda
