// A SiLU layer, act = SiLU(X Wᵀ + bias), in one kernel where the lane's math allows
// (cuda/linear_silu.cu: TF32 on Hopper's warpgroup tensor cores), else cuBLAS + bias_silu.
// Internal to the CUDA backend. All tensors are float32 device memory the caller owns; every
// function enqueues on stream `s` and returns without waiting. A failed launch or cuBLAS call
// throws fh::Error with FH_ERR_CUDA naming the kernel or the GEMM (common.hpp); the API
// boundary turns it into a status.
#pragma once
#include <foxhunt.h>

#include "gemm.hpp"

namespace fh::cuda {

// Whether the pipeline's lanes run their SiLU layers in the fused kernel (Blas::linear_tc): TF32
// or BF16 math on a GPU whose loaded code has the wgmma instructions (sm_90a). Elsewhere (strict
// FP32, other GPUs) cuBLAS + bias_silu. In BF16 (Blas::linear_bf16) every operand the kernel
// rounds is rounded to bfloat16 instead of TF32, and its weights come rounded so (qnet.cu's
// pack): "TF32-rounded" below means bfloat16-rounded there.
bool linear_tc_enabled(const fh_config &c);

// Whether the fused kernel pays for an [M, N] output: at least kLinearMinTiles tiles of
// 128 × 128 (about one per SM of an H200). Below that cuBLAS's smaller tiles and split-K fill the
// GPU and the kernel lost (B = 1024: wall 0.558 ms multi-stream with it everywhere, 0.509 with
// this gate, side by side; bench/results/h200-2026-12-02-linear-small-batch-before-after.json).
// The callers pass no TF32 weights where it does not pay, so the layer runs on cuBLAS.
constexpr int kLinearMinTiles = 128;
bool linear_tc_pays(int M, int N);

// X [M, K], W [N, K], bias [N], row-major float32: act [M, N] = SiLU(X Wᵀ + bias) (bias per
// column) and, when pre is not act, pre [M, N] = X Wᵀ without the bias (as bias_silu's callers
// keep it for the backward). On the handle's stream `s`.
//
// One kernel when bl.linear_tc, Wt (W rounded to TF32, round to nearest even) is given,
// N is a multiple of 128, K of 32 and every pointer 16-byte aligned; `x_rounded` says X already
// holds rounded values (an activation this kernel wrote), else the kernel rounds it. Then act is
// stored rounded to TF32 (SiLU in tile128.cuh's fast form: within 2 + 1.2|z| float ulps of
// bias_silu's expression before that rounding) and the function returns true. Otherwise
// gemm_nt (named `what` in errors) then bias_silu, act exact, and false.
bool linear_silu(const Blas &bl, cudaStream_t s, int M, int N, int K, const float *X,
                 bool x_rounded, const float *W, const float *Wt, const float *bias, float *pre,
                 float *act, const char *what);

// SPEC §4's branch heads, z_b = g_b U_bᵀ + e_b and q_b = clamp(z_b, ±clip), for branch layers
// whose column tiles of 128 are the branches (HB = 128): tile x's U [A, 128] at U + x·u_stride,
// e [A] at e + x·e_stride, z and q [M, A] at + x·M·A (z may be q: only q is written).
constexpr int kMaxHeadActions = 8, kHeadsTile = 128;
struct BranchHeads {
    const float *U = nullptr, *e = nullptr;
    size_t u_stride = 0, e_stride = 0;
    float *z = nullptr, *q = nullptr;
    int A = 0;
    float clip = 0.0f;
};
// linear_silu's fused kernel (the same conditions; act and pre may both be null: then neither
// is stored) with the heads in its epilogue: each row's A dot products over the tile's 128
// activations as TF32 tensor-core products (activations rounded as act stores them, U rounded
// the same way, float32 accumulation, the same order every run), then + e and the clamp. Returns
// false, enqueuing nothing, where the kernel cannot run or A > kMaxHeadActions.
bool linear_silu_heads(const Blas &bl, cudaStream_t s, int M, int N, int K, const float *X,
                       bool x_rounded, const float *Wt, const float *bias, float *pre, float *act,
                       const BranchHeads &hd);

// A SiLU layer's backward through its input GEMM on the same kernel (the trunk backward,
// cuda/td.cu): with Wt [N, K] TF32 values (the transpose of the next layer's weight, so that
// X Wtᵀ = dY W), dpre [M, N] = (X Wtᵀ) ⊙ SiLU'(P + bias) (P the layer's pre-activation without
// its bias; SiLU' in tile128.cuh's fast form) stored rounded to TF32, and
// partial [⌈M / 128⌉, N] (double) the column sums of the unrounded dpre over each 128-row tile,
// for reduce_partials. The same conditions as linear_silu's kernel (x_rounded likewise); returns
// false, enqueuing nothing, where it cannot run.
bool linear_dsilu(const Blas &bl, cudaStream_t s, int M, int N, int K, const float *X,
                  bool x_rounded, const float *Wt, const float *P, const float *bias, float *dpre,
                  double *partial);

}  // namespace fh::cuda
