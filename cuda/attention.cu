// SPEC §5.5 step 4 on the GPU: the attention reward model of SPEC §4 (the CPU reference is
// src/cpu/attention.cpp), L = mean_i (r̂(x̃_i) − r̃_i)², full backward, Adam (lr_aux).
//
// The model is evaluated exactly, but factored so that no [B·T, d] tensor is ever stored and no
// GEMM runs over B·T rows (at the default size those would be 128 MiB each and ~40 GFLOP):
//
// 1. Composite projections. e_t = Wt tok_t + e0_t with e0_t = bt + P[t] (obs tokens) or
//    e_goal = Wg g + e0_To with e0_To = bg + P[To]. With W = [Wq; Wk; Wv] [3d, d] and
//    b = [bq; bk; bv] (contiguous in the layout), qkv_t = W e_t + b = Wc tok_t + cc_t where
//    Wc = W Wt [3d, td], Wgc = W Wg [3d, G] (goal token), cc_t = W e0_t + b [T, 3d]: K = td (4)
//    per projection instead of d (64). Wc, Wgc, cc and ebar = Σ_t e0_t are computed once per
//    step from the current parameters (k_attn_comp, float64 sums).
// 2. Mean pooling commutes with the output projection: pool = mean_t (e_t + attn_t Woᵀ + bo)
//    = ē + ā Woᵀ + bo with ā = mean_t attn_t and ē = (Wt Σ_t tok_t + Wg g + ebar) / T. Per head,
//    ā_h = Σ_s c_s v_s with c_s = (1/T) Σ_t A[t, s] (column means of the softmax).
// 3. The gradient reaching the attention outputs is the same for every query row:
//    d attn_t = dā / T =: γ. Hence dv_s = (Σ_t A[t,s]) γ, dA[t, s] = γ·v_s =: β_s,
//    dS[t, s] = A[t,s] (β_s − Σ_s' A[t,s'] β_s') · (1/√dh), dq_t = Σ_s dS[t,s] k_s,
//    dk_s = Σ_t dS[t,s] q_t (the scale folded into dS).
// 4. The weight gradients need only three sums over the batch of the per-token dqkv_{i,t}:
//    S[t] = Σ_i dqkv_{i,t} [T, 3d],  M1 = Σ_{i,t<To} dqkv_{i,t} tok_{i,t}ᵀ [3d, td],
//    M2 = Σ_i dqkv_{i,To} g_iᵀ [3d, G], and R = Σ_i dpool_i [stok_i | g_i | 1]ᵀ [d, td + G + 1]
//    (one small GEMM); then (k_attn_fin, float64):
//      dW[c, a] = Σ_k M1[c,k] Wt[a,k] + Σ_k M2[c,k] Wg[a,k] + Σ_t S[t,c] e0_t[a]
//      db[c] = Σ_t S[t, c]
//      dP[t, a] = Σ_c W[c,a] S[t,c] + R[a, last] / T
//      dWt[a, k] = Σ_c W[c,a] M1[c,k] + R[a, k] / T,   dWg[a, k] = Σ_c W[c,a] M2[c,k] + R[a, td+k] / T
//      dbo = R[:, last],  dbt = Σ_{t<To} dP[t],  dbg = dP[To]
//    (e_t's gradient is de_t = Wᵀ dqkv_t + dpool / T, the second term from the residual.)
//
// One step:
//   k_attn_comp                                  Wc, Wgc, cc, ebar
//   k_attn_fwd  (block of ~16 transitions, see wave_spb; warp per head, lane per token): q, k, v
//               from the composites, softmax, ā; per transition ē + bo into pool, [stok | g | 1] into aug
//   pool += ā Woᵀ          nt M=B N=d  K=d  (beta 1)
//   h = pool Wr1ᵀ          nt M=B N=hh K=d
//   k_attn_head (warp per row): r̂, loss, dr, dh = (dr w_r2) ⊙ SiLU'; partials of br1, w_r2, b_r2
//   dWr1 = dhᵀ pool        tn M=hh N=d K=B
//   dpool = dh Wr1         nn M=B N=d  K=hh
//   dWo = dpoolᵀ ā         tn M=d  N=d K=B
//   dā = dpool Wo          nn M=B N=d  K=d   (into ā's buffer)
//   R = dpoolᵀ aug         tn M=d  N=td+G+1 K=B
//   k_attn_bwd  (as k_attn_fwd, recomputing q, k, v and A): dq, dk, dv per token, accumulated
//               into per-block S, M1, M2 (each warp owns its heads' columns: no atomics)
//   reduce the block partials; k_attn_fin, k_attn_fin2; Adam.
// The softmax, sums and products are float32 (the CPU uses float64 inside the softmax); the
// factoring changes the rounding, not the function.
//
// Supported on CUDA: T ≤ 64 tokens, d_head ≤ 32, attn_token_dim ≤ 16 and goal_dim ≤ 16, and the
// per-block shared memory (see Impl::layout) within the device's limit; other configs are refused
// at creation with FH_ERR_BAD_DIMENSION (the CPU backend runs them).
#include <algorithm>
#include <cmath>
#include <memory>

#include "aux_common.cuh"
#include "learners.hpp"

