// The attention learner's per-(transition, head) work on tensor cores (the TC and TC_SPLIT paths
// of attention_paths.hpp): TF32 mma.sync m16n8k8 (cuda/mma_tf32.cuh), split TF32 for float32
// accuracy.
//
// Tiling. One warp computes one (transition, head) at a time. A block has heads × wph warps;
// warp w serves head h = w mod heads for every wph-th transition of the block's range (its
// "slot"), so the warps of a slot cover all heads of one transition. With TP = T rounded up to
// 16 (MT tiles of 16 tokens), the head's width padded to 16 and KXP = td + G rounded up to 8,
// the warp holds
//   X [TP, KXP]     token features (shared memory): obs row t = [tok_t | 0], goal row [0 | g]
//   q, k, v [TP, 16] = X · W_augᵀ + cc, W_aug = [Wc | Wgc] of the head's channels: q and k
//                   as the projection's accumulator fragments (registers); the forward stores
//                   v in shared memory, the backward q and k (for its transposed products)
//   S [TP, TP]      = q kᵀ straight from those fragments (mma_tf32.cuh's permuted contraction
//                   order), then A = softmax(S/√dh) over the T keys (registers)
// Forward: c = column sums of A (a butterfly over the fragments' rows), ā = c·v / T (SIMT).
// With plain TF32 and bfloat16 products it also leaves its softmax statistics in a scratch
// buffer: each query row's maximum and reciprocal sum and the column sums c, 96 floats a
// (transition, head), 24 MiB at B = 16384 (attention_tc.cuh's stats_offset).
// Backward, recomputing the forward as FlashAttention does, its scores from the projections and
// A = exp2(s − max) · inv from the forward's statistics (as FlashAttention-2 keeps the
// log-sum-exp of each row), c the forward's: the softmax's reductions are not done again (the
// butterflies of the maximum, the sum and c, the reciprocal: 1928 SASS instructions against
// 2168 at the cvt.rn code, bench/results/h100-2026-12-06-ncu-source-cvt-rn.txt; TF32 attention
// lane 0.331 / 0.334 → 0.321 / 0.319 ms single-stream on an H100, BF16 within the spread,
// bench/results/h100-2026-12-06-attn-stats-before-after.json). Split products (strict FP32)
// recompute all of it in float32's order. Then: β_s = γ·v_s with γ = dā/T,
// dS = A ⊙ (β − Σ_s A β) / √dh (registers, and a copy in shared memory), then the per-token
// gradients transposed, as accumulator fragments with the head's channels as rows and tokens
// as columns:
//   dqᵀ = Kᵀ dSᵀ  (dS's accumulator fragments ARE the B fragments: no shared-memory trip)
//   dkᵀ = Qᵀ dS   (dS read back from shared memory)
//   dvᵀ = γ cᵀ    (an outer product, no product needed)
// each added to S_acc (the per-token sums, same fragment layout) and, used directly as the A
// operand, multiplied by X into M_acc = dqkvᵀ X (M1 | M2 of attention_paths.hpp). Both
// accumulators stay in registers over the block's transitions; at the end each warp writes its
// head's columns of its slot's partial row. No atomics; every sum has a fixed order.
//
// Why: at the default sizes (T = 32, d_head = 16, td + G = 8) a (transition, head) is 28 tile
// products forward and 72 backward, small enough for one warp with no block-wide barrier in
// the loop, and B·heads = 65536 of them at B = 16384 fill the H200 many times. Shared-memory
// strides are ≡ 4 or 8 (mod 32) words so that the fragment loads hit 32 different banks (the
// k index of the backward products runs in the permuted order of mma_tf32.cuh).
//
// FH_MATH_BF16 (the B16 instances): the same tiling on bfloat16 products, m16n8k16
// (attention_bf16.cuh: 20 products a (transition, head) forward and 42 backward at the default
// config, against 28 and 72).
//
// Geometry: the kernels take it as a template type. The default config's (attention_tc.cuh's
// GeomDefault) is compiled in, so that its index arithmetic, bounds checks and trip counts fold to
// constants; every other config passes attention_paths.hpp's Geom, read at run time. Both compute
// the same operations in the same order: the same bits. The default geometry's instances also
// stage X with one float4 a lane (attention_tc.cuh's XRowVec: its row of x is X's rows in order)
// and divide by T = 32 as a product by 2⁻⁵ (div_by_T), still the same bits.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "attention_bf16.cuh"
#include "attention_paths.hpp"
#include "attention_pool.cuh"
#include "attention_tc.cuh"
#include "aux_common.cuh"
#include "mma_tf32.cuh"
#include "launch.cuh"

