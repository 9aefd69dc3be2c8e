// FH_MATH_BF16's products in the tensor-core attention kernels (attention_tc.cu's B16 instances):
// bfloat16 mma.sync m16n8k16 with float32 accumulation (mma_bf16.cuh), in place of the TF32
// m16n8k8 products of attention_tc.cuh, for the same tiling (attention_tc.cu's header).
//
// The k16 contraction covers a head's 16 channels, or 16 tokens, or the ≤ 16 token features, in
// one step, and its accumulator fragments pair up into A fragments in their natural column
// order (mma_bf16.cuh), so:
//   projection  X [TP, 16] (features 8 .. 15 zero where td + G ≤ 8) times W_augᵀ: one product
//               per 16 tokens, projection and channel tile, as TF32's at KX = 1;
//   scores      q kᵀ: q's two channel tiles are one A fragment, k's a B fragment, both packed
//               from the projection's accumulators: one product per 16 × 8 tile (TF32: two);
//   backward    dqᵀ = Kᵀ dSᵀ (dS's fragments packed into B fragments), dkᵀ = Qᵀ dS and
//               dpartᵀ X over 16 tokens a step (TF32: 8).
// Products that contract over tokens read their other operand with tokens along the row: kᵀ,
// qᵀ, dSᵀ and Xᵀ are kept in shared memory as bfloat16, rows of LDT = TP + 8 elements (TP / 2
// + 4 words: the 32-bit loads of a warp's lanes (g, t), rows g and pairs 2t, hit 32 different
// banks). Every operand is rounded to nearest even (the pack), the same value wherever it is
// read: the q and k of the scores are the qᵀ and kᵀ of the backward's products.
// At the default config a (transition, head) is 20 products forward (TF32: 28) and 42 backward
// (TF32: 72).
#pragma once
#include <cuda_bf16.h>

#include "attention_tc.cuh"
#include "mma_bf16.cuh"