namespace fh::cuda {

// Geometry shared by the host code and the kernels (a named namespace: Impl holds these).
namespace attn_detail {

constexpr int kSamplesPerBlock = 16;   // about this many transitions per block of k_attn_fwd/bwd
constexpr int kHeadRowsPerWarp = 8;

struct AttnGeom {
    int B, D, O, G, td, To, T, d, d3, heads, dh, hh, na;
    int tdm;    // floats per token row in shared memory: max(td, G)
    int Tp;     // row stride of the [T, T] probabilities: T | 1 (odd: no bank conflicts)
    int dqp;    // row stride of the [T, 3 dh] dqkv rows: (3 dh) | 1
    int nw;     // warps per block (warp w takes heads w, w + nw, ...)
    int spb;    // transitions per block
    float scale;  // 1/√dh, as the CPU's score_scale
    // composite buffer: Wc [3d, td] at 0, Wgc [3d, G] at c_wg, cc [T, 3d] at c_cc, ebar [d] at c_eb
    int c_wg, c_cc, c_eb, c_total;
    // per-warp shared memory (floats from the warp's base)
    int w_size, w_tok, w_stok, w_q, w_k, w_v, w_p, w_csum, w_bet;
    // k_attn_bwd: block accumulators S | M1 | M2 after the warps, pw floats
    int b_acc, pw;
};

__host__ __device__ inline int al4(int x) { return (x + 3) & ~3; }

using FwdKernel = void (*)(AttnGeom, const float *, const float *, const float *, const float *,
                           const float *, float *, float *, float *);
using BwdKernel = void (*)(AttnGeom, const float *, const float *, const float *, float *);

}  // namespace attn_detail

namespace {

using namespace attn_detail;

// ---- per-warp building blocks --------------------------------------------------------------

// Token rows of transition x̃_i: tok[t][k] = x̃[t·td + k] (t < To), tok[To][k] = x̃[O + k].
__device__ __forceinline__ void load_tokens(const AttnGeom &g, const float *__restrict__ xi,
                                            float *tok, int lane) {
    for (int f = lane; f < g.To * g.td; f += 32) {
        const int t = f / g.td;
        tok[t * g.tdm + (f - t * g.td)] = xi[f];
    }
    for (int k = lane; k < g.G; k += 32) tok[g.To * g.tdm + k] = xi[g.O + k];
}

// q, k, v of head h for all tokens: [T, DHM] rows (columns ≥ dh zero), lane = output column.
template <int DHM, int TDM>
__device__ __forceinline__ void head_qkv(const AttnGeom &g, int h, const float *tok,
                                         const float *__restrict__ comp, float *q, float *k,
                                         float *v, int lane) {
    const int dh = g.dh;
    for (int lc = lane; lc < 3 * dh; lc += 32) {
        const int part = lc / dh, j = lc - part * dh;
        const int c = part * g.d + h * dh + j;  // row of W = [Wq; Wk; Wv]
        float wo[TDM], wgl[TDM];
#pragma unroll
        for (int kk = 0; kk < TDM; ++kk) {
            wo[kk] = kk < g.td ? __ldg(comp + (size_t)c * g.td + kk) : 0.0f;
            wgl[kk] = kk < g.G ? __ldg(comp + g.c_wg + (size_t)c * g.G + kk) : 0.0f;
        }
        float *dst = part == 0 ? q : (part == 1 ? k : v);
        const float *cc = comp + g.c_cc + c;
#pragma unroll 4
        for (int t = 0; t < g.To; ++t) {
            float acc = __ldg(cc + (size_t)t * g.d3);
            const float *tk = tok + t * g.tdm;
#pragma unroll
            for (int kk = 0; kk < TDM; ++kk)
                if (kk < g.td) acc = fmaf(wo[kk], tk[kk], acc);
            dst[t * DHM + j] = acc;
        }
        if (g.G > 0) {
            const int t = g.To;
            float acc = __ldg(cc + (size_t)t * g.d3);
            const float *tk = tok + t * g.tdm;
#pragma unroll
            for (int kk = 0; kk < TDM; ++kk)
                if (kk < g.G) acc = fmaf(wgl[kk], tk[kk], acc);
            dst[t * DHM + j] = acc;
        }
    }
    if (dh < DHM) {
        const int pad = DHM - dh;
        for (int idx = lane; idx < g.T * pad; idx += 32) {
            const int t = idx / pad, j = dh + (idx - t * pad);
            q[t * DHM + j] = 0.0f;
            k[t * DHM + j] = 0.0f;
            v[t * DHM + j] = 0.0f;
        }
    }
}

// A[t, :] = softmax_s(q_t · k_s · scale), lane = query row t (+32 per slot); row stride Tp.
template <int DHM, int SLOTS>
__device__ __forceinline__ void head_probs(const AttnGeom &g, const float *q, const float *k,
                                           float *P, int lane) {
#pragma unroll
    for (int r = 0; r < SLOTS; ++r) {
        const int t = lane + 32 * r;
        if (t < g.T) {
            float qr[DHM];
            const float4 *q4 = reinterpret_cast<const float4 *>(q + t * DHM);
#pragma unroll
            for (int j4 = 0; j4 < DHM / 4; ++j4) {
                const float4 a = q4[j4];
                qr[4 * j4] = a.x; qr[4 * j4 + 1] = a.y; qr[4 * j4 + 2] = a.z; qr[4 * j4 + 3] = a.w;
            }
            float *row = P + t * g.Tp;
            float mx = -INFINITY;
#pragma unroll 4
            for (int s = 0; s < g.T; ++s) {
                const float4 *k4 = reinterpret_cast<const float4 *>(k + s * DHM);
                float acc = 0.0f;
#pragma unroll
                for (int j4 = 0; j4 < DHM / 4; ++j4) {
                    const float4 b = k4[j4];
                    acc = fmaf(qr[4 * j4], b.x, acc);
                    acc = fmaf(qr[4 * j4 + 1], b.y, acc);
                    acc = fmaf(qr[4 * j4 + 2], b.z, acc);
                    acc = fmaf(qr[4 * j4 + 3], b.w, acc);
                }
                acc = __fmul_rn(acc, g.scale);
                row[s] = acc;
                mx = fmaxf(mx, acc);
            }
            float sum = 0.0f;
            for (int s = 0; s < g.T; ++s) {
                const float e = expf(__fadd_rn(row[s], -mx));
                row[s] = e;
                sum = __fadd_rn(sum, e);
            }
            for (int s = 0; s < g.T; ++s) row[s] = __fdiv_rn(row[s], sum);
        }
    }
}

// csum[s] = Σ_t A[t, s] (t in order), lane = key s.
template <int SLOTS>
__device__ __forceinline__ void head_colsums(const AttnGeom &g, const float *P, float *csum,
                                             int lane) {
#pragma unroll
    for (int r = 0; r < SLOTS; ++r) {
        const int s = lane + 32 * r;
        if (s < g.T) {
            float a = 0.0f;
            for (int t = 0; t < g.T; ++t) a = __fadd_rn(a, P[t * g.Tp + s]);
            csum[s] = a;
        }
    }
}

__device__ __forceinline__ float *warp_base(const AttnGeom &g, float *sm) {
    return sm + (threadIdx.x >> 5) * g.w_size;
}

// ---- forward: ā, pool = ē + bo, aug ------------------------------------------------------------
template <int DHM, int TDM, int SLOTS>
__global__ void __launch_bounds__(256, 1)
k_attn_fwd(AttnGeom g, const float *__restrict__ x, const float *__restrict__ comp,
           const float *__restrict__ Wt, const float *__restrict__ Wg,
           const float *__restrict__ bo, float *__restrict__ abar, float *__restrict__ pool,
           float *__restrict__ aug) {
    extern __shared__ float4 sm4[];
    float *wb = warp_base(g, reinterpret_cast<float *>(sm4));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *tok = wb + g.w_tok, *stok = wb + g.w_stok, *q = wb + g.w_q, *k = wb + g.w_k,
          *v = wb + g.w_v, *P = wb + g.w_p, *csum = wb + g.w_csum;
    const float Tf = (float)g.T;

    const int i0 = blockIdx.x * g.spb, i1 = min(g.B, i0 + g.spb);
    for (int i = i0; i < i1; ++i) {
        load_tokens(g, x + (size_t)i * g.D, tok, lane);
        __syncwarp();
        if (warp == 0) {
            // stok = Σ_{t<To} tok_t; aug_i = [stok | g | 1]; pool_i = ē_i + bo.
            for (int kk = lane; kk < g.td; kk += 32) {
                float s = 0.0f;
                for (int t = 0; t < g.To; ++t) s = __fadd_rn(s, tok[t * g.tdm + kk]);
                stok[kk] = s;
            }
            __syncwarp();
            float *ai = aug + (size_t)i * g.na;
            for (int c = lane; c < g.na; c += 32)
                ai[c] = c < g.td ? stok[c]
                                 : (c < g.td + g.G ? tok[g.To * g.tdm + (c - g.td)] : 1.0f);
            for (int a = lane; a < g.d; a += 32) {
                float e = comp[g.c_eb + a];
                for (int kk = 0; kk < g.td; ++kk) e = fmaf(Wt[a * g.td + kk], stok[kk], e);
                for (int kk = 0; kk < g.G; ++kk)
                    e = fmaf(Wg[a * g.G + kk], tok[g.To * g.tdm + kk], e);
                pool[(size_t)i * g.d + a] = __fadd_rn(__fdiv_rn(e, Tf), bo[a]);
            }
        }
        for (int h = warp; h < g.heads; h += g.nw) {
            head_qkv<DHM, TDM>(g, h, tok, comp, q, k, v, lane);
            __syncwarp();
            head_probs<DHM, SLOTS>(g, q, k, P, lane);
            __syncwarp();
            head_colsums<SLOTS>(g, P, csum, lane);
            __syncwarp();
            // ā_h[j] = (Σ_s csum_s v_s[j]) / T
            for (int j = lane; j < g.dh; j += 32) {
                float a = 0.0f;
                for (int s = 0; s < g.T; ++s) a = fmaf(csum[s], v[s * DHM + j], a);
                abar[(size_t)i * g.d + h * g.dh + j] = __fdiv_rn(a, Tf);
            }
            __syncwarp();
        }
    }
}

// ---- backward: block partials of S | M1 | M2 ------------------------------------------------
template <int DHM, int TDM, int SLOTS>
__global__ void __launch_bounds__(256, 1)
k_attn_bwd(AttnGeom g, const float *__restrict__ x, const float *__restrict__ comp,
           const float *__restrict__ dabar, float *__restrict__ partial) {
    extern __shared__ float4 sm4[];
    float *sm = reinterpret_cast<float *>(sm4);
    float *wb = warp_base(g, sm);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *tok = wb + g.w_tok, *q = wb + g.w_q, *k = wb + g.w_k, *P = wb + g.w_p,
          *csum = wb + g.w_csum, *bet = wb + g.w_bet;
    float *v = P;   // v lives where A will be: it is dead once β is known
    float *dq = q;  // [T, dqp] dqkv rows, over q | k | P once those are dead
    float *S = sm + g.b_acc, *M1 = S + g.T * g.d3, *M2 = M1 + g.d3 * g.td;
    for (int idx = threadIdx.x; idx < g.pw; idx += blockDim.x) S[idx] = 0.0f;
    __syncthreads();
    const float Tf = (float)g.T;
    const int dh = g.dh;

    const int i0 = blockIdx.x * g.spb, i1 = min(g.B, i0 + g.spb);
    for (int i = i0; i < i1; ++i) {
        load_tokens(g, x + (size_t)i * g.D, tok, lane);
        __syncwarp();
        for (int h = warp; h < g.heads; h += g.nw) {
            // γ = dā_h / T (the gradient of every row of the head's attention output)
            float gr[DHM];
#pragma unroll
            for (int j = 0; j < DHM; ++j)
                gr[j] = j < dh ? __fdiv_rn(__ldg(dabar + (size_t)i * g.d + h * dh + j), Tf) : 0.0f;

            head_qkv<DHM, TDM>(g, h, tok, comp, q, k, v, lane);
            __syncwarp();
            // β_s = γ · v_s
#pragma unroll
            for (int r = 0; r < SLOTS; ++r) {
                const int t = lane + 32 * r;
                if (t < g.T) {
                    const float4 *v4 = reinterpret_cast<const float4 *>(v + t * DHM);
                    float b = 0.0f;
#pragma unroll
                    for (int j4 = 0; j4 < DHM / 4; ++j4) {
                        const float4 a = v4[j4];
                        b = fmaf(gr[4 * j4], a.x, b);
                        b = fmaf(gr[4 * j4 + 1], a.y, b);
                        b = fmaf(gr[4 * j4 + 2], a.z, b);
                        b = fmaf(gr[4 * j4 + 3], a.w, b);
                    }
                    bet[t] = b;
                }
            }
            __syncwarp();
            head_probs<DHM, SLOTS>(g, q, k, P, lane);
            __syncwarp();
            head_colsums<SLOTS>(g, P, csum, lane);
            float gam[SLOTS];
#pragma unroll
            for (int r = 0; r < SLOTS; ++r) {
                const int t = lane + 32 * r;
                gam[r] = 0.0f;
                if (t < g.T) {
                    const float *row = P + t * g.Tp;
                    float a = 0.0f;
                    for (int s = 0; s < g.T; ++s) a = fmaf(row[s], bet[s], a);
                    gam[r] = a;
                }
            }
            __syncwarp();
            // dS = A (β − γ_t) · scale, in place (lane t owns row t)
#pragma unroll
            for (int r = 0; r < SLOTS; ++r) {
                const int t = lane + 32 * r;
                if (t < g.T) {
                    float *row = P + t * g.Tp;
                    for (int s = 0; s < g.T; ++s)
                        row[s] = __fmul_rn(__fmul_rn(row[s], __fadd_rn(bet[s], -gam[r])), g.scale);
                }
            }
            __syncwarp();
            // dq_t = Σ_s dS[t, s] k_s (lane t);  dk_s = Σ_t dS[t, s] q_t (lane s)
            float dqr[SLOTS][DHM], dkr[SLOTS][DHM];
#pragma unroll
            for (int r = 0; r < SLOTS; ++r) {
                const int t = lane + 32 * r;
#pragma unroll
                for (int j = 0; j < DHM; ++j) dqr[r][j] = dkr[r][j] = 0.0f;
                if (t < g.T) {
                    const float *row = P + t * g.Tp;
                    for (int s = 0; s < g.T; ++s) {
                        const float p = row[s];
                        const float4 *k4 = reinterpret_cast<const float4 *>(k + s * DHM);
#pragma unroll
                        for (int j4 = 0; j4 < DHM / 4; ++j4) {
                            const float4 b = k4[j4];
                            dqr[r][4 * j4] = fmaf(p, b.x, dqr[r][4 * j4]);
                            dqr[r][4 * j4 + 1] = fmaf(p, b.y, dqr[r][4 * j4 + 1]);
                            dqr[r][4 * j4 + 2] = fmaf(p, b.z, dqr[r][4 * j4 + 2]);
                            dqr[r][4 * j4 + 3] = fmaf(p, b.w, dqr[r][4 * j4 + 3]);
                        }
                    }
                    for (int tt = 0; tt < g.T; ++tt) {
                        const float p = P[tt * g.Tp + t];
                        const float4 *q4 = reinterpret_cast<const float4 *>(q + tt * DHM);
#pragma unroll
                        for (int j4 = 0; j4 < DHM / 4; ++j4) {
                            const float4 b = q4[j4];
                            dkr[r][4 * j4] = fmaf(p, b.x, dkr[r][4 * j4]);
                            dkr[r][4 * j4 + 1] = fmaf(p, b.y, dkr[r][4 * j4 + 1]);
                            dkr[r][4 * j4 + 2] = fmaf(p, b.z, dkr[r][4 * j4 + 2]);
                            dkr[r][4 * j4 + 3] = fmaf(p, b.w, dkr[r][4 * j4 + 3]);
                        }
                    }
                }
            }
            __syncwarp();  // q, k and dS are dead from here: dq rows overwrite them
#pragma unroll
            for (int r = 0; r < SLOTS; ++r) {
                const int t = lane + 32 * r;
                if (t < g.T) {
                    float *row = dq + t * g.dqp;
                    const float cs = csum[t];
#pragma unroll
                    for (int j = 0; j < DHM; ++j)
                        if (j < dh) {
                            row[j] = dqr[r][j];
                            row[dh + j] = dkr[r][j];
                            row[2 * dh + j] = __fmul_rn(cs, gr[j]);  // dv_t = (Σ_t' A[t', t]) γ
                        }
                }
            }
            __syncwarp();
            // Accumulate, lane = column of the head: S[t][c] += dqkv_t[c];
            // M1[c][k] += Σ_{t<To} dqkv_t[c] tok_t[k];  M2[c][k] += dqkv_To[c] g[k].
            for (int lc = lane; lc < 3 * dh; lc += 32) {
                const int part = lc / dh, j = lc - part * dh;
                const int c = part * g.d + h * dh + j;
                float loc[TDM];
#pragma unroll
                for (int kk = 0; kk < TDM; ++kk) loc[kk] = 0.0f;
                for (int t = 0; t < g.To; ++t) {
                    const float val = dq[t * g.dqp + lc];
                    S[t * g.d3 + c] = __fadd_rn(S[t * g.d3 + c], val);
                    const float *tk = tok + t * g.tdm;
#pragma unroll
                    for (int kk = 0; kk < TDM; ++kk)
                        if (kk < g.td) loc[kk] = fmaf(val, tk[kk], loc[kk]);
                }
#pragma unroll
                for (int kk = 0; kk < TDM; ++kk)
                    if (kk < g.td) M1[c * g.td + kk] = __fadd_rn(M1[c * g.td + kk], loc[kk]);
                if (g.G > 0) {
                    const int t = g.To;
                    const float val = dq[t * g.dqp + lc];
                    S[t * g.d3 + c] = __fadd_rn(S[t * g.d3 + c], val);
                    for (int kk = 0; kk < g.G; ++kk)
                        M2[c * g.G + kk] = fmaf(val, tok[t * g.tdm + kk], M2[c * g.G + kk]);
                }
            }
            __syncwarp();
        }
    }
    __syncthreads();
    float *out = partial + (size_t)blockIdx.x * g.pw;
    for (int idx = threadIdx.x; idx < g.pw; idx += blockDim.x) out[idx] = S[idx];
}

// ---- composites, reward head, finalisation -------------------------------------------------

// Wc = W Wt, Wgc = W Wg, cc_t = W e0_t + b, ebar = Σ_t e0_t (float64 sums, rounded once).
__global__ void k_attn_comp(AttnGeom g, const float *__restrict__ W, const float *__restrict__ b,
                            const float *__restrict__ Wt, const float *__restrict__ bt,
                            const float *__restrict__ Wg, const float *__restrict__ bg,
                            const float *__restrict__ P, float *__restrict__ comp) {
    const int n1 = g.d3 * g.td, n2 = g.d3 * g.G, n3 = g.T * g.d3, n4 = g.d;
    const int total = n1 + n2 + n3 + n4;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += gridDim.x * blockDim.x) {
        double s = 0.0;
        if (idx < n1) {
            const int c = idx / g.td, kk = idx - c * g.td;
            for (int a = 0; a < g.d; ++a)
                s += (double)W[(size_t)c * g.d + a] * (double)Wt[a * g.td + kk];
        } else if (idx < n1 + n2) {
            const int r = idx - n1, c = r / g.G, kk = r - c * g.G;
            for (int a = 0; a < g.d; ++a)
                s += (double)W[(size_t)c * g.d + a] * (double)Wg[a * g.G + kk];
        } else if (idx < n1 + n2 + n3) {
            const int r = idx - n1 - n2, t = r / g.d3, c = r - t * g.d3;
            const float *bias = t < g.To ? bt : bg;
            s = (double)b[c];
            for (int a = 0; a < g.d; ++a)
                s += (double)W[(size_t)c * g.d + a] *
                     ((double)bias[a] + (double)P[(size_t)t * g.d + a]);
        } else {
            const int a = idx - n1 - n2 - n3;
            for (int t = 0; t < g.T; ++t)
                s += (double)(t < g.To ? bt[a] : bg[a]) + (double)P[(size_t)t * g.d + a];
        }
        comp[idx] = (float)s;  // the regions are contiguous in this order (c_wg = n1, ...)
    }
}

struct AttnHeadArgs {
    float *h;                    // [B, hh] in: pool Wr1ᵀ (no bias), out: dL/d(pre)
    const float *br1, *wr2, *br2;
    const float *r;
    int B, hh;
    double *partial;             // [blocks, 2·hh + 2]: dbr1 | dw_r2 | db_r2 | Σ loss terms
    int rows_per_blk;
};

__global__ void k_attn_head(AttnHeadArgs a) {
    extern __shared__ double acc_all[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int hh = a.hh, W = 2 * hh + 2;
    double *acc = acc_all + (size_t)warp * W;
    for (int c = lane; c < W; c += 32) acc[c] = 0.0;
    __syncwarp();
    const float br2 = *a.br2;
    const int r0 = blockIdx.x * a.rows_per_blk, r1 = min(a.B, r0 + a.rows_per_blk);
    for (int i = r0 + warp; i < r1; i += nw) {
        float *h = a.h + (size_t)i * hh;
        float s = 0.0f;
        for (int j = lane; j < hh; j += 32)
            s = fmaf(dev_silu(__fadd_rn(h[j], a.br1[j])), a.wr2[j], s);
        s = warp_sum(s);
        const float rhat = __fadd_rn(s, br2);
        const float e = __fadd_rn(rhat, -a.r[i]);
        const float dr = __fdiv_rn(__fmul_rn(2.0f, e), (float)a.B);
        for (int j = lane; j < hh; j += 32) {
            const float pre = __fadd_rn(h[j], a.br1[j]);
            const float sg = dev_sigmoid(pre);
            const float v = __fmul_rn(__fmul_rn(dr, a.wr2[j]), dev_dsilu_s(pre, sg));
            h[j] = v;
            acc[j] += (double)v;
            acc[hh + j] += (double)dr * (double)__fmul_rn(pre, sg);
        }
        if (lane == 0) {
            acc[2 * hh] += (double)dr;
            acc[2 * hh + 1] += (double)__fmul_rn(e, e);
        }
    }
    aux::flush_row_acc(acc_all, W, a.partial + (size_t)blockIdx.x * W);
}

struct AttnFinArgs {
    const float *W, *Wt, *bt, *Wg, *bg, *P;  // parameters
    const float *tot;                        // S [T, 3d] | M1 [3d, td] | M2 [3d, G]
    const float *R;                          // [d, na]
    float *gW, *gb, *gP, *gWt, *gWg, *gbo;   // gradient slices
};

__global__ void k_attn_fin(AttnGeom g, AttnFinArgs f) {
    const float *S = f.tot, *M1 = S + g.T * g.d3, *M2 = M1 + g.d3 * g.td;
    const int d = g.d, d3 = g.d3, td = g.td, G = g.G, T = g.T, na = g.na;
    const int n1 = d3 * d, n2 = d3, n3 = T * d, n4 = d * td, n5 = d * G, n6 = d;
    const int total = n1 + n2 + n3 + n4 + n5 + n6;
    const double Td = (double)T;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += gridDim.x * blockDim.x) {
        int r = idx;
        double s = 0.0;
        if (r < n1) {  // dW[c, a]
            const int c = r / d, a = r - c * d;
            for (int kk = 0; kk < td; ++kk) s += (double)M1[c * td + kk] * (double)f.Wt[a * td + kk];
            for (int kk = 0; kk < G; ++kk) s += (double)M2[c * G + kk] * (double)f.Wg[a * G + kk];
            for (int t = 0; t < T; ++t)
                s += (double)S[t * d3 + c] *
                     ((double)(t < g.To ? f.bt[a] : f.bg[a]) + (double)f.P[t * d + a]);
            f.gW[r] = (float)s;
            continue;
        }
        r -= n1;
        if (r < n2) {  // db[c]
            for (int t = 0; t < T; ++t) s += (double)S[t * d3 + r];
            f.gb[r] = (float)s;
            continue;
        }
        r -= n2;
        if (r < n3) {  // dP[t, a]
            const int t = r / d, a = r - t * d;
            for (int c = 0; c < d3; ++c) s += (double)f.W[(size_t)c * d + a] * (double)S[t * d3 + c];
            f.gP[r] = (float)(s + (double)f.R[a * na + na - 1] / Td);
            continue;
        }
        r -= n3;
        if (r < n4) {  // dWt[a, k]
            const int a = r / td, kk = r - a * td;
            for (int c = 0; c < d3; ++c) s += (double)f.W[(size_t)c * d + a] * (double)M1[c * td + kk];
            f.gWt[r] = (float)(s + (double)f.R[a * na + kk] / Td);
            continue;
        }
        r -= n4;
        if (r < n5) {  // dWg[a, k]
            const int a = r / G, kk = r - a * G;
            for (int c = 0; c < d3; ++c) s += (double)f.W[(size_t)c * d + a] * (double)M2[c * G + kk];
            f.gWg[r] = (float)(s + (double)f.R[a * na + td + kk] / Td);
            continue;
        }
        r -= n5;
        f.gbo[r] = f.R[r * na + na - 1];  // dbo = Σ_i dpool_i
    }
}

// dbt = Σ_{t<To} dP[t], dbg = dP[To].
__global__ void k_attn_fin2(AttnGeom g, const float *__restrict__ gP, float *gbt, float *gbg) {
    for (int a = blockIdx.x * blockDim.x + threadIdx.x; a < g.d; a += gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int t = 0; t < g.To; ++t) s += (double)gP[t * g.d + a];
        gbt[a] = (float)s;
        if (g.G > 0) gbg[a] = gP[g.To * g.d + a];
    }
}

}  // namespace

