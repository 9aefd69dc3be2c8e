// The CUDA backend's own kernels (everything of SPEC §5 except the IQL, IQN and attention
// learners), as host-side launchers that enqueue on a stream. Each mirrors its CPU task in
// src/cpu/ operation for operation where that is cheap (float products and sums in the same
// order, double accumulators where the CPU uses double), so that the strict-FP32 step differs
// from the CPU reference only by the GEMMs' summation order.
//
// Determinism: no atomics anywhere. Every reduction is a fixed grid of blocks, each summing a
// fixed range in a fixed order (double accumulators), followed by one block that sums the
// partials in a fixed tree: the same inputs give the same bits, run to run and stream to stream.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace fh::cuda::kern {

// ---- small utilities --------------------------------------------------------------------------
void set_u64(uint64_t *p, uint64_t v, cudaStream_t s);
void inc_u64(uint64_t *p, cudaStream_t s);
void fill(float *p, size_t n, float v, cudaStream_t s);

// ---- §4 network pieces ---------------------------------------------------------------------------
// pre += b (row bias), act = SiLU(pre).
void bias_silu(float *pre, float *act, const float *b, int M, int N, cudaStream_t s);

// ---- §5.5 aux tail -----------------------------------------------------------------------------------
// θ̄ ← τθ + (1−τ)θ̄ (the CPU's float expression, unfused).
void polyak(float *target, const float *online, size_t n, float tau, cudaStream_t s);
// CQL: dzc [NB][B, A] = coef_i (softmax − onehot) ⊙ mask; loss_elt [B·NB] (double).
void cql(const float *q, const float *z, const int32_t *action, const float *omega, int B,
         int NB, int A, float alpha, float q_clip, float *dzc, double *loss_elt,
         cudaStream_t s);
// dst += src (float, elementwise); with batch > 1, slice k is dst + k·s_dst, src + k·s_src.
void add_inplace(float *dst, const float *src, size_t n, cudaStream_t s, int batch = 1,
                 size_t s_dst = 0, size_t s_src = 0);
// Ensemble of {qbar_sa, v_hi, v_lo, z_mean}: mean, population variance, std_elt = sqrt(var).
void ensemble(const float *qbar_sa, const float *v_hi, const float *v_lo, const float *z_mean,
              int B, float *mean, float *var, double *std_elt, cudaStream_t s);
// Confidence (§5.5.7): ubar from the target trunk rows of x~' and the target head; writes
// dpre [B], loss_elt [B] (½e², double) and conf [B].
void confidence(const float *h2t_next, const float *wt_u, const float *bt_u, const float *var,
                const float *done, const float *u, const float *pre_u, int B, int H, float gamma,
                float *dpre, double *loss_elt, float *conf, cudaStream_t s);
// Regime scale (§5.5.8): per-regime partial sums, then the update of s_k and rho_k
// (regime_buf = [s_0..s_R-1, rho_0..rho_R-1]).
void regime_scale(const float *delta, const int32_t *regime, int B, int NB, int R, float beta,
                  float rmin, float rmax, double *scratch, float *regime_buf, cudaStream_t s);

// ---- §5.6 adam -----------------------------------------------------------------------------------------
struct AdamScalars {
    float scale, bc1, bc2;
};
// scale = clip / norm if norm > clip else 1; bc = 1 − β^t in double rounded to float, t = step+1.
void adam_prep(const float *norm, float clip, const uint64_t *step, float beta1, float beta2,
               AdamScalars *out, cudaStream_t s);
void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const AdamScalars *sc, cudaStream_t s);

// ---- §7 act ----------------------------------------------------------------------------------------------
// Per row and branch: argmax of q (ties lowest), ε-greedy with Philox purpose 5 on
// (row0 + i, b, act_call); q_values [n, NB, A] when not null.
void act_select(const float *q, int n, int NB, int A, uint64_t seed, uint32_t row0,
                uint32_t act_call, float epsilon, int32_t *actions, float *q_values,
                cudaStream_t s);

}  // namespace fh::cuda::kern
