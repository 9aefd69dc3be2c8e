// The SIMT kernels that the tensor-core path (attention_tc.cu) replaces, as they were (the LEGACY
// path of attention_paths.hpp), kept selectable (FOXHUNT_ATTN_KERNELS=legacy) until the
// before/after comparison on the H200 is archived in bench/results/; then this file goes.
//
// Tiling: one warp per head (lane = token), a block of min(heads, 8) warps working through
// about 16 transitions, as many as make the blocks fill whole waves of the device; per warp the
// tokens, q, k, v and the [T, T] probabilities in shared memory. Supported: T <= 64 tokens,
// d_head <= 32, attn_token_dim <= 16 and goal_dim <= 16.
#include <algorithm>
#include <cmath>

#include "attention_paths.hpp"
#include "aux_common.cuh"

namespace fh::cuda::attn {

namespace legacy_detail {

constexpr int kSamplesPerBlock = 16;   // about this many transitions per block of k_attn_fwd/bwd

struct LegacyGeom {
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

using FwdKernel = void (*)(LegacyGeom, const float *, const float *, const float *, const float *,
                           const float *, float *, float *, float *);
using BwdKernel = void (*)(LegacyGeom, const float *, const float *, const float *, float *);

}  // namespace legacy_detail

namespace {

using namespace legacy_detail;

// ---- per-warp building blocks --------------------------------------------------------------

// Token rows of transition x̃_i: tok[t][k] = x̃[t·td + k] (t < To), tok[To][k] = x̃[O + k].
__device__ __forceinline__ void load_tokens(const LegacyGeom &g, const float *__restrict__ xi,
                                            float *tok, int lane) {
    for (int f = lane; f < g.To * g.td; f += 32) {
        const int t = f / g.td;
        tok[t * g.tdm + (f - t * g.td)] = xi[f];
    }
    for (int k = lane; k < g.G; k += 32) tok[g.To * g.tdm + k] = xi[g.O + k];
}

// q, k, v of head h for all tokens: [T, DHM] rows (columns ≥ dh zero), lane = output column.
template <int DHM, int TDM>
__device__ __forceinline__ void head_qkv(const LegacyGeom &g, int h, const float *tok,
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
__device__ __forceinline__ void head_probs(const LegacyGeom &g, const float *q, const float *k,
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
__device__ __forceinline__ void head_colsums(const LegacyGeom &g, const float *P, float *csum,
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

__device__ __forceinline__ float *warp_base(const LegacyGeom &g, float *sm) {
    return sm + (threadIdx.x >> 5) * g.w_size;
}

// ---- forward: ā, pool = ē + bo, aug ------------------------------------------------------------
template <int DHM, int TDM, int SLOTS>
__global__ void __launch_bounds__(256, 1)
k_attn_fwd(LegacyGeom g, const float *__restrict__ x, const float *__restrict__ comp,
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
k_attn_bwd(LegacyGeom g, const float *__restrict__ x, const float *__restrict__ comp,
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


// Per-warp and per-block shared memory of one kernel variant (DHM = head width rounded up).
void legacy_layout(LegacyGeom &g, int DHM, bool bwd, size_t &smem) {
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

class LegacyPath final : public Path {
public:
    explicit LegacyPath(const Geom &geo) {
        LegacyGeom g{};
        g.B = geo.B; g.D = geo.D; g.O = geo.O; g.G = geo.G; g.td = geo.td;
        g.To = geo.To; g.T = geo.T; g.d = geo.d; g.d3 = geo.d3;
        g.heads = geo.heads; g.dh = geo.dh; g.hh = geo.hh; g.na = geo.na;
        g.tdm = std::max(g.td, std::max(g.G, 1));
        g.Tp = g.T | 1;
        g.dqp = (3 * g.dh) | 1;
        g.nw = std::min(g.heads, 8);
        g.scale = geo.scale;
        g.c_wg = geo.c_wg; g.c_cc = geo.c_cc; g.c_eb = geo.c_eb; g.c_total = geo.c_total;
        const int DHM = g.dh <= 16 ? 16 : 32;
        const int TDM = std::max(g.td, g.G) <= 4 ? 4 : 16;
        const int SLOTS = g.T <= 32 ? 1 : 2;
        gf_ = g;
        gb_ = g;
        legacy_layout(gf_, DHM, false, smem_f_);
        legacy_layout(gb_, DHM, true, smem_b_);
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
        aux::allow_smem((const void *)fwd_, smem_f_, "attention forward (legacy)");
        aux::allow_smem((const void *)bwd_, smem_b_, "attention backward (legacy)");
        gf_.spb = wave_samples_per_block((const void *)fwd_, gf_.nw * 32, smem_f_, g.B,
                                         kSamplesPerBlock);
        gb_.spb = wave_samples_per_block((const void *)bwd_, gb_.nw * 32, smem_b_, g.B,
                                         kSamplesPerBlock);
        nblk_f_ = (g.B + gf_.spb - 1) / gf_.spb;
        nblk_b_ = (g.B + gb_.spb - 1) / gb_.spb;
    }
    Kernels kind() const override { return Kernels::LEGACY; }
    int partial_rows() const override { return nblk_b_; }
    void forward(const FwdArgs &a, cudaStream_t s) override {
        fwd_<<<nblk_f_, gf_.nw * 32, smem_f_, s>>>(gf_, a.x, a.comp, a.Wt, a.Wg, a.bo, a.abar,
                                                   a.pool, a.aug);
        FH_LAUNCHED("k_attn_fwd");
    }
    void backward(const BwdArgs &a, cudaStream_t s) override {
        bwd_<<<nblk_b_, gb_.nw * 32, smem_b_, s>>>(gb_, a.x, a.comp, a.dabar, a.partial);
        FH_LAUNCHED("k_attn_bwd");
    }

private:
    template <int DHM, int TDM, int SLOTS>
    void pick() {
        fwd_ = k_attn_fwd<DHM, TDM, SLOTS>;
        bwd_ = k_attn_bwd<DHM, TDM, SLOTS>;
    }
    LegacyGeom gf_{}, gb_{};
    size_t smem_f_ = 0, smem_b_ = 0;
    FwdKernel fwd_ = nullptr;
    BwdKernel bwd_ = nullptr;
    int nblk_f_ = 1, nblk_b_ = 1;
};

}  // namespace

std::unique_ptr<Path> make_legacy_path(const Geom &g) {
    if (g.T > 64 || g.dh > 32 || g.td > 16 || g.G > 16) return nullptr;
    return std::make_unique<LegacyPath>(g);
}

}  // namespace fh::cuda::attn
