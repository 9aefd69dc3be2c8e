// IQN's passes fused on tensor cores, for TF32 and BF16 modes at the default widths
// (iqn_hidden = 128, iqn_cos = 64): the target pass (cuda/iqn_target.cu) writes Z̄(x̃', τ')
// [B, N'] from ψ̄ without intermediate buffers; the online pass with its loss head
// (cuda/iqn_online.cu) writes what the backward reads and the head's gradient partials; the
// backward through m (cuda/iqn_backward.cu) turns dhpre into dφpre and dψpre without the dm
// buffer.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
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
    uint32_t row0;                          // Philox c0 of row i is row0 + i (SPEC §9)
    float *zt;                              // out [B, N'], row i·N' + m
    bool bf16;                              // FH_MATH_BF16: bfloat16 products (mma_bf16.cuh)
    bool wg = false;                        // TF32: h̄ on warpgroup products (sm_90a code)
};

struct OnlineArgs {
    const float *psi;                       // [B, 128] ψ = SiLU(x̃ Wψᵀ + bψ)
    const float *Wphi, *bphi, *Wm, *bm;     // online net: Wφ [128, 64], bφ, Wm [128, 128], bm
    const float *wz, *bz;                   // w_z [128], b_z [1]
    const float *zt;                        // [B, N'] the target pass's Z̄
    const float *r, *done;                  // [B] r̃, d̃ (after HER)
    float gamma, kappa;
    double scale;                           // 1 / (W·B·N'): the loss's mean (SPEC §9)
    uint64_t seed;
    const uint64_t *step;                   // device step counter (Philox c2)
    int B, N, Nt;
    uint32_t row0;                          // Philox c0 of row i is row0 + i (SPEC §9)
    // Outputs, rows i·N + n:
    float *tau;                             // [B·N] τ_in (purpose 2)
    float *cos;                             // [B·N, 64] cos(π k τ_in), or null: not stored
                                            // (with the fused backward iqn_dwphi.cu forms
                                            // them from τ)
    float *phi;                             // [B·N, 128] φraw = cos Wφᵀ (no bias), or null:
                                            // not stored (the fused backward recomputes it)
    float *m;                               // [B·N, 128] m = ψ ⊙ SiLU(φraw + bφ)
    float *dh;                              // [B·N, 128] dL/d(m Wmᵀ + bm)
    float *z_mean;                          // [B] mean_n Z(x̃_i, τ_in)
    double *partial;                        // [blocks, 2·128 + 2]: dbm | dw_z | db_z | Σ loss terms
    // FH_MATH_BF16: where dh16 is set, the products are bfloat16 ones (mma_bf16.cuh), and m and
    // dhpre (read only as dWm's GEMM operands, and dhpre by the backward) go there as bfloat16
    // (round to nearest even of the same floats) instead; m and dh are not written. Both set,
    // or neither.
    __nv_bfloat16 *m16, *dh16;
    bool wg;                                // TF32: h on warpgroup products (sm_90a code)
};

struct BackwardArgs {
    const float *dh;                        // [B·N, 128] dhpre (the online pass's)
    const float *Wm, *bphi;                 // online net: Wm [128, 128], bφ [128]
    const float *Wphi;                      // online net: Wφ [128, 64], for φraw (recomputed)
    const float *tau;                       // [B·N] τ_in, the online pass's
    const float *psi, *psi_pre;             // [B, 128] ψ and x̃ Wψᵀ (bias_silu leaves bψ out)
                                            // ψ 16-byte aligned: cp.async copies it at N = 8
    const float *bpsi;                      // [128] bψ, added to psi_pre
    float *phi;                             // [B·N, 128] out: dφpre = dL/d(φraw + bφ)
    float *dpsi;                            // [B, 128] out: dψpre = dL/d(x̃ Wψᵀ + bψ)
    int B, N;
    double *partial;                        // [blocks, 2·128]: dbφ | dbψ column sums
    // FH_MATH_BF16 (with OnlineArgs::dh16): dhpre is read from dh16 instead of dh, φraw and
    // dm = dhpre Wm are bfloat16 products (mma_bf16.cuh), and dφpre goes to dphi16 as bfloat16
    // (phi is not touched). Both set, or neither.
    const __nv_bfloat16 *dh16;
    __nv_bfloat16 *dphi16;
};

// Rows per tile of the fused kernels: their grids never exceed ceil(rows / this) blocks, which
// sizes their partial buffers (src/memory_plan.cpp counts them the same way).
constexpr int kFusedRowsPerTile = 128;

// Which passes run fused for a config: src/iqn_paths.hpp (iqn_hidden = 128 and iqn_cos = 64,
// the shapes the kernels are written for; for the online pass and the backward also
// 16 % iqn_n == 0: a warp's 16 rows hold whole transitions).
int fused_blocks(size_t rows);  // grid size for `rows` rows on the current device
// Opt the kernels into their shared memory (once each); the target and online passes return
// whether their warpgroup instances (TargetArgs::wg, OnlineArgs::wg) have code here (sm_90a
// loaded; only those may then be launched with wg set).
bool target_fused_prepare();
bool online_fused_prepare();
void backward_fused_prepare();
void target_fused(const TargetArgs &a, int blocks, cudaStream_t s);
void online_fused(const OnlineArgs &a, int blocks, cudaStream_t s);
// Returns the partial rows it wrote (at most `blocks`: its blocks are larger).
int backward_fused(const BackwardArgs &a, int blocks, cudaStream_t s);

// dWφ [128, 64] = dφpreᵀ cos(π k τ) over `rows` rows (cuda/iqn_dwphi.cu; TF32 products, the
// features formed from τ as the online pass forms them): dphi [rows, 128] the fused backward's
// dφpre, tau [rows] the online pass's τ. The blocks' partials (src/iqn_paths.hpp's
// iqn_dwphi_partial_floats(rows) floats; part holds part_floats) go to part, then their sum in
// block order to out. dwphi_prepare opts the kernel into its shared memory (once, outside a
// capture).
void dwphi_prepare();
void dwphi(const float *dphi, const float *tau, size_t rows, float *part, size_t part_floats,
           float *out, cudaStream_t s);
// FH_MATH_BF16's: dφpre as the fused backward's bfloat16 copy (dphi16), bfloat16 products of it
// and of the features rounded to bfloat16 (round to nearest even).
void dwphi(const __nv_bfloat16 *dphi, const float *tau, size_t rows, float *part,
           size_t part_floats, float *out, cudaStream_t s);

}  // namespace fh::cuda::iqn
