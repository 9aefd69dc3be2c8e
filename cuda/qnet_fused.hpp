// One of ddqn's forward-only Q passes (SPEC §5.3) as one kernel: the trunk's two SiLU layers,
// the packed branch layers and the heads, with the activations in shared memory
// (cuda/qnet_fused.cu). Internal to the CUDA backend. All tensors are float32 device memory the
// caller owns (the pass's pack, memory_plan.hpp); the function enqueues on stream `s` and returns
// without waiting; a failed launch throws fh::Error with FH_ERR_CUDA (common.hpp).
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace fh::cuda {

struct QFusedArgs {
    const float *x;                 // [M, D] the pass's input, exact (the kernel rounds it)
    const float *W1t, *b1;          // [256, D] TF32 copy of W1 (the pass's, SN applied), b1 [256]
    const float *W2t, *b2;          // [256, 256] TF32 copy of W2, b2 [256]
    const float *Vcat, *ccat;       // [NB·128, 256] the branches' V_b rounded, side by side; [NB·128]
    const float *U, *e;             // branch b's U_b [A, 128] at U + b·ue_stride, e_b [A] likewise
    size_t ue_stride;
    int M, D, H, HB, NB, A;           // rows, x̃'s width, trunk and branch widths, branches, actions
    float clip;                     // q_clip
    float *q;                       // out [NB][M][A]: clamp(g_b U_bᵀ + e_b, ±clip)
    float *h2;                      // out, or null: h2 [M, 256] (rounded to TF32) at rows ≥ h2_from
    int h2_from;
};

// Whether the kernel serves these shapes: H = 256, HB = 128, D a multiple of 32 up to 256,
// 1 ≤ A ≤ 8, NB ≥ 1, the matrices 16-byte and the vectors 8-byte aligned. The caller runs it only
// where the lane's SiLU layers run on the wgmma kernel (Blas::linear_tc: the sm_90a code is
// loaded, TF32 math), whose results it reproduces.
bool q_fused_fits(const QFusedArgs &a);

// Enqueues the pass and returns true where q_fused_fits; else returns false, enqueuing nothing.
// Its results are bitwise those of linear_silu (trunk), linear_silu (trunk) and
// linear_silu_heads (branches) on the same operands: the same products in the same order.
bool q_forward_fused(const QFusedArgs &a, cudaStream_t s);

// Whether the fused pass pays for M rows: at least kQFusedMinTiles tiles of 64 rows (two per SM
// of an H200), below which the layer-by-layer kernels fill the GPU better.
constexpr int kQFusedMinTiles = 256;
inline bool q_fused_pays(int M) { return (M + 63) / 64 >= kQFusedMinTiles; }

}  // namespace fh::cuda
