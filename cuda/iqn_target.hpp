// IQN's target pass fused on tensor cores (cuda/iqn_target.cu), for TF32 mode at the default
// widths: Z̄(x̃', τ') [B, N'] from ψ̄ without intermediate buffers.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "config.hpp"

namespace fh::cuda::iqn {

struct TargetArgs {
    const float *psi;                       // [B, 128] ψ̄ = SiLU(x̃' W̄ψᵀ + b̄ψ)
    const float *Wphi, *bphi, *Wm, *bm;     // target net: W̄φ [128, 64], b̄φ, W̄m [128, 128], b̄m
    const float *wz, *bz;                   // w̄_z [128], b̄_z [1]
    uint64_t seed;
    const uint64_t *step;                   // device step counter (Philox c2)
    int B, Nt;
    float *zt;                              // out [B, N'], row i·N' + m
};

// iqn_hidden = 128 and iqn_cos = 64: the shapes the kernel is written for.
bool target_fused_fits(const Dims &d);
int target_fused_blocks(size_t rows);  // grid size for B·N' rows on the current device
void target_fused_prepare();            // opt into the kernel's shared memory (once)
void target_fused(const TargetArgs &a, int blocks, cudaStream_t s);

}  // namespace fh::cuda::iqn