using namespace attn_detail;

struct AttentionLearner::Impl {
    Dims d;
    AttnOffsets o;
    float *params, *mom1, *mom2;
    AdamHyper hyp;
    cublasComputeType_t compute;

    AttnGeom gf{}, gb{};  // geometry of k_attn_fwd / k_attn_bwd
    size_t smem_f = 0, smem_b = 0;
    FwdKernel fwd = nullptr;
    BwdKernel bwd = nullptr;
    int nblk_f = 0, nblk_b = 0;  // blocks of k_attn_fwd / k_attn_bwd
    aux::RowPlan head;

    aux::Arena arena;
    float *comp, *abar, *pool, *aug, *hbuf, *dpool, *R, *tot, *grad, *part_b;
    double *part_head;

    // Per-warp and per-block shared memory of one kernel variant (DHM = head width rounded up).
    static void layout(AttnGeom &g, int DHM, bool bwd, size_t &smem) {
        int off = 0;
        g.w_tok = off; off += al4(g.T * g.tdm);
        g.w_stok = off; off += al4(g.tdm);
        g.w_q = off; off += g.T * DHM;
        g.w_k = off; off += g.T * DHM;
        if (!bwd) {
            g.w_v = off; off += g.T * DHM;
            g.w_p = off; off += al4(g.T * g.Tp);
        } else {
            g.w_v = g.w_p = off;  // v, then A / dS; the dqkv rows span q | k | this
            const int need = std::max(g.T * DHM, g.T * g.Tp);
            const int dq_rest = g.T * g.dqp - 2 * g.T * DHM;
            off += al4(std::max(need, dq_rest));
        }
        g.w_csum = off; off += al4(g.T);
        g.w_bet = off; off += al4(g.T);
        g.w_size = off;
        g.b_acc = g.nw * g.w_size;
        g.pw = g.T * g.d3 + g.d3 * g.td + g.d3 * g.G;
        smem = (size_t)(g.b_acc + (bwd ? g.pw : 0)) * sizeof(float);
    }

