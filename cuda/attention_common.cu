// Pieces of the attention learner that every kernel path shares (attention_paths.hpp): the
// per-transition pooled embedding and the wave sizing of per-transition blocks.
#include <algorithm>
#include <cmath>

#include "attention_paths.hpp"
#include "aux_common.cuh"

namespace fh::cuda::attn {

namespace {

constexpr int kPoolWarps = 8;

// One warp per transition: aug_i = [stok_i | g_i | 1] with stok = Σ_{t<To} tok_t (in t order),
// and pool_i = (ebar + Wt stok + Wg g) / T + bo, i.e. the mean over tokens of e_t plus bo
// (the ā Woᵀ part of the pooled residual stream is added by a GEMM afterwards).
__global__ void k_attn_pool_aug(Geom g, const float *__restrict__ x, const float *__restrict__ comp,
                                const float *__restrict__ Wt, const float *__restrict__ Wg,
                                const float *__restrict__ bo, float *__restrict__ pool,
                                float *__restrict__ aug) {
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x * kPoolWarps + (threadIdx.x >> 5);
    if (i >= g.B) return;
    const float *xi = x + (size_t)i * g.D;
    float *ai = aug + (size_t)i * g.na;
    for (int k = lane; k < g.td; k += 32) {
        float s = 0.0f;
        for (int t = 0; t < g.To; ++t) s = __fadd_rn(s, __ldg(xi + t * g.td + k));
        ai[k] = s;
    }
    for (int k = lane; k < g.G; k += 32) ai[g.td + k] = __ldg(xi + g.O + k);
    if (lane == 0) ai[g.na - 1] = 1.0f;
    __syncwarp();
    const float Tf = (float)g.T;
    for (int a = lane; a < g.d; a += 32) {
        float e = __ldg(comp + g.c_eb + a);
        for (int k = 0; k < g.td; ++k) e = fmaf(__ldg(Wt + (size_t)a * g.td + k), ai[k], e);
        for (int k = 0; k < g.G; ++k) e = fmaf(__ldg(Wg + (size_t)a * g.G + k), ai[g.td + k], e);
        pool[(size_t)i * g.d + a] = __fadd_rn(__fdiv_rn(e, Tf), __ldg(bo + a));
    }
}

}  // namespace

const char *kernels_name(Kernels k) {
    switch (k) {
    case Kernels::TC: return "tc";
    case Kernels::TC_SPLIT: return "tc-split";
    case Kernels::GENERAL: return "general";
    case Kernels::LEGACY: return "legacy";
    default: return "auto";
    }
}

void pool_aug(const Geom &g, const FwdArgs &a, cudaStream_t s) {
    const int blocks = (g.B + kPoolWarps - 1) / kPoolWarps;
    k_attn_pool_aug<<<blocks, kPoolWarps * 32, 0, s>>>(g, a.x, a.comp, a.Wt, a.Wg, a.bo, a.pool,
                                                       a.aug);
    FH_LAUNCHED("k_attn_pool_aug");
}

int wave_samples_per_block(const void *kernel, int threads, size_t smem, int B, int target) {
    int dev = 0, sms = 0, per_sm = 0;
    FH_CUDA(cudaGetDevice(&dev));
    FH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    const long long slots = (long long)std::max(sms, 1) * std::max(per_sm, 1);
    const long long waves =
        std::max(1LL, std::llround((double)B / ((double)target * (double)slots)));
    return (int)std::max(1LL, ((long long)B + waves * slots - 1) / (waves * slots));
}

}  // namespace fh::cuda::attn
