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

// ---- §5.1 HER ------------------------------------------------------------------------------------
struct HerArgs {
    uint32_t B, O, G, D, NB;
    uint64_t seed;
    const uint64_t *step;
    float her_ratio, her_epsilon;
    int sparse, terminal_on_success;
    const float *obs, *next_obs, *reward, *goal, *nag, *her_goal;
    const int32_t *action, *regime;
    const uint8_t *done;
    float *x2;          // [2B, D]: x~ rows 0..B-1, x~' rows B..2B-1
    float *r, *done_f;  // [B]
    float *relabelled;  // [B] 0/1, summed for the metric
    int32_t *action_out, *regime_out;  // private copies: the upload may overwrite the batch
};
void her(const HerArgs &a, cudaStream_t s);

// ---- §5.2 spectral ------------------------------------------------------------------------------
// One power iteration on W [rows, cols] from u_in (u_out may alias it): v = normalize(Wᵀu),
// u = normalize(W v), sigma = uᵀ W v, sigma_t = uᵀ Wt v (Wt may be null). `row` is a [rows]
// double scratch. Writes v [cols], u_out, sigma[0], and sigma_t[0] when Wt is given.
void power_iteration(const float *W, const float *Wt, int rows, int cols, const float *u_in,
                     float *u_out, float *v, double *row, float *sigma, float *sigma_t,
                     cudaStream_t s);
// out = W / *sigma (and out_t = Wt / *sigma_t when Wt is given), n elements.
void sn_scale(const float *W, const float *sigma, float *out, const float *Wt,
              const float *sigma_t, float *out_t, size_t n, cudaStream_t s);
// dW = (dW − ip·u vᵀ) / sigma in place (SPEC §5.2 backward; ip = ⟨dWsn, Wsn⟩ on the device).
void sn_backward(float *dW, const float *ip, const float *u, const float *v, const float *sigma,
                 int rows, int cols, cudaStream_t s);

// ---- §4 network pieces ---------------------------------------------------------------------------
// pre += b (row bias), act = SiLU(pre).
void bias_silu(float *pre, float *act, const float *b, int M, int N, cudaStream_t s);
// z += e, q = clamp(z, ±clip).
void bias_clamp(float *z, float *q, const float *e, int M, int N, float clip, cudaStream_t s);
// Confidence head: pre_u = h2 · w_u + b_u (float dot), u = softplus(pre_u).
void conf_head(const float *h2, const float *w_u, const float *b_u, int M, int H, float *pre_u,
               float *u, cudaStream_t s);

// ---- §5.3 ddqn ------------------------------------------------------------------------------------
// a*[i, b] = argmax_a q_b[i, a] (ties: lowest); q is [NB][M, A] with branch stride M·A.
void argmax(const float *q, int M, int NB, int A, int32_t *out, cudaStream_t s);
// y [B, NB], qbar_sa [B]; qt is the target's [NB][2B, A] (rows B.. are x~').
void ddqn_join(const float *qt, const int32_t *a_star, const int32_t *action, const float *r,
               const float *done, int B, int NB, int A, float gamma, float *y, float *qbar_sa,
               cudaStream_t s);

// ---- §5.4 TD loss ----------------------------------------------------------------------------------
// Writes delta [B, NB], dz [NB][B, A], loss_elt [B·NB] (w·huber, double) and q_elt [B·NB].
void td_loss(const float *q, const float *z, const float *y, const int32_t *action,
             const int32_t *regime, const float *rho, int B, int NB, int A, float kappa,
             float q_clip, float *delta, float *dz, double *loss_elt, double *q_elt,
             cudaStream_t s);

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
