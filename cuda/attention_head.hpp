// The attention learner's output projection and reward head (SPEC §4, §5.5 step 4) fused on
// tensor cores for the default widths (attn_d_model = attn_head_hidden = 64), TF32 and BF16 modes
// (cuda/attention_head.cu). Per row i of the batch:
//   pool_i = pool_in_i + Wo ā_i,  h_i = Wr1 pool_i,  r̂_i = SiLU(h_i + br1)·w_r2 + b_r2,
//   dr_i = 2 (r̂_i − r̃_i) / (W·B),  dh_i = dr_i w_r2 ⊙ SiLU'(h_i + br1),  dpool_i = Wr1ᵀ dh_i
// with per-block sums of dbr1 = Σ dh, dw_r2 = Σ dr SiLU(h + br1), db_r2 = Σ dr and Σ (r̂ − r̃)².
// It replaces two GEMMs (pool += ā Woᵀ, h = pool Wr1ᵀ), the warp-per-row head and the dpool GEMM
// of cuda/attention.cu; the weight gradients dWr1, dWo and R and dā = dpool Wo stay cuBLAS.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace fh::cuda::attn {

constexpr int kHeadFusedWidth = 64;  // attn_d_model and attn_head_hidden of this kernel
constexpr int kHeadFusedTileRows = 128;  // rows per tile; the grid has at most one block per tile

struct HeadFusedArgs {
    const float *abar;      // [B, 64] ā, 8-byte aligned
    float *pool;            // [B, 64] in: ē + bo (the forward's), out: + ā Woᵀ; 8-byte aligned
    const float *Wo, *Wr1;  // [64, 64] row-major
    const float *br1, *wr2, *br2;  // [64], [64], [1]
    const float *r;         // [B] r̃
    int B;
    float rows;             // W·B, the rows of the mean (SPEC §9)
    float *dh;              // [B, 64] out: dL/d(h + br1); 8-byte aligned
    float *dpool;           // [B, 64] out: dL/d pool; 8-byte aligned
    double *partial;        // [blocks, 2·64 + 2]: dbr1 | dw_r2 | db_r2 | Σ loss terms
    // FH_MATH_BF16: the products' operands rounded to bfloat16 (else TF32), and pool, dh and
    // dpool stored as bfloat16 values.
    bool bf16 = false;
    // Row strides (floats, even): of ā and pool, and of dh and dpool.
    int ld_in = kHeadFusedWidth, ld_out = kHeadFusedWidth;
};

// Whether the kernel runs this learner's head: TF32 or BF16 math (not strict) and the widths.
bool head_fused_fits(int math_mode, int d_model, int head_hidden);
int head_fused_blocks(int B);   // the grid (partial rows); at most ceil(B / kHeadFusedTileRows)
void head_fused(const HeadFusedArgs &a, int blocks, cudaStream_t s);

struct Geom;  // attention_paths.hpp

// The factored form (cuda/attention_head_factored.cu; attention.cu runs it wherever it fits, the
// kernel above where aug is wider than kHeadFactoredMaxNa): the same head with
// h = C1 ā + C2 aug and dā = dh C1 (C1 = Wr1 Wo, C2 = Wr1 M), no pool or dpool formed; the
// weight gradients from G = dhᵀ [ā | aug] (head_factored_grads).
// src/memory_plan.cpp's attention_head_factored_floats repeats this bound and the width.
constexpr int kHeadFactoredMaxNa = 32;  // aug's columns (td + G + 1) the kernel stages

struct HeadFactoredArgs {
    const float *abar, *aug;       // [B, 64] ā and [B, na] aug, rows ld_in apart, 8-byte aligned
    const float *C1, *C2;          // [64, 64], [64, na] from head_factored_composites
    const float *br1, *wr2, *br2;  // [64], [64], [1]
    const float *r;                // [B] r̃
    int B, na;
    float rows;                    // W·B
    float *dh;                     // [B, 64] out (rows 64 apart): dL/d(h + br1)
    float *dabar;                  // [B, 64] out (rows 64 apart): dL/dā
    double *partial;               // [blocks, 2·64 + 2], as HeadFusedArgs
    bool bf16 = false;
    int ld_in = 0;
};

bool head_factored_fits(int na);
// Floats of C1 | C2 | G (G [64, ldG]).
size_t head_factored_floats(int na, int ldG);
void head_factored_composites(const Geom &g, const float *Wo, const float *Wr1, const float *Wt,
                              const float *Wg, const float *bo, const float *comp, float *C1,
                              float *C2, cudaStream_t s);
void head_factored(const HeadFactoredArgs &a, int blocks, cudaStream_t s);
// G [64, ldG] = dhᵀ [ā | aug] (cuBLAS, the caller's) → dWr1, dWo and R into prod (rows ldP apart).
void head_factored_grads(const Geom &g, const float *G, int ldG, const float *Wo,
                         const float *Wr1, const float *Wt, const float *Wg, const float *bo,
                         const float *comp, float *prod, int ldP, cudaStream_t s);

}  // namespace fh::cuda::attn