namespace fh::cuda::attn::tc {

// The backward's shared memory per warp with bfloat16 products, in floats: X as XRows stores
// it (float32, unrounded), β and γ, then the bfloat16 rows of qᵀ, kᵀ [16, LDT], Xᵀ [KXP, LDT]
// and dSᵀ [TP, LDT]. (The forward's is TcShape's: X, v and c.)
template <int MT, int KX>
struct B16Shape {
    using S = TcShape<MT, KX>;
    static constexpr int TP = S::TP, KXP = S::KXP, LDX = S::LDX, LDT = TP + 8;
    static constexpr int X = 0, VEC = TP * LDX, QT = VEC + TP + kDHP, KT = QT + kDHP * LDT / 2,
                         XT = KT + kDHP * LDT / 2, DST = XT + KXP * LDT / 2,
                         BWD_FLOATS = DST + TP * LDT / 2;
    static_assert(LDT % 2 == 0 && BWD_FLOATS % 2 == 0, "32-bit pairs, 8-byte aligned X rows");
};

// A float as one bfloat16 (round to nearest even) into shared memory.
__device__ __forceinline__ void st_bf16(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

// The B fragments of the head's W_augᵀ: b[p][ν][0] rows (features) 2t, 2t + 1 and b[p][ν][1]
// rows 2t + 8, 2t + 9 of channel 8ν + g (zero past dh, and past td + G: KX = 1 needs no second
// half).
template <int KX>
struct WFrag16 {
    uint32_t b[3][2][2];
    template <class GT>
    __device__ __forceinline__ void load(const GT &g, int h, const float *__restrict__ comp,
                                         int gi, int tq) {
#pragma unroll
        for (int p = 0; p < 3; ++p)
#pragma unroll
            for (int nu = 0; nu < 2; ++nu) {
                const int j = 8 * nu + gi, c = p * g.d + h * g.dh + j, f = 2 * tq;
                const bool ok = j < g.dh;
                b[p][nu][0] = ok ? bmma::pack(w_aug(g, comp, c, f), w_aug(g, comp, c, f + 1)) : 0u;
                b[p][nu][1] = ok && KX == 2
                                  ? bmma::pack(w_aug(g, comp, c, f + 8), w_aug(g, comp, c, f + 9))
                                  : 0u;
            }
    }
};

// project_qkv on bfloat16 products (same outputs: q, k in qk's registers, unrounded, q times
// log2(e)/√dh; v into shared memory in the forward; β in the backward), except that the
// backward (BETA) keeps qᵀ and kᵀ as bfloat16 rows (B16Shape's QT, KT) instead of q and k.
template <int MT, int KX, bool BETA, class GT>
__device__ __forceinline__ void project_qkv16(const GT &g, int h, const float *ccb,
                                              const WFrag16<KX> &w, float *sm, const float *gv,
                                              float *beta, QKFrag<MT> &qk, int gi, int tq) {
    using S = TcShape<MT, KX>;
    using BS = B16Shape<MT, KX>;
    const float *X = sm + S::X;
    const int ld = S::ldcb(g.heads);
    const float qscale = g.scale * kLog2e;
#pragma unroll
    for (int mu = 0; mu < MT; ++mu) {
        const int t0 = 16 * mu + gi, t1 = t0 + 8;
        uint32_t a[4];
        {
            const float2 x0 = *reinterpret_cast<const float2 *>(X + t0 * S::LDX + 2 * tq);
            const float2 x1 = *reinterpret_cast<const float2 *>(X + t1 * S::LDX + 2 * tq);
            a[0] = bmma::pack(x0.x, x0.y);
            a[1] = bmma::pack(x1.x, x1.y);
            if (KX == 2) {
                const float2 x2 = *reinterpret_cast<const float2 *>(X + t0 * S::LDX + 2 * tq + 8);
                const float2 x3 = *reinterpret_cast<const float2 *>(X + t1 * S::LDX + 2 * tq + 8);
                a[2] = bmma::pack(x2.x, x2.y);
                a[3] = bmma::pack(x3.x, x3.y);
            } else {
                a[2] = a[3] = 0u;
            }
        }
        float b0 = 0.0f, b1 = 0.0f;  // β partials of rows t0, t1 (BETA)
#pragma unroll
        for (int p = 0; p < 3; ++p)
#pragma unroll
            for (int nu = 0; nu < 2; ++nu) {
                const int jc = 8 * nu + 2 * tq, col = h * 3 * kDHP + p * kDHP + jc;
                const float2 c0 = *reinterpret_cast<const float2 *>(ccb + t0 * ld + col);
                const float2 c1 = *reinterpret_cast<const float2 *>(ccb + t1 * ld + col);
                float acc[4] = {c0.x, c0.y, c1.x, c1.y};
                bmma::mma(acc, a, w.b[p][nu][0], w.b[p][nu][1]);
                if (p == 0)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[e] *= qscale;
                if (p < 2)
#pragma unroll
                    for (int e = 0; e < 4; ++e) qk.f[p][mu][nu][e] = acc[e];
                if (BETA && p < 2) {  // rows jc, jc + 1 (channels), columns t0, t1 (tokens)
                    __nv_bfloat16 *T = reinterpret_cast<__nv_bfloat16 *>(
                        sm + (p == 0 ? BS::QT : BS::KT));
                    st_bf16(T + jc * BS::LDT + t0, acc[0]);
                    st_bf16(T + (jc + 1) * BS::LDT + t0, acc[1]);
                    st_bf16(T + jc * BS::LDT + t1, acc[2]);
                    st_bf16(T + (jc + 1) * BS::LDT + t1, acc[3]);
                } else if (BETA) {
                    b0 = fmaf(gv[jc], acc[0], fmaf(gv[jc + 1], acc[1], b0));
                    b1 = fmaf(gv[jc], acc[2], fmaf(gv[jc + 1], acc[3], b1));
                } else if (p == 2) {
                    float *v = sm + S::V;
                    *reinterpret_cast<float2 *>(v + t0 * kLDQ + jc) = make_float2(acc[0], acc[1]);
                    *reinterpret_cast<float2 *>(v + t1 * kLDQ + jc) = make_float2(acc[2], acc[3]);
                }
            }
        if (BETA) store_beta(b0, b1, beta, t0, t1, tq);
    }
}

// The scores q kᵀ on bfloat16 products: q's channel tiles 0 and 1 of token tile μ are one A
// fragment; keys 8ν + g are rows g (+ 8 for odd ν) of k's tile ν / 2, channel tiles 0 and 1 the
// B fragment's two halves.
template <int MT>
__device__ __forceinline__ void scores16(const QKFrag<MT> &qk, float (&s)[MT][2 * MT][4]) {
#pragma unroll
    for (int mu = 0; mu < MT; ++mu) {
        const float(&q0)[4] = qk.f[0][mu][0], (&q1)[4] = qk.f[0][mu][1];
        const uint32_t a[4] = {bmma::pack(q0[0], q0[1]), bmma::pack(q0[2], q0[3]),
                               bmma::pack(q1[0], q1[1]), bmma::pack(q1[2], q1[3])};
#pragma unroll
        for (int nu = 0; nu < 2 * MT; ++nu) {
            const int hi = (nu & 1) * 2;
            const float(&k0)[4] = qk.f[1][nu >> 1][0], (&k1)[4] = qk.f[1][nu >> 1][1];
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mu][nu][e] = 0.0f;
            bmma::mma(s[mu][nu], a, bmma::pack(k0[hi], k0[hi + 1]), bmma::pack(k1[hi], k1[hi + 1]));
        }
    }
}

// dSᵀ [keys, queries] as bfloat16 rows (B16Shape's DST) from dS's accumulator fragments (rows
// queries 16μ + g and + 8, columns keys 8ν + 2t and + 1).
template <int MT, int KX>
__device__ __forceinline__ void store_dst(const float (&s)[MT][2 * MT][4], float *sm, int gi,
                                          int tq) {
    using BS = B16Shape<MT, KX>;
    __nv_bfloat16 *T = reinterpret_cast<__nv_bfloat16 *>(sm + BS::DST);
#pragma unroll
    for (int mu = 0; mu < MT; ++mu)
#pragma unroll
        for (int nu = 0; nu < 2 * MT; ++nu) {
            const int q0 = 16 * mu + gi, key = 8 * nu + 2 * tq;
            st_bf16(T + key * BS::LDT + q0, s[mu][nu][0]);
            st_bf16(T + (key + 1) * BS::LDT + q0, s[mu][nu][1]);
            st_bf16(T + key * BS::LDT + q0 + 8, s[mu][nu][2]);
            st_bf16(T + (key + 1) * BS::LDT + q0 + 8, s[mu][nu][3]);
        }
}

// G = dqᵀ (p = 0: Kᵀ dSᵀ, dS's fragments as the B operand) or dkᵀ (p = 1: Qᵀ dS, dSᵀ's rows),
// as accumulator fragments with the head's channels as rows and tokens as columns, contracting
// over 16 tokens a step.
template <int MT, int KX>
__device__ __forceinline__ void grad_qk16(int p, const float (&s)[MT][2 * MT][4], const float *sm,
                                          float (&G)[2 * MT][4], int gi, int tq) {
    using BS = B16Shape<MT, KX>;
    const __nv_bfloat16 *A =
        reinterpret_cast<const __nv_bfloat16 *>(sm + (p == 0 ? BS::KT : BS::QT));
    const __nv_bfloat16 *D = reinterpret_cast<const __nv_bfloat16 *>(sm + BS::DST);
#pragma unroll
    for (int n = 0; n < 2 * MT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) G[n][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < MT; ++ks) {
        const int k0 = 16 * ks + 2 * tq;
        const uint32_t a[4] = {bmma::ld_pair(A + gi * BS::LDT + k0),
                               bmma::ld_pair(A + (gi + 8) * BS::LDT + k0),
                               bmma::ld_pair(A + gi * BS::LDT + k0 + 8),
                               bmma::ld_pair(A + (gi + 8) * BS::LDT + k0 + 8)};
#pragma unroll
        for (int n = 0; n < 2 * MT; ++n) {
            uint32_t b0, b1;
            if (p == 0) {  // queries 8n + g: rows g (+ 8 for odd n) of dS's tile n / 2
                const int mu = n >> 1, hi = (n & 1) * 2;
                b0 = bmma::pack(s[mu][2 * ks][hi], s[mu][2 * ks][hi + 1]);
                b1 = bmma::pack(s[mu][2 * ks + 1][hi], s[mu][2 * ks + 1][hi + 1]);
            } else {       // keys 8n + g: rows of dSᵀ
                const __nv_bfloat16 *r = D + (8 * n + gi) * BS::LDT + k0;
                b0 = bmma::ld_pair(r);
                b1 = bmma::ld_pair(r + 8);
            }
            bmma::mma(G[n], a, b0, b1);
        }
    }
}

// M_acc += G X: G's token tiles 2s and 2s + 1 are the A fragment of token step s, Xᵀ's rows
// (features 8ν + g) the B fragments.
template <int MT, int KX>
__device__ __forceinline__ void grad_x16(const float (&G)[2 * MT][4], const float *sm,
                                         float (&macc)[KX][4], int gi, int tq) {
    using BS = B16Shape<MT, KX>;
    const __nv_bfloat16 *XT = reinterpret_cast<const __nv_bfloat16 *>(sm + BS::XT);
#pragma unroll
    for (int ks = 0; ks < MT; ++ks) {
        const float(&g0)[4] = G[2 * ks], (&g1)[4] = G[2 * ks + 1];
        const uint32_t a[4] = {bmma::pack(g0[0], g0[1]), bmma::pack(g0[2], g0[3]),
                               bmma::pack(g1[0], g1[1]), bmma::pack(g1[2], g1[3])};
#pragma unroll
        for (int nx = 0; nx < KX; ++nx) {
            const __nv_bfloat16 *r = XT + (8 * nx + gi) * BS::LDT + 16 * ks + 2 * tq;
            bmma::mma(macc[nx], a, bmma::ld_pair(r), bmma::ld_pair(r + 8));
        }
    }
}

}  // namespace fh::cuda::attn::tc