    // Transitions per block: about kSamplesPerBlock, chosen so that the blocks fill whole waves
    // of the device (resident blocks per SM × SMs). Each block works through its transitions
    // one after another, so a last, partly filled wave costs a whole wave's time: at B = 16384
    // on an H200, 1024 blocks of 16 make 2.6 waves of k_attn_bwd, which run as 3.
    static int wave_spb(const void *kernel, int threads, size_t smem, int B) {
        int dev = 0, sms = 0, per_sm = 0;
        FH_CUDA(cudaGetDevice(&dev));
        FH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        FH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
        const long long slots = (long long)std::max(sms, 1) * std::max(per_sm, 1);
        const long long waves =
            std::max(1LL, std::llround((double)B / ((double)kSamplesPerBlock * (double)slots)));
        return (int)std::max(1LL, ((long long)B + waves * slots - 1) / (waves * slots));
    }

    template <int DHM, int TDM, int SLOTS>
    void pick() {
        fwd = k_attn_fwd<DHM, TDM, SLOTS>;
        bwd = k_attn_bwd<DHM, TDM, SLOTS>;
    }

    Impl(const Dims &dd, const fh_config &c, const Layout &L, float *p, float *m, float *v)
        : d(dd), o(L.attn), params(p), mom1(m), mom2(v) {
        hyp = AdamHyper{c.lr_aux, c.adam_beta1, c.adam_beta2, c.adam_eps};
        compute = compute_type(c);
        if (o.Wk != o.Wq + (size_t)d.d * d.d || o.Wv != o.Wk + (size_t)d.d * d.d ||
            o.bk != o.bq + d.d || o.bv != o.bk + d.d)
            fail(FH_ERR_INTERNAL, "attention: Wq|Wk|Wv and bq|bk|bv are not contiguous in the layout");
        if (d.T > 64 || d.dh > 32 || d.td > 16 || d.G > 16)
            fail(FH_ERR_BAD_DIMENSION,
                 "config: the CUDA attention learner supports at most 64 tokens (obs_dim / "
                 "attn_token_dim + 1 = %u), d_head <= 32 (%u), attn_token_dim <= 16 (%u) and "
                 "goal_dim <= 16 (%u); use the CPU backend for this config",
                 d.T, d.dh, d.td, d.G);

        AttnGeom g{};
        g.B = (int)d.B; g.D = (int)d.D; g.O = (int)d.O; g.G = (int)d.G; g.td = (int)d.td;
        g.To = (int)d.To; g.T = (int)d.T; g.d = (int)d.d; g.d3 = 3 * (int)d.d;
        g.heads = (int)d.heads; g.dh = (int)d.dh; g.hh = (int)d.hh;
        g.na = g.td + g.G + 1;
        g.tdm = std::max(g.td, std::max(g.G, 1));
        g.Tp = g.T | 1;
        g.dqp = (3 * g.dh) | 1;
        g.nw = std::min(g.heads, 8);
        g.scale = (float)(1.0 / std::sqrt((double)d.dh));
        g.c_wg = g.d3 * g.td;
        g.c_cc = g.c_wg + g.d3 * g.G;
        g.c_eb = g.c_cc + g.T * g.d3;
        g.c_total = g.c_eb + g.d;

        const int DHM = d.dh <= 16 ? 16 : 32;
        const int TDM = std::max(d.td, d.G) <= 4 ? 4 : 16;
        const int SLOTS = d.T <= 32 ? 1 : 2;
        gf = g;
        gb = g;
        layout(gf, DHM, false, smem_f);
        layout(gb, DHM, true, smem_b);
        const int key = (DHM == 16 ? 0 : 4) + (TDM == 4 ? 0 : 2) + (SLOTS == 1 ? 0 : 1);
        switch (key) {
        case 0: pick<16, 4, 1>(); break;
        case 1: pick<16, 4, 2>(); break;
        case 2: pick<16, 16, 1>(); break;
        case 3: pick<16, 16, 2>(); break;
        case 4: pick<32, 4, 1>(); break;
        case 5: pick<32, 4, 2>(); break;
        case 6: pick<32, 16, 1>(); break;
        default: pick<32, 16, 2>(); break;
        }
        aux::allow_smem((const void *)fwd, smem_f, "attention forward");
        aux::allow_smem((const void *)bwd, smem_b, "attention backward");
        gf.spb = wave_spb((const void *)fwd, gf.nw * 32, smem_f, g.B);
        gb.spb = wave_spb((const void *)bwd, gb.nw * 32, smem_b, g.B);
        nblk_f = (g.B + gf.spb - 1) / gf.spb;
        nblk_b = (g.B + gb.spb - 1) / gb.spb;
        head = aux::plan_rows(d.B, 2 * (int)d.hh + 2, kHeadRowsPerWarp, 0, "attention head");

        const size_t B = d.B;
        const size_t o_comp = arena.reserve_n<float>(g.c_total);
        const size_t o_abar = arena.reserve_n<float>(B * d.d);
        const size_t o_pool = arena.reserve_n<float>(B * d.d);
        const size_t o_aug = arena.reserve_n<float>(B * g.na);
        const size_t o_h = arena.reserve_n<float>(B * d.hh);
        const size_t o_dpool = arena.reserve_n<float>(B * d.d);
        const size_t o_R = arena.reserve_n<float>((size_t)d.d * g.na);
        const size_t o_tot = arena.reserve_n<float>(gb.pw);
        const size_t o_grad = arena.reserve_n<float>(o.total);
        const size_t o_pb = arena.reserve_n<float>((size_t)nblk_b * gb.pw);
        const size_t o_ph = arena.reserve_n<double>((size_t)head.blocks * (2 * d.hh + 2));
        arena.allocate("the attention learner");
        comp = arena.at<float>(o_comp);
        abar = arena.at<float>(o_abar);
        pool = arena.at<float>(o_pool);
        aug = arena.at<float>(o_aug);
        hbuf = arena.at<float>(o_h);
        dpool = arena.at<float>(o_dpool);
        R = arena.at<float>(o_R);
        tot = arena.at<float>(o_tot);
        grad = arena.at<float>(o_grad);
        part_b = arena.at<float>(o_pb);
        part_head = arena.at<double>(o_ph);
        aux::allow_smem((const void *)k_attn_head, head.smem, "attention head");
    }

