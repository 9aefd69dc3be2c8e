// The per-(transition, head) part of the attention learner (cuda/attention.cu), in kernel
// families ("paths") that compute the same two things:
//   forward:  ā [B, d], the mean over tokens of each head's attention output,
//             ā_h = (1/T) Σ_s c_s v_s with c_s = Σ_t A[t, s] (column sums of the softmax);
//   backward: from dā [B, d], the three batch sums of the per-token gradients dqkv_{i,t}
//             S [T, 3d] = Σ_i dqkv_{i,t},  M1 [3d, td] = Σ_{i,t<To} dqkv_{i,t} tok_{i,t}ᵀ,
//             M2 [3d, G] = Σ_i dqkv_{i,To} g_iᵀ,
//             as rows of partial sums [rows, pw] (pw = T·3d + 3d·td + 3d·G) that the learner
//             reduces in a fixed order.
// q, k, v of every token come from the composite weights of attention.cu (Wc = W Wt, Wgc = W Wg,
// cc_t = W e0_t + b): qkv_t = Wc tok_t + cc_t (obs tokens), Wgc g + cc_To (the goal token).
//
// Paths (attention.cu picks one at creation; FOXHUNT_ATTN_KERNELS overrides it):
//   TC        tensor cores, TF32 mma.sync (attention_tc.cu): T ≤ 32, d_head ≤ 16,
//             attn_token_dim + goal_dim ≤ 16, heads ≤ 8 — the default config (its geometry
//             compiled into the kernels) and its neighbours; in BF16 mode bfloat16 products
//             (attention_bf16.cuh)
//   TC_SPLIT  the same with split TF32 (3 products per tile): float32 accuracy, strict mode
//   GENERAL   float32 SIMT, every config the CPU backend accepts (attention_general.cu)
// (The SIMT kernels these replaced were measured side by side before they were deleted:
// bench/results/h200-2026-12-01-attention-before-after.json.)
#pragma once
#include <cstddef>
#include <memory>

#include <cuda_runtime.h>

#include "learners.hpp"

namespace fh::cuda::attn {

using Kernels = AttnKernels;
const char *kernels_name(Kernels k);

// Sizes of one config, shared by the host code and every path's kernels.
struct Geom {
    int B, D, O, G, td, To, T, d, d3, heads, dh, hh;
    int na;       // columns of aug: td + G + 1
    float scale;  // 1/√dh, as the CPU's score_scale
    // composite buffer: Wc [3d, td] at 0, Wgc [3d, G] at c_wg, cc [T, 3d] at c_cc, ebar [d] at c_eb
    int c_wg, c_cc, c_eb, c_total;
    int pw;       // floats per partial row: S [T, 3d] | M1 [3d, td] | M2 [3d, G]
};

struct FwdArgs {
    const float *x;      // [B, D] x̃
    const float *comp;   // composites (layout above)
    const float *Wt, *Wg, *bo;
    float *abar;         // out [B, d]
    float *pool;         // out [B, d]: ē + bo (ā Woᵀ is added by a GEMM afterwards); null:
                         // not written (the factored head needs no pool)
    float *aug;          // out [B, na]: [Σ_{t<To} tok_t | g | 1]
    int ld;              // the row stride of abar, pool and aug (columns of one matrix)
};

struct BwdArgs {
    const float *x, *comp;
    const float *dabar;  // [B, d] dL/dā
    float *partial;      // out [rows(), pw]
};

class Path {
public:
    virtual ~Path() = default;
    virtual Kernels kind() const = 0;
    virtual size_t scratch_bytes() const { return 0; }  // device scratch the path needs
    virtual void bind_scratch(void *) {}
    virtual int partial_rows() const = 0;
    virtual void forward(const FwdArgs &a, cudaStream_t s) = 0;
    virtual void backward(const BwdArgs &a, cudaStream_t s) = 0;
};

// The tensor-core path's products: TF32, split TF32 (TC_SPLIT), or bfloat16 (FH_MATH_BF16's,
// attention_bf16.cuh).
enum class Products { TF32, SPLIT, BF16 };

// nullptr when the config is outside what the path supports.
std::unique_ptr<Path> make_tc_path(const Geom &g, Products prod);
std::unique_ptr<Path> make_general_path(const Geom &g);

// The composites of attention.cu's header, step 1, into comp (layout of Geom), float64 sums
// (attention_factors.cu).
void composites(const Geom &g, const float *W, const float *b, const float *Wt, const float *bt,
                const float *Wg, const float *bg, const float *P, float *comp, cudaStream_t s);

// The parameter gradients of step 4 from the reduced batch sums (attention_factors.cu).
struct FinArgs {
    const float *W, *Wt, *bt, *Wg, *bg, *P;  // parameters (Wg, bg null when G = 0)
    const float *tot;                        // S [T, 3d] | M1 [3d, td] | M2 [3d, G]
    // Blocks of the weight-gradient GEMM's product (attention.cu), rows ldG apart: R [d, na],
    // dWr1 [hh, d], dWo [d, d]; the last two are copied into gWr1 and gWo.
    const float *R, *dWr1, *dWo;
    int ldG, hh;
    float *gWr1, *gWo;
    float *gW, *gb, *gP, *gWt, *gWg, *gbo;   // gradient slices (gWg null when G = 0)
    float *gbt, *gbg;                        // dbt = Σ_{t<To} dP[t], dbg = dP[To] (null: G = 0)
};
void param_grads(const Geom &g, const FinArgs &f, cudaStream_t s);

// pool and aug of FwdArgs (one warp per transition), for the paths whose forward kernel does
// not write them.
void pool_aug(const Geom &g, const FwdArgs &a, cudaStream_t s);

// Transitions per block so that `blocks_of_kernel` blocks fill whole waves of the device
// (resident blocks per SM × SMs), about `target` per block: a kernel whose blocks walk through
// their transitions one after another pays a whole wave for a partly filled last one.
int wave_samples_per_block(const void *kernel, int threads, size_t smem, int B, int target);

}  // namespace fh::cuda::attn
