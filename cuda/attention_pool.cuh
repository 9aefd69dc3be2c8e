// The pooled part of the attention model's residual stream for one transition, shared by the
// kernels that produce it (attention_common.cu's k_attn_pool_aug, the tensor-core forward).
#pragma once
#include "attention_paths.hpp"

namespace fh::cuda::attn {

// One warp, transition x̃_i = xi: aug_i = [stok_i | g_i | 1] with stok = Σ_{t<To} tok_t (in t
// order), and pool_i = (ebar + Wt stok + Wg g) / T + bo, i.e. the mean over tokens of e_t plus bo
// (the ā Woᵀ part of the pooled residual stream is added by a GEMM afterwards). pool_i null: aug
// only (the factored head, attention_head_factored.cu, reads aug and never pool).
template <class GT>
__device__ __forceinline__ void pool_aug_row(const GT &g, const float *__restrict__ xi,
                                             const float *__restrict__ comp,
                                             const float *__restrict__ Wt,
                                             const float *__restrict__ Wg,
                                             const float *__restrict__ bo, float *pool_i,
                                             float *ai, int lane) {
    // The token sum in t order, its loads issued eight at a time ahead of the adds (a load per
    // add waited out each load's latency in turn).
    for (int k = lane; k < g.td; k += 32) {
        float s = 0.0f;
        int t = 0;
        for (; t + 8 <= g.To; t += 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = __ldg(xi + (t + u) * g.td + k);
#pragma unroll
            for (int u = 0; u < 8; ++u) s = __fadd_rn(s, v[u]);
        }
        for (; t < g.To; ++t) s = __fadd_rn(s, __ldg(xi + t * g.td + k));
        ai[k] = s;
    }
    for (int k = lane; k < g.G; k += 32) ai[g.td + k] = __ldg(xi + g.O + k);
    if (lane == 0) ai[g.na - 1] = 1.0f;
    if (!pool_i) return;
    __syncwarp();
    const float Tf = (float)g.T;
    for (int a = lane; a < g.d; a += 32) {
        float e = __ldg(comp + g.c_eb + a);
        for (int k = 0; k < g.td; ++k) e = fmaf(__ldg(Wt + (size_t)a * g.td + k), ai[k], e);
        for (int k = 0; k < g.G; ++k) e = fmaf(__ldg(Wg + (size_t)a * g.G + k), ai[g.td + k], e);
        pool_i[a] = __fadd_rn(__fdiv_rn(e, Tf), __ldg(bo + a));
    }
}

}  // namespace fh::cuda::attn