    void enqueue(const Lane &lane, const StepInputs &in, float *loss) {
        cudaStream_t s = lane.stream;
        cudaStream_t hs = nullptr;
        FH_CUBLAS(cublasGetStream(lane.blas, &hs));
        if (hs != s)
            fail(FH_ERR_INTERNAL, "attention: the lane's cuBLAS handle is not bound to its stream");
        const Blas bl{lane.blas, compute};
        const int B = (int)d.B, dm = (int)d.d, hh = (int)d.hh, na = gf.na;
        const float *P = params;
        const float *Wg = d.G > 0 ? P + o.Wg : nullptr, *bg = d.G > 0 ? P + o.bg : nullptr;

        k_attn_comp<<<(gf.c_total + 255) / 256, 256, 0, s>>>(gf, P + o.Wq, P + o.bq, P + o.Wt,
                                                            P + o.bt, Wg, bg, P + o.P, comp);
        FH_LAUNCHED("k_attn_comp");
        fwd<<<nblk_f, gf.nw * 32, smem_f, s>>>(gf, in.x, comp, P + o.Wt, Wg, P + o.bo, abar,
                                               pool, aug);
        FH_LAUNCHED("k_attn_fwd");
        gemm_nt(bl, B, dm, dm, abar, P + o.Wo, pool, 1.0f, "attention pool += abar Wo^T");
        gemm_nt(bl, B, hh, dm, pool, P + o.Wr1, hbuf, 0.0f, "attention h = pool Wr1^T");

        AttnHeadArgs a{};
        a.h = hbuf; a.br1 = P + o.br1; a.wr2 = P + o.w_r2; a.br2 = P + o.b_r2;
        a.r = in.r; a.B = B; a.hh = hh; a.partial = part_head;
        a.rows_per_blk = head.rows_per_blk;
        k_attn_head<<<head.blocks, head.warps * 32, head.smem, s>>>(a);
        FH_LAUNCHED("k_attn_head");
        {
            aux::Segs g;
            g.add(grad + o.br1, 0, hh);
            g.add(grad + o.w_r2, hh, hh);
            g.add(grad + o.b_r2, 2 * hh, 1);
            g.add(loss, 2 * hh + 1, 1, 0, (double)d.B);
            aux::reduce_partials(part_head, head.blocks, 2 * hh + 2, 1, g, s);
        }
        gemm_tn(bl, hh, dm, B, hbuf, pool, grad + o.Wr1, 0.0f, "attention dWr1 = dh^T pool");
        gemm_nn(bl, B, dm, hh, hbuf, P + o.Wr1, dpool, 0.0f, "attention dpool = dh Wr1");
        gemm_tn(bl, dm, dm, B, dpool, abar, grad + o.Wo, 0.0f, "attention dWo = dpool^T abar");
        gemm_nn(bl, B, dm, dm, dpool, P + o.Wo, abar, 0.0f, "attention dabar = dpool Wo");
        gemm_tn(bl, dm, na, B, dpool, aug, R, 0.0f, "attention R = dpool^T aug");

        bwd<<<nblk_b, gb.nw * 32, smem_b, s>>>(gb, in.x, comp, abar, part_b);
        FH_LAUNCHED("k_attn_bwd");
        {
            aux::Segs g;
            g.add(tot, 0, gb.pw);
            aux::reduce_partials(part_b, nblk_b, gb.pw, 1, g, s);
        }
        AttnFinArgs f{};
        f.W = P + o.Wq; f.Wt = P + o.Wt; f.bt = P + o.bt; f.Wg = Wg; f.bg = bg; f.P = P + o.P;
        f.tot = tot; f.R = R;
        f.gW = grad + o.Wq; f.gb = grad + o.bq; f.gP = grad + o.P; f.gWt = grad + o.Wt;
        f.gWg = d.G > 0 ? grad + o.Wg : nullptr; f.gbo = grad + o.bo;
        const int nfin = gf.d3 * dm + gf.d3 + gf.T * dm + dm * gf.td + dm * gf.G + dm;
        k_attn_fin<<<(nfin + 255) / 256, 256, 0, s>>>(gf, f);
        FH_LAUNCHED("k_attn_fin");
        k_attn_fin2<<<(dm + 127) / 128, 128, 0, s>>>(gf, grad + o.P, grad + o.bt,
                                                      d.G > 0 ? grad + o.bg : nullptr);
        FH_LAUNCHED("k_attn_fin2");

        aux::adam(params, mom1, mom2, grad, o.total, hyp.lr, hyp.beta1, hyp.beta2, hyp.eps,
                  in.step, s);
    }
};

AttentionLearner::AttentionLearner(const Dims &d, const fh_config &c, const Layout &L,
                                   float *params, float *m, float *v)
    : impl_(std::make_unique<Impl>(d, c, L, params, m, v)) {}

AttentionLearner::~AttentionLearner() = default;

void AttentionLearner::enqueue(const Lane &lane, const StepInputs &in, float *loss) {
    impl_->enqueue(lane, in, loss);
}

size_t AttentionLearner::bytes() const { return impl_->arena.bytes(); }

}  // namespace fh::cuda
