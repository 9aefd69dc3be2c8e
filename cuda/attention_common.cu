// Pieces of the attention learner that every kernel path shares (attention_paths.hpp): the
// per-transition pooled embedding and the wave sizing of per-transition blocks.
#include <algorithm>
#include <cmath>

#include "attention_paths.hpp"
#include "attention_pool.cuh"
#include "aux_common.cuh"
#include "launch.cuh"

namespace fh::cuda::attn {

namespace {

constexpr int kPoolWarps = 8;

// One warp per transition: pool_aug_row (attention_pool.cuh).
__global__ void k_attn_pool_aug(Geom g, const float *__restrict__ x, const float *__restrict__ comp,
                                const float *__restrict__ Wt, const float *__restrict__ Wg,
                                const float *__restrict__ bo, float *__restrict__ pool,
                                float *__restrict__ aug, int ld) {
    pdl_enter();
    const int i = blockIdx.x * kPoolWarps + (threadIdx.x >> 5);
    if (i >= g.B) return;
    pool_aug_row(g, x + (size_t)i * g.D, comp, Wt, Wg, bo, pool ? pool + (size_t)i * ld : nullptr,
                 aug + (size_t)i * ld, threadIdx.x & 31);
}

}  // namespace

const char *kernels_name(Kernels k) {
    switch (k) {
    case Kernels::TC: return "tc";
    case Kernels::TC_SPLIT: return "tc-split";
    case Kernels::GENERAL: return "general";
    default: return "auto";
    }
}

void pool_aug(const Geom &g, const FwdArgs &a, cudaStream_t s) {
    const int blocks = (g.B + kPoolWarps - 1) / kPoolWarps;
    FH_LAUNCH(k_attn_pool_aug, blocks, kPoolWarps * 32, 0, s, g, a.x, a.comp, a.Wt, a.Wg, a.bo,
              a.pool, a.aug, a.ld);
}

int wave_samples_per_block(const void *kernel, int threads, size_t smem, int B, int target) {
    int per_sm = 0;
    FH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    const long long slots = (long long)sm_count() * std::max(per_sm, 1);
    const long long waves =
        std::max(1LL, std::llround((double)B / ((double)target * (double)slots)));
    return (int)std::max(1LL, ((long long)B + waves * slots - 1) / (waves * slots));
}

}  // namespace fh::cuda::attn