namespace fh::cuda::attn {

namespace {

using namespace tc;

// About this many transitions per block: at B = 16384 one wave of resident blocks covers the
// batch, so each block stages cc once and the backward writes few partial rows.
constexpr int kTargetSamples = 64;

// The W_aug fragments of a product kind: TF32 (or split) or, B16, bfloat16.
template <int KX, bool SPLIT, bool B16>
using WFragOf = std::conditional_t<B16, WFrag16<KX>, WFrag<KX, SPLIT>>;

// The forward: blocks of up to 8 warps (two slots of 4 heads at the default), at most 128
// registers so that two blocks fit an SM (one for the largest split variant, which would spill).
// B16: bfloat16 products (attention_bf16.cuh; FH_MATH_BF16), X kept unrounded for them; at one
// feature step three blocks an SM (80 registers, no spill at the default config).
// Plain TF32 and bfloat16 products (!SPLIT): also writes each (transition, head)'s softmax
// statistics, its rows' maxima and reciprocal sums and its column sums, to stats (stats_offset),
// which the backward reads instead of recomputing them; split products leave stats alone.
template <class GT, int MT, int KX, bool SPLIT, bool B16 = false>
__global__ void __launch_bounds__(256, (SPLIT && KX == 2) ? 1 : (B16 && KX == 1) ? 3 : 2)
k_attn_tc_fwd(GT g, int wph, int spb, const float *__restrict__ x, const float *__restrict__ comp,
              float *__restrict__ abar, const float *__restrict__ Wt, const float *__restrict__ Wg,
              const float *__restrict__ bo, float *__restrict__ pool, float *__restrict__ aug,
              int ld, float *__restrict__ stats) {
    pdl_enter();
    using S = TcShape<MT, KX>;
    extern __shared__ float4 sm4[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = warp % g.heads, slot = warp / g.heads;
    const int gi = lane >> 2, tq = lane & 3;
    float *ccb = reinterpret_cast<float *>(sm4);
    float *sm = ccb + S::cc_floats(g.heads) + warp * S::FWD_FLOATS;
    stage_cc<MT, KX>(g, comp, ccb);
    WFragOf<KX, SPLIT, B16> w;
    w.load(g, h, comp, gi, tq);
    __syncthreads();
    const float Tf = (float)g.T;
    const int i0 = blockIdx.x * spb, i1 = min(g.B, i0 + spb);
    static_assert(!std::is_same_v<GT, GeomDefault> || (MT == 2 && KX == 1),
                  "the default config's shape");
    XRowsFor<GT, MT, KX, SPLIT || B16> xr;
    if (i0 + slot < i1) xr.fetch(g, x + (size_t)(i0 + slot) * g.D, lane);
    for (int i = i0 + slot; i < i1; i += wph) {
        xr.store(sm + S::X, lane);
        if (i + wph < i1) xr.fetch(g, x + (size_t)(i + wph) * g.D, lane);
        __syncwarp();
        QKFrag<MT> qk;
        float s[MT][S::NT][4], c[S::NT][2];
        RowStats<MT> st;
        if constexpr (B16) {
            project_qkv16<MT, KX, false>(g, h, ccb, w, sm, nullptr, nullptr, qk, gi, tq);
            softmax_of<MT, false>(g, gi, tq, s, c, st, [&](float (&sc)[MT][2 * MT][4]) {
                scores16<MT>(qk, sc);
            });
        } else {
            project_qkv<MT, KX, SPLIT, false>(g, h, ccb, w, sm, nullptr, nullptr, qk, gi, tq);
            softmax_rows<MT, KX, SPLIT>(g, qk, gi, tq, s, c, st);
        }
        // Lane t' of a quad writes row (μ, r) = (t' / 2, t' mod 2) of its rows' statistics (not
        // with split products); lanes of row group 0 the column sums, to shared memory for ā and
        // beside the statistics.
        float *out = SPLIT ? nullptr : stats + stats_offset<MT>(i, g.heads, h);
        if constexpr (!SPLIT)
#pragma unroll
            for (int mu = 0; mu < MT; ++mu)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (tq == 2 * mu + r)
                        *reinterpret_cast<float2 *>(out + 2 * (16 * mu + gi + 8 * r)) =
                            make_float2(st.mx[mu][r], st.inv[mu][r]);
        if (gi == 0)
#pragma unroll
            for (int nu = 0; nu < S::NT; ++nu) {
                const float2 cv = make_float2(c[nu][0], c[nu][1]);
                *reinterpret_cast<float2 *>(sm + S::FWD_VEC + 8 * nu + 2 * tq) = cv;
                if constexpr (!SPLIT)
                    *reinterpret_cast<float2 *>(out + 2 * S::TP + 8 * nu + 2 * tq) = cv;
            }
        __syncwarp();
        // ā_h[j] = Σ_s c_s v_s[j] / T: lanes j and j + 16 take half the keys each (padded keys
        // have c_s = 0 and v_s = 0).
        {
            const float *v = sm + S::V, *cv = sm + S::FWD_VEC;
            const int j = lane & 15, s0 = (lane >> 4) * (S::TP / 2);
            float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
            for (int u = 0; u < S::TP / 2; u += 2) {
                a0 = fmaf(cv[s0 + u], v[(s0 + u) * kLDQ + j], a0);
                a1 = fmaf(cv[s0 + u + 1], v[(s0 + u + 1) * kLDQ + j], a1);
            }
            float a = a0 + a1;
            a += __shfl_xor_sync(0xffffffffu, a, 16);
            if (lane < g.dh)
                abar[(size_t)i * ld + h * g.dh + lane] = div_by_T(g, Tf, a);
        }
        // One of the slot's warps also writes the transition's pool and aug rows, the heads
        // taking turns: when head 0's warp wrote them all it finished last and held its block
        // (attention lane 0.521 → 0.482 ms single-stream at B = 16384,
        // bench/results/h200-2026-12-01-attention-pool-before-after.json).
        if (h == ((i - i0 - slot) / wph) % g.heads)
            pool_aug_row(g, x + (size_t)i * g.D, comp, Wt, Wg, bo,
                         pool ? pool + (size_t)i * ld : nullptr, aug + (size_t)i * ld, lane);
        __syncwarp();
    }
}

// The backward: blocks of heads × wph ≤ 4 warps capped at 168 registers so that three fit an
// SM (two for the split and two-feature-step variants, which would spill at 168); WIDE blocks
// (5 to 8 heads, one warp each) take what they need. B16: bfloat16 products
// (attention_bf16.cuh), with B16Shape's shared memory.
// Plain TF32 and bfloat16 products (!SPLIT): A from the forward's row statistics and c from its
// column sums (stats) instead of the softmax's reductions; split products recompute them exactly.
template <class GT, int MT, int KX, bool SPLIT, bool WIDE, bool B16 = false>
__global__ void __launch_bounds__(WIDE ? 256 : 128, WIDE ? 1 : ((SPLIT || KX == 2) ? 2 : 3))
k_attn_tc_bwd(GT g, int wph, int spb, const float *__restrict__ x, const float *__restrict__ comp,
              const float *__restrict__ dabar, float *__restrict__ partial,
              const float *__restrict__ stats) {
    pdl_enter();
    using S = TcShape<MT, KX>;
    using BS = B16Shape<MT, KX>;
    constexpr int NT = S::NT;
    extern __shared__ float4 sm4[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = warp % g.heads, slot = warp / g.heads;
    const int gi = lane >> 2, tq = lane & 3;
    float *ccb = reinterpret_cast<float *>(sm4);
    float *sm = ccb + S::cc_floats(g.heads) + warp * (B16 ? BS::BWD_FLOATS : S::BWD_FLOATS);
    const float *X = sm + S::X, *q = sm + S::Q, *k = sm + S::K;
    float *vec = sm + (B16 ? BS::VEC : S::BWD_VEC), *gv = vec + S::TP, *dS = sm + S::DS;
    stage_cc<MT, KX>(g, comp, ccb);
    WFragOf<KX, SPLIT, B16> w;
    w.load(g, h, comp, gi, tq);
    __syncthreads();
    const float Tf = (float)g.T;

    float sacc[3][NT][4], macc[3][KX][4];
#pragma unroll
    for (int p = 0; p < 3; ++p) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[p][n][e] = 0.0f;
#pragma unroll
        for (int n = 0; n < KX; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) macc[p][n][e] = 0.0f;
    }

    const int i0 = blockIdx.x * spb, i1 = min(g.B, i0 + spb);
    static_assert(!std::is_same_v<GT, GeomDefault> || (MT == 2 && KX == 1),
                  "the default config's shape");
    XRowsFor<GT, MT, KX, SPLIT || B16> xr;
    // dā_h of the next transition, loaded with its X one transition ahead (at its use, its wait
    // was 6 % of the kernel's stall samples on the H200).
    auto dabar_of = [&](int i) {
        return lane < g.dh ? __ldg(dabar + (size_t)i * g.d + h * g.dh + lane) : 0.0f;
    };
    float da_next = 0.0f;
    if (i0 + slot < i1) {
        xr.fetch(g, x + (size_t)(i0 + slot) * g.D, lane);
        da_next = dabar_of(i0 + slot);
    }
    for (int i = i0 + slot; i < i1; i += wph) {
        xr.store(sm + S::X, lane);
        if constexpr (B16)
            xr.store_t(reinterpret_cast<__nv_bfloat16 *>(sm + BS::XT), BS::LDT, lane);
        // γ = dā_h / T (the gradient of every query row's attention output), zero past dh.
        if (lane < kDHP)
            gv[lane] = lane < g.dh ? div_by_T(g, Tf, da_next) : 0.0f;
        if (i + wph < i1) {
            xr.fetch(g, x + (size_t)(i + wph) * g.D, lane);
            da_next = dabar_of(i + wph);
        }
        __syncwarp();
        // !SPLIT: the forward's statistics of the thread's rows and its key columns' sums,
        // loaded here so that the projections and the scores run under the loads (loaded one
        // transition ahead instead, they spilled 76 bytes and the TF32 step was slower:
        // bench/results/ptxas-2026-12-06-attn-stats.txt, -attn-stats-before-after.json).
        RowStats<MT> rstat;
        float c[NT][2];
        if constexpr (!SPLIT) {
            const float *in = stats + stats_offset<MT>(i, g.heads, h);
#pragma unroll
            for (int mu = 0; mu < MT; ++mu)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float2 v =
                        __ldg(reinterpret_cast<const float2 *>(in + 2 * (16 * mu + gi + 8 * r)));
                    rstat.mx[mu][r] = v.x;
                    rstat.inv[mu][r] = v.y;
                }
#pragma unroll
            for (int nu = 0; nu < NT; ++nu) {
                const float2 v =
                    __ldg(reinterpret_cast<const float2 *>(in + 2 * S::TP + 8 * nu + 2 * tq));
                c[nu][0] = v.x;
                c[nu][1] = v.y;
            }
        }
        // q, k into shared memory (B16: qᵀ, kᵀ); β_s = γ · v_s into vec (rows ≥ T of v are zero).
        QKFrag<MT> qk;
        if constexpr (B16) project_qkv16<MT, KX, true>(g, h, ccb, w, sm, gv, vec, qk, gi, tq);
        else project_qkv<MT, KX, SPLIT, true>(g, h, ccb, w, sm, gv, vec, qk, gi, tq);
        const float gam_lo = gv[gi], gam_hi = gv[gi + 8];
        __syncwarp();
        float s[MT][NT][4];
        if constexpr (SPLIT) {
            RowStats<MT> unused;
            softmax_rows<MT, KX, SPLIT>(g, qk, gi, tq, s, c, unused);
        } else {
            if constexpr (B16) scores16<MT>(qk, s);
            else scores<MT, false>(qk, s);
            softmax_stored<MT>(g, tq, rstat, s);
        }
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
        __syncwarp();
    }

    // This warp's head columns of its slot's partial row: S [T, 3d] | M1 [3d, td] | M2 [3d, G].
    float *out = partial + (size_t)(blockIdx.x * wph + slot) * g.pw;
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

template <class GT>
using FwdFn = void (*)(GT, int, int, const float *, const float *, float *, const float *,
                       const float *, const float *, float *, float *, int, float *);
template <class GT>
using BwdFn = void (*)(GT, int, int, const float *, const float *, const float *, float *,
                       const float *);

template <int MT, int KX, bool SPLIT, bool B16>
void pick(bool wide, FwdFn<Geom> &f, BwdFn<Geom> &b, size_t &wf, size_t &wb) {
    f = k_attn_tc_fwd<Geom, MT, KX, SPLIT, B16>;
    b = wide ? k_attn_tc_bwd<Geom, MT, KX, SPLIT, true, B16>
             : k_attn_tc_bwd<Geom, MT, KX, SPLIT, false, B16>;
    wf = TcShape<MT, KX>::FWD_FLOATS;
    wb = B16 ? B16Shape<MT, KX>::BWD_FLOATS : TcShape<MT, KX>::BWD_FLOATS;
}
template <bool SPLIT, bool B16>
void pick_shape(int MT, int KX, bool wide, FwdFn<Geom> &f, BwdFn<Geom> &b, size_t &wf,
                size_t &wb) {
    if (MT == 1)
        KX == 1 ? pick<1, 1, SPLIT, B16>(wide, f, b, wf, wb)
                : pick<1, 2, SPLIT, B16>(wide, f, b, wf, wb);
    else
        KX == 1 ? pick<2, 1, SPLIT, B16>(wide, f, b, wf, wb)
                : pick<2, 2, SPLIT, B16>(wide, f, b, wf, wb);
}

class TcPath final : public Path {
public:
    TcPath(const Geom &g, Products prod) : g_(g), split_(prod == Products::SPLIT) {
        const int MT = g.T <= 16 ? 1 : 2, KX = g.td + g.G <= 8 ? 1 : 2;
        if (!split_) stats_bytes_ = (size_t)g.B * g.heads * stats_floats(MT) * sizeof(float);
        // Forward blocks: two slots of heads (up to 8 warps) share the staged cc; backward
        // blocks: one slot of up to 4 warps (its registers and shared memory are larger).
        wph_f_ = std::max(1, 8 / g.heads);
        wph_ = std::max(1, 4 / g.heads);
        const bool wide = g.heads * wph_ > 4;
        size_t wf = 0, wb = 0;
        if (GeomDefault::matches(g)) {
            // The default config: the kernels compiled for its geometry (the runtime-geometry
            // instances below: 0.463 → 0.422 ms for the attention lane single-stream at
            // B = 16384, bench/results/h200-2026-12-02-attn-geom-before-after.json).
            static_assert(GeomDefault::T == 32 && GeomDefault::td + GeomDefault::G == 8 &&
                              GeomDefault::heads == 4, "MT = 2, KX = 1, one slot of 4 heads");
            switch (prod) {
            case Products::TF32:
                fwd_d_ = k_attn_tc_fwd<GeomDefault, 2, 1, false>;
                bwd_d_ = k_attn_tc_bwd<GeomDefault, 2, 1, false, false>;
                break;
            case Products::SPLIT:
                fwd_d_ = k_attn_tc_fwd<GeomDefault, 2, 1, true>;
                bwd_d_ = k_attn_tc_bwd<GeomDefault, 2, 1, true, false>;
                break;
            case Products::BF16:
                fwd_d_ = k_attn_tc_fwd<GeomDefault, 2, 1, false, true>;
                bwd_d_ = k_attn_tc_bwd<GeomDefault, 2, 1, false, false, true>;
                break;
            }
        }
        switch (prod) {
        case Products::TF32: pick_shape<false, false>(MT, KX, wide, fwd_, bwd_, wf, wb); break;
        case Products::SPLIT: pick_shape<true, false>(MT, KX, wide, fwd_, bwd_, wf, wb); break;
        case Products::BF16: pick_shape<false, true>(MT, KX, wide, fwd_, bwd_, wf, wb); break;
        }
        threads_f_ = g.heads * wph_f_ * 32;
        threads_ = g.heads * wph_ * 32;
        const size_t cc = (size_t)(MT * 16) * (g.heads * 3 * kDHP + 8);
        smem_f_ = (cc + (size_t)g.heads * wph_f_ * wf) * sizeof(float);
        smem_b_ = (cc + (size_t)g.heads * wph_ * wb) * sizeof(float);
        const void *kf = fwd_d_ ? (const void *)fwd_d_ : (const void *)fwd_;
        const void *kb = bwd_d_ ? (const void *)bwd_d_ : (const void *)bwd_;
        aux::allow_smem(kf, smem_f_, "attention forward (tensor cores)");
        aux::allow_smem(kb, smem_b_, "attention backward (tensor cores)");
        // A block covers wph transitions at a time: its range is a multiple of wph.
        spb_f_ = round_up(wave_samples_per_block(kf, threads_f_, smem_f_, g.B, kTargetSamples),
                          wph_f_);
        spb_b_ = round_up(wave_samples_per_block(kb, threads_, smem_b_, g.B, kTargetSamples), wph_);
        nblk_f_ = (g.B + spb_f_ - 1) / spb_f_;
        nblk_b_ = (g.B + spb_b_ - 1) / spb_b_;
    }

    Kernels kind() const override { return split_ ? Kernels::TC_SPLIT : Kernels::TC; }
    int partial_rows() const override { return nblk_b_ * wph_; }
    // The softmax statistics (stats_offset's layout) that the forward leaves for the backward,
    // with plain TF32 and bfloat16 products.
    size_t scratch_bytes() const override { return stats_bytes_; }
    void bind_scratch(void *p) override { stats_buf_ = static_cast<float *>(p); }

    void forward(const FwdArgs &a, cudaStream_t s) override {
        if (fwd_d_) {
            check_aligned(a.x);
            FH_LAUNCH(fwd_d_, nblk_f_, threads_f_, smem_f_, s, GeomDefault{g_.B}, wph_f_, spb_f_,
                      a.x, a.comp, a.abar, a.Wt, a.Wg, a.bo, a.pool, a.aug, a.ld, stats_buf_);
        } else {
            FH_LAUNCH(fwd_, nblk_f_, threads_f_, smem_f_, s, g_, wph_f_, spb_f_, a.x, a.comp,
                      a.abar, a.Wt, a.Wg, a.bo, a.pool, a.aug, a.ld, stats_buf_);
        }
    }
    void backward(const BwdArgs &a, cudaStream_t s) override {
        if (bwd_d_) {
            check_aligned(a.x);
            FH_LAUNCH(bwd_d_, nblk_b_, threads_, smem_b_, s, GeomDefault{g_.B}, wph_, spb_b_, a.x,
                      a.comp, a.dabar, a.partial, (const float *)stats_buf_);
        } else {
            FH_LAUNCH(bwd_, nblk_b_, threads_, smem_b_, s, g_, wph_, spb_b_, a.x, a.comp, a.dabar,
                      a.partial, (const float *)stats_buf_);
        }
    }

private:
    static int round_up(int spb, int wph) { return (spb + wph - 1) / wph * wph; }
    // The default geometry's kernels load x's rows as float4s (XRowVec): the step's x̃ buffer is
    // cudaMalloc'd (256-byte aligned) and its rows are 512 bytes, so this holds unless that
    // changes.
    static void check_aligned(const float *x) { aux::require_aligned16(x, "attention: x~"); }

    Geom g_;
    bool split_;
    size_t stats_bytes_ = 0;      // B·heads pairs of stats_floats(MT), with the plain products
    float *stats_buf_ = nullptr;
    FwdFn<Geom> fwd_ = nullptr;
    BwdFn<Geom> bwd_ = nullptr;
    FwdFn<GeomDefault> fwd_d_ = nullptr;  // set for the default config's geometry
    BwdFn<GeomDefault> bwd_d_ = nullptr;
    int wph_f_ = 1, wph_ = 1, threads_f_ = 32, threads_ = 32, spb_f_ = 1, spb_b_ = 1,
        nblk_f_ = 1, nblk_b_ = 1;
    size_t smem_f_ = 0, smem_b_ = 0;
};

}  // namespace

std::unique_ptr<Path> make_tc_path(const Geom &g, Products prod) {
    if (g.T > 32 || g.dh > kDHP || g.td + g.G > 16 || g.heads > 8) return nullptr;
    return std::make_unique<TcPath>(g, prod);
}

}  // namespace fh::cuda::attn
