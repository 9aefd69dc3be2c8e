// The tensor-core attention backward's per-(transition, head) gradients from the softmax, shared
// by the backward kernel and the fused forward-head-backward trial (attention_tc.cu,
// attention_fused.cu): dS, then dqᵀ, dkᵀ and dvᵀ added into the per-token sums S_acc and, times
// X, into M_acc (attention_tc.cu's header explains the tiling); and the warp's columns of its
// slot's partial row at the end.
#pragma once
#include "attention_bf16.cuh"
#include "attention_tc.cuh"

namespace fh::cuda::attn::tc {

// s: A on entry (the thread's fragments, rows 16μ + g (+ 8), key columns 8ν + 2t' (+ 1)), dS on
// exit; c: A's column sums at the thread's key columns; vec: β_s = γ · v_s of every key (shared
// memory); gam_lo, gam_hi: γ at the thread's channels g and g + 8; sm: the warp's region (X, q, k
// as the projection stored them; dS is written there).
template <int MT, int KX, bool SPLIT, bool B16, class GT>
__device__ __forceinline__ void accumulate_grads(GT g, float (&s)[MT][2 * MT][4],
                                                 float (&c)[2 * MT][2], float *vec,
                                                 float gam_lo, float gam_hi, float *sm,
                                                 const float *X, const float *q, const float *k,
                                                 float *dS,
                                                 float (&sacc)[3][2 * MT][4],
                                                 float (&macc)[3][KX][4], int gi, int tq) {
    using S = TcShape<MT, KX>;
    constexpr int NT = S::NT;
    // dS = A (β − Σ_s A β) / √dh, in place; a copy in shared memory for dkᵀ.
#pragma unroll
    for (int mu = 0; mu < MT; ++mu)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float rs = 0.0f;
#pragma unroll
            for (int nu = 0; nu < NT; ++nu)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    rs = fmaf(s[mu][nu][2 * r + e], vec[8 * nu + 2 * tq + e], rs);
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
#pragma unroll
            for (int nu = 0; nu < NT; ++nu)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float &a = s[mu][nu][2 * r + e];
                    a = (a * (vec[8 * nu + 2 * tq + e] - rs)) * g.scale;
                }
        }
    if constexpr (B16) {
        store_dst<MT, KX>(s, sm, gi, tq);
    } else {
#pragma unroll
        for (int mu = 0; mu < MT; ++mu)
#pragma unroll
            for (int nu = 0; nu < NT; ++nu) {
                const int t0 = 16 * mu + gi, col = 8 * nu + 2 * tq;
                *reinterpret_cast<float2 *>(dS + t0 * S::LDS + col) = make_float2(
                    mma::stored<SPLIT>(s[mu][nu][0]), mma::stored<SPLIT>(s[mu][nu][1]));
                *reinterpret_cast<float2 *>(dS + (t0 + 8) * S::LDS + col) = make_float2(
                    mma::stored<SPLIT>(s[mu][nu][2]), mma::stored<SPLIT>(s[mu][nu][3]));
            }
    }
    __syncwarp();
#pragma unroll
    for (int p = 0; p < 3; ++p) {
        float G[NT][4];
        if (p == 2) {  // dvᵀ[j][s] = γ_j c_s
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                G[n][0] = c[n][0] * gam_lo;
                G[n][1] = c[n][1] * gam_lo;
                G[n][2] = c[n][0] * gam_hi;
                G[n][3] = c[n][1] * gam_hi;
            }
        } else if constexpr (B16) {
            grad_qk16<MT, KX>(p, s, sm, G, gi, tq);
        } else {
            // p = 0: dqᵀ = Kᵀ dSᵀ (k index = key s);  p = 1: dkᵀ = Qᵀ dS (k index = query t).
            const float *src = p == 0 ? k : q;
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) G[n][e] = 0.0f;
#pragma unroll
            for (int ka = 0; ka < NT; ++ka) {
                const int r0 = (8 * ka + 2 * tq) * kLDQ, r1 = r0 + kLDQ;
                mma::Op a[4];
                a[0] = mma::loaded<SPLIT>(src[r0 + gi]);
                a[1] = mma::loaded<SPLIT>(src[r0 + gi + 8]);
                a[2] = mma::loaded<SPLIT>(src[r1 + gi]);
                a[3] = mma::loaded<SPLIT>(src[r1 + gi + 8]);
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    mma::Op b[2];
                    if (p == 0) {  // dSᵀ[s][t]: dS's accumulator fragment, rows t = 8n + g
                        const int mu = n >> 1, hi = (n & 1) * 2;
                        b[0] = mma::op<SPLIT>(s[mu][ka][hi]);
                        b[1] = mma::op<SPLIT>(s[mu][ka][hi + 1]);
                    } else {       // dS[t][s], t = 8ka + 2t' (+1), s = 8n + g
                        b[0] = mma::loaded<SPLIT>(dS[(8 * ka + 2 * tq) * S::LDS + 8 * n + gi]);
                        b[1] = mma::loaded<SPLIT>(dS[(8 * ka + 2 * tq + 1) * S::LDS + 8 * n + gi]);
                    }
                    mma::mma<SPLIT>(G[n], a, b);
                }
            }
        }
        // Plain TF32 and bfloat16 products keep q times log2(e)/√dh: undone here.
        if (p == 1 && !SPLIT) {
            const float unscale = 1.0f / (g.scale * kLog2e);
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) G[n][e] *= unscale;
        }
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[p][n][e] += G[n][e];
        // M_acc += dpartᵀ X: the contraction runs over tokens, tile n of G's columns.
        if constexpr (B16) {
            grad_x16<MT, KX>(G, sm, macc[p], gi, tq);
        } else {
#pragma unroll
            for (int ka = 0; ka < NT; ++ka) {
                mma::Op a[4];
                mma::a_from_acc<SPLIT>(a, G[ka]);
#pragma unroll
                for (int nx = 0; nx < KX; ++nx) {
                    mma::Op b[2];
                    b[0] = mma::loaded<SPLIT>(X[(8 * ka + 2 * tq) * S::LDX + 8 * nx + gi]);
                    b[1] = mma::loaded<SPLIT>(
                        X[(8 * ka + 2 * tq + 1) * S::LDX + 8 * nx + gi]);
                    mma::mma<SPLIT>(macc[p][nx], a, b);
                }
            }
        }
    }
}

// Head h's columns of a slot's partial row out: S [T, 3d] | M1 [3d, td] | M2 [3d, G].
template <int MT, int KX, class GT>
__device__ __forceinline__ void store_partial_row(const GT &g, float *out, int h,
                                                  const float (&sacc)[3][2 * MT][4],
                                                  const float (&macc)[3][KX][4], int gi, int tq) {
    constexpr int NT = 2 * MT;
    float *M1 = out + (size_t)g.T * g.d3, *M2 = M1 + (size_t)g.d3 * g.td;
#pragma unroll
    for (int p = 0; p < 3; ++p)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = gi + (e >> 1) * 8;
            if (j >= g.dh) continue;
            const int c = p * g.d + h * g.dh + j;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const int t = 8 * n + 2 * tq + (e & 1);
                if (t < g.T) out[(size_t)t * g.d3 + c] = sacc[p][n][e];
            }
#pragma unroll
            for (int nx = 0; nx < KX; ++nx) {
                const int f = 8 * nx + 2 * tq + (e & 1);
                if (f < g.td) M1[(size_t)c * g.td + f] = macc[p][nx][e];
                else if (f < g.td + g.G) M2[(size_t)c * g.G + (f - g.td)] = macc[p][nx][e];
            }
        }
}

}  // namespace fh::cuda::attn::tc
