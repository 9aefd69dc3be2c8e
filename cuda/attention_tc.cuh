// Device building blocks of the tensor-core attention kernels (attention_tc.cu): shared-memory
// geometry, the staged cc, the transition's token features, the W_aug fragments, the q/k/v
// projection and the row softmax with column sums. attention_tc.cu's header explains the tiling.
#pragma once
#include <cmath>
#include <type_traits>

#include <cuda_bf16.h>

#include "attention_paths.hpp"
#include "mma_tf32.cuh"
#include "stage.cuh"

namespace fh::cuda::attn::tc {

// The default config's geometry (obs_dim 124 = 31 tokens of attn_token_dim 4 plus the goal
// token of goal_dim 4, attn_d_model 64 in 4 heads) as compile-time constants, with the batch size
// the one value read at run time. The kernels take their geometry as a template type, Geom or
// this: with it their index arithmetic, bounds checks and loop trip counts fold to constants
// (the integer instructions were about 30 % of their stall samples, Nsight on the H200).
struct GeomDefault {
    int B;
    static constexpr int D = 128, O = 124, G = 4, td = 4, To = 31, T = 32, d = 64, d3 = 3 * d,
                         heads = 4, dh = 16, na = td + G + 1;
    static constexpr float scale = 0.25f;  // 1/√dh
    static constexpr int c_wg = d3 * td, c_cc = c_wg + d3 * G, c_eb = c_cc + T * d3,
                         pw = T * d3 + d3 * td + d3 * G;
    // Whether the runtime geometry g is this one.
    static bool matches(const Geom &g) {
        return g.D == D && g.O == O && g.G == G && g.td == td && g.To == To && g.T == T &&
               g.d == d && g.d3 == d3 && g.heads == heads && g.dh == dh && g.na == na &&
               g.scale == scale && g.c_wg == c_wg && g.c_cc == c_cc && g.c_eb == c_eb &&
               g.pw == pw;
    }
};

constexpr int kDHP = 16;      // head width, padded
constexpr int kLDQ = kDHP + 4;
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: the block's cc of every head (zero-padded), then one region per warp: in the
// forward X, v and c; in the backward X, q, k, dS (β comes from v's fragments directly), β and γ.
template <int MT, int KX>
struct TcShape {
    static constexpr int TP = 16 * MT, NT = 2 * MT, KXP = 8 * KX;
    static constexpr int LDX = KXP + 4, LDS = TP + 4;
    static constexpr int X = 0, Q = TP * LDX, K = Q + TP * kLDQ, DS = K + TP * kLDQ;
    static constexpr int V = Q;  // forward
    static constexpr int FWD_VEC = V + TP * kLDQ, BWD_VEC = DS + TP * LDS;
    static constexpr int FWD_FLOATS = FWD_VEC + TP + kDHP;  // per warp, forward
    static constexpr int BWD_FLOATS = BWD_VEC + TP + kDHP;  // per warp, backward
    static constexpr int XPL = TP * KXP / 32;               // X elements per lane
    // cc of all heads: row t = [head 0: q 16 | k 16 | v 16 | head 1: ...] + 8 (banks)
    __host__ __device__ static int ldcb(int heads) { return heads * 3 * kDHP + 8; }
    __host__ __device__ static int cc_floats(int heads) { return TP * ldcb(heads); }
};

// The block's cc_t of every head into shared memory (rows ≥ T and channels ≥ dh zero), once
// per kernel: the projections then read it without bounds checks. 8 loads per thread in flight
// (stage.cuh).
template <int MT, int KX, class GT>
__device__ __forceinline__ void stage_cc(const GT &g, const float *__restrict__ comp, float *ccb) {
    using S = TcShape<MT, KX>;
    const int w = g.heads * 3 * kDHP, ld = S::ldcb(g.heads);
    auto at = [&](int e, int &t, int &r) {
        t = e / w;
        r = e - t * w;
    };
    auto load = [&](int e) {
        int t, r;
        at(e, t, r);
        const int h = r / (3 * kDHP), r2 = r - h * 3 * kDHP;
        const int p = r2 / kDHP, j = r2 - p * kDHP;
        return (t < g.T && j < g.dh)
                   ? __ldg(comp + g.c_cc + (size_t)t * g.d3 + p * g.d + h * g.dh + j)
                   : 0.0f;
    };
    auto store = [&](int e, float v) {
        int t, r;
        at(e, t, r);
        ccb[t * ld + r] = v;
    };
    stage_batched<8, float>(S::TP * w, load, store);
}

// X of transition i: obs rows [tok_t | 0], the goal row [0 | g], zero padding. fetch() issues
// the global loads of a transition into registers one transition ahead; store() writes them.
template <int MT, int KX, bool SPLIT>
struct XRows {
    using S = TcShape<MT, KX>;
    float v[S::XPL];
    template <class GT>
    __device__ __forceinline__ void fetch(const GT &g, const float *__restrict__ xi, int lane) {
#pragma unroll
        for (int k = 0; k < S::XPL; ++k) {
            const int e = lane + 32 * k, t = e / S::KXP, f = e - t * S::KXP;
            float x = 0.0f;
            if (t < g.To) {
                if (f < g.td) x = __ldg(xi + t * g.td + f);
            } else if (t == g.To && f >= g.td && f < g.td + g.G) {
                x = __ldg(xi + g.O + (f - g.td));
            }
            v[k] = x;
        }
    }
    __device__ __forceinline__ void store(float *X, int lane) const {
#pragma unroll
        for (int k = 0; k < S::XPL; ++k) {
            const int e = lane + 32 * k, t = e / S::KXP, f = e - t * S::KXP;
            X[t * S::LDX + f] = mma::stored<SPLIT>(v[k]);
        }
    }
    // Xᵀ as bfloat16 (round to nearest even) for bfloat16 products (attention_bf16.cuh):
    // feature f of token t at f·ldt + t.
    __device__ __forceinline__ void store_t(__nv_bfloat16 *XT, int ldt, int lane) const {
#pragma unroll
        for (int k = 0; k < S::XPL; ++k) {
            const int e = lane + 32 * k, t = e / S::KXP, f = e - t * S::KXP;
            XT[f * ldt + t] = __float2bfloat16_rn(v[k]);
        }
    }
};

// XRows for the default config's geometry, whose row of D = 128 floats is 32 groups of 4:
// token t's td = 4 features for t < To = 31, then the goal's G = 4, which X holds at row 31,
// columns 4 to 7. Lane t loads its group as one float4 (the row 16-byte aligned: TcPath checks
// x) and stores X's row t as two float4s, the same values where XRows' eight loads a lane put
// them. XRows' per-element branches, 64-bit addresses and index arithmetic, with the X stores and
// γ's division, were 198 of the backward's 1077 warp instructions per (transition, head) (Nsight
// at 1e0bf10, bench/results/h100-2026-12-06-ncu-source-nineteenth.txt); with this and
// div_by_T's product the attention lane took 0.319 → 0.293 ms single-stream on an H100, the same
// bits (bench/results/h100-2026-12-06-attn-xrow-before-after.json).
template <bool SPLIT>
struct XRowVec {
    using S = TcShape<2, 1>;
    static_assert(GeomDefault::T == 32 && GeomDefault::To == 31 && GeomDefault::td == 4 &&
                      GeomDefault::G == 4 && GeomDefault::D == 128 &&
                      GeomDefault::O == 4 * GeomDefault::To && S::KXP == 8,
                  "one float4 a lane: a token's features, then the goal's");
    float4 v;
    __device__ __forceinline__ void fetch(const GeomDefault &, const float *__restrict__ xi,
                                          int lane) {
        v = __ldg(reinterpret_cast<const float4 *>(xi) + lane);
    }
    __device__ __forceinline__ void store(float *X, int lane) const {
        const float4 r = make_float4(mma::stored<SPLIT>(v.x), mma::stored<SPLIT>(v.y),
                                     mma::stored<SPLIT>(v.z), mma::stored<SPLIT>(v.w));
        const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const bool goal = lane == GeomDefault::To;
        float4 *row = reinterpret_cast<float4 *>(X + lane * S::LDX);
        row[0] = goal ? z : r;
        row[1] = goal ? r : z;
    }
    // Xᵀ as bfloat16, as XRows::store_t writes it: feature f of token t at f·ldt + t.
    __device__ __forceinline__ void store_t(__nv_bfloat16 *XT, int ldt, int lane) const {
        const bool goal = lane == GeomDefault::To;
        const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int f = 0; f < 4; ++f) {
            XT[f * ldt + lane] = __float2bfloat16_rn(goal ? 0.0f : e[f]);
            XT[(f + 4) * ldt + lane] = __float2bfloat16_rn(goal ? e[f] : 0.0f);
        }
    }
};

// The X rows a geometry's kernels stage: XRowVec for the default config's, XRows for any other.
template <class GT, int MT, int KX, bool SPLIT>
using XRowsFor =
    std::conditional_t<std::is_same_v<GT, GeomDefault>, XRowVec<SPLIT>, XRows<MT, KX, SPLIT>>;

// x / T (Tf = T as a float, converted once a kernel): an IEEE division at a runtime geometry; at
// the default config's T = 32 a product by 2⁻⁵, which is exact, so the same bits.
__device__ __forceinline__ float div_by_T(const Geom &, float Tf, float x) {
    return __fdiv_rn(x, Tf);
}
__device__ __forceinline__ float div_by_T(const GeomDefault &, float, float x) {
    static_assert((GeomDefault::T & (GeomDefault::T - 1)) == 0, "T a power of two");
    return __fmul_rn(x, 1.0f / GeomDefault::T);
}

// W_aug[c][f] = Wc[c][f] (f < td), Wgc[c][f − td] (td ≤ f < td + G), else 0.
template <class GT>
__device__ __forceinline__ float w_aug(const GT &g, const float *__restrict__ comp, int c, int f) {
    if (f < g.td) return __ldg(comp + (size_t)c * g.td + f);
    f -= g.td;
    return f < g.G ? __ldg(comp + g.c_wg + (size_t)c * g.G + f) : 0.0f;
}

// The B fragments of the head's W_augᵀ (the same for every transition: held in registers).
template <int KX, bool SPLIT>
struct WFrag {
    mma::Op b[3][2][KX][2];
    template <class GT>
    __device__ __forceinline__ void load(const GT &g, int h, const float *__restrict__ comp,
                                         int gi, int tq) {
#pragma unroll
        for (int p = 0; p < 3; ++p)
#pragma unroll
            for (int nu = 0; nu < 2; ++nu) {
                const int j = 8 * nu + gi;
                const bool ok = j < g.dh;
                const int c = p * g.d + h * g.dh + j;
#pragma unroll
                for (int ka = 0; ka < KX; ++ka) {
                    b[p][nu][ka][0] = mma::op<SPLIT>(ok ? w_aug(g, comp, c, 8 * ka + tq) : 0.0f);
                    b[p][nu][ka][1] = mma::op<SPLIT>(ok ? w_aug(g, comp, c, 8 * ka + tq + 4) : 0.0f);
                }
            }
    }
};

// q and k of head h as the projection's accumulator fragments: f[p][μ][ν] holds rows 16μ + g
// (+ 8), channels 8ν + 2t (+ 1), stored<SPLIT>-rounded. In mma_tf32.cuh's permuted contraction
// order they are the A fragments of q and the B fragments of k for S = q kᵀ, so the scores need
// no shared-memory trip (attention lane 0.412 → 0.364 ms single-stream at B = 16384 against q
// and k read back from shared memory, bench/results/h200-2026-12-04-attn-qk-registers-*.json).
template <int MT>
struct QKFrag {
    float f[2][MT][2][4];
};

// β of rows t0 and t1 from the quad's partial sums b0, b1 (the backward's projection).
__device__ __forceinline__ void store_beta(float b0, float b1, float *beta, int t0, int t1,
                                           int tq) {
    b0 += __shfl_xor_sync(0xffffffffu, b0, 1);
    b0 += __shfl_xor_sync(0xffffffffu, b0, 2);
    b1 += __shfl_xor_sync(0xffffffffu, b1, 1);
    b1 += __shfl_xor_sync(0xffffffffu, b1, 2);
    if (tq == 0) {
        beta[t0] = b0;
        beta[t1] = b1;
    }
}

// q, k, v of head h for all tokens (rows ≥ T and columns ≥ dh are zero): q and k into qk's
// registers, and in the backward (BETA) also into shared memory for its transposed products;
// v into shared memory in the forward, while the backward needs only β_t = γ · v_t, summed
// straight from v's fragments (a quad holds one row's 16 channels) into beta[t].
// Plain TF32: q is stored times log2(e)/√dh, so that the softmax is exp2 of the scores as read.
template <int MT, int KX, bool SPLIT, bool BETA, class GT>
__device__ __forceinline__ void project_qkv(const GT &g, int h, const float *ccb,
                                            const WFrag<KX, SPLIT> &w, float *sm,
                                            const float *gv, float *beta, QKFrag<MT> &qk,
                                            int gi, int tq) {
    using S = TcShape<MT, KX>;
    const float *X = sm + S::X;
    const int ld = S::ldcb(g.heads);
    const float qscale = SPLIT ? 1.0f : g.scale * kLog2e;
#pragma unroll
    for (int mu = 0; mu < MT; ++mu) {
        const int t0 = 16 * mu + gi, t1 = t0 + 8;
        mma::Op a[KX][4];
#pragma unroll
        for (int ka = 0; ka < KX; ++ka) {
            a[ka][0] = mma::loaded<SPLIT>(X[t0 * S::LDX + 8 * ka + tq]);
            a[ka][1] = mma::loaded<SPLIT>(X[t1 * S::LDX + 8 * ka + tq]);
            a[ka][2] = mma::loaded<SPLIT>(X[t0 * S::LDX + 8 * ka + tq + 4]);
            a[ka][3] = mma::loaded<SPLIT>(X[t1 * S::LDX + 8 * ka + tq + 4]);
        }
        float b0 = 0.0f, b1 = 0.0f;  // β partials of rows t0, t1 (BETA)
#pragma unroll
        for (int p = 0; p < 3; ++p) {
            float *dst = sm + (BETA ? S::Q + p * S::TP * kLDQ : S::V);
#pragma unroll
            for (int nu = 0; nu < 2; ++nu) {
                const int jc = 8 * nu + 2 * tq, col = h * 3 * kDHP + p * kDHP + jc;
                const float2 c0 = *reinterpret_cast<const float2 *>(ccb + t0 * ld + col);
                const float2 c1 = *reinterpret_cast<const float2 *>(ccb + t1 * ld + col);
                float acc[4] = {c0.x, c0.y, c1.x, c1.y};
#pragma unroll
                for (int ka = 0; ka < KX; ++ka) mma::mma<SPLIT>(acc, a[ka], w.b[p][nu][ka]);
                if (p == 0 && !SPLIT)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[e] *= qscale;
                if (p < 2)
#pragma unroll
                    for (int e = 0; e < 4; ++e) qk.f[p][mu][nu][e] = mma::stored<SPLIT>(acc[e]);
                if (BETA && p == 2) {
                    b0 = fmaf(gv[jc], acc[0], fmaf(gv[jc + 1], acc[1], b0));
                    b1 = fmaf(gv[jc], acc[2], fmaf(gv[jc + 1], acc[3], b1));
                } else if (BETA || p == 2) {
                    *reinterpret_cast<float2 *>(dst + t0 * kLDQ + jc) =
                        make_float2(mma::stored<SPLIT>(acc[0]), mma::stored<SPLIT>(acc[1]));
                    *reinterpret_cast<float2 *>(dst + t1 * kLDQ + jc) =
                        make_float2(mma::stored<SPLIT>(acc[2]), mma::stored<SPLIT>(acc[3]));
                }
            }
        }
        if (BETA) store_beta(b0, b1, beta, t0, t1, tq);
    }
}

// 2^x (the softmax of plain TF32 products works in base 2; its inputs are ≤ 0).
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The scores q kᵀ as accumulator fragments s[μ][ν] (rows t = 16μ + g and + 8, key columns
// 8ν + 2t' and + 1), on TF32 (or split) products.
template <int MT, bool SPLIT>
__device__ __forceinline__ void scores(const QKFrag<MT> &qk, float (&s)[MT][2 * MT][4]) {
#pragma unroll
    for (int mu = 0; mu < MT; ++mu) {
        mma::Op a[2][4];
#pragma unroll
        for (int ka = 0; ka < 2; ++ka)
            mma::a_from_acc_by(a[ka], qk.f[0][mu][ka],
                               [](float x) { return mma::loaded<SPLIT>(x); });
#pragma unroll
        for (int nu = 0; nu < 2 * MT; ++nu) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mu][nu][e] = 0.0f;
#pragma unroll
            for (int ka = 0; ka < 2; ++ka) {
                // keys 8ν + g: rows g (+ 8 for odd ν) of k's tile ν / 2
                const float *kf = qk.f[1][nu >> 1][ka];
                const mma::Op b[2] = {mma::loaded<SPLIT>(kf[(nu & 1) * 2]),
                                      mma::loaded<SPLIT>(kf[(nu & 1) * 2 + 1])};
                mma::mma<SPLIT>(s[mu][nu], a[ka], b);
            }
        }
    }
}

// The statistics of the row softmax over the thread's rows 16μ + g (r = 0) and + 8 (r = 1): each
// row's maximum and the reciprocal of its sum of exponentials (0 for rows ≥ T).
template <int MT>
struct RowStats {
    float mx[MT][2], inv[MT][2];
};

// The scores in s turned into A = softmax over the T keys of (q kᵀ)/√dh in place; rows ≥ T are
// zero. Then c[ν] = the column sums of A at this thread's two key columns of tile ν (a butterfly
// over the fragments' rows). EXACT: scores as the split products give them (scaled here, expf);
// else as the plain ones do, already times log2(e)/√dh (exp2). FULL: T is a multiple of 16 (no
// padded keys or queries to mask). st: the rows' statistics, as softmax_stored reads them.
template <int MT, bool EXACT, bool FULL, class GT>
__device__ __forceinline__ void softmax_colsums(const GT &g, int gi, int tq,
                                                float (&s)[MT][2 * MT][4],
                                                float (&c)[2 * MT][2], RowStats<MT> &st) {
    constexpr int NT = 2 * MT;
    // Row softmax: a row is spread over the 4 threads of a quad (2 columns per tile each).
#pragma unroll
    for (int mu = 0; mu < MT; ++mu)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int t = 16 * mu + gi + 8 * r;
            float mx = -INFINITY;
#pragma unroll
            for (int nu = 0; nu < NT; ++nu)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = 8 * nu + 2 * tq + e;
                    float &v = s[mu][nu][2 * r + e];
                    if (EXACT) v = __fmul_rn(v, g.scale);
                    if (!FULL && col >= g.T) v = -INFINITY;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float sum = 0.0f;
#pragma unroll
            for (int nu = 0; nu < NT; ++nu)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float &v = s[mu][nu][2 * r + e];
                    // exp(−inf) = 0 for the padded keys
                    v = EXACT ? expf(__fadd_rn(v, -mx)) : exp2_approx(v - mx);
                    sum += v;
                }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = (FULL || t < g.T) ? __frcp_rn(sum) : 0.0f;
            st.mx[mu][r] = mx;
            st.inv[mu][r] = inv;
#pragma unroll
            for (int nu = 0; nu < NT; ++nu)
#pragma unroll
                for (int e = 0; e < 2; ++e) s[mu][nu][2 * r + e] *= inv;
        }
#pragma unroll
    for (int nu = 0; nu < NT; ++nu)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float a0 = 0.0f;
#pragma unroll
            for (int mu = 0; mu < MT; ++mu) a0 += s[mu][nu][e] + s[mu][nu][2 + e];
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) a0 += __shfl_xor_sync(0xffffffffu, a0, o);
            c[nu][e] = a0;
        }
}

// The scores (scores_of(s): TF32 or bfloat16 products), A and its column sums
// (softmax_colsums). The scores are computed in each branch, as the compiler allocated them best
// (out of it, the runtime-geometry split instances spilled more).
template <int MT, bool EXACT, class GT, class F>
__device__ __forceinline__ void softmax_of(const GT &g, int gi, int tq, float (&s)[MT][2 * MT][4],
                                           float (&c)[2 * MT][2], RowStats<MT> &st,
                                           F &&scores_of) {
    if (g.T == 16 * MT) {
        scores_of(s);
        softmax_colsums<MT, EXACT, true>(g, gi, tq, s, c, st);
    } else {
        scores_of(s);
        softmax_colsums<MT, EXACT, false>(g, gi, tq, s, c, st);
    }
}

// The scores on TF32 (or split) products, A and its column sums from q and k's fragments.
template <int MT, int KX, bool SPLIT, class GT>
__device__ __forceinline__ void softmax_rows(const GT &g, const QKFrag<MT> &qk, int gi, int tq,
                                             float (&s)[MT][2 * MT][4], float (&c)[2 * MT][2],
                                             RowStats<MT> &st) {
    softmax_of<MT, SPLIT>(g, gi, tq, s, c, st,
                          [&](float (&sc)[MT][2 * MT][4]) { scores<MT, SPLIT>(qk, sc); });
}

// The backward's A from the forward's row statistics and its own scores (plain TF32 or bfloat16
// products, the forward's bits): exp2(s − max) · inv, the operations softmax_colsums applies,
// without its reductions (the maximum's and the sum's butterflies, the reciprocal).
template <int MT, class GT>
__device__ __forceinline__ void softmax_stored(const GT &g, int tq, const RowStats<MT> &st,
                                               float (&s)[MT][2 * MT][4]) {
#pragma unroll
    for (int mu = 0; mu < MT; ++mu)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int nu = 0; nu < 2 * MT; ++nu)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float &v = s[mu][nu][2 * r + e];
                    const float x = 8 * nu + 2 * tq + e < g.T ? v : -INFINITY;
                    v = exp2_approx(x - st.mx[mu][r]) * st.inv[mu][r];
                }
}

// Where the forward leaves, and the backward finds, a (transition, head)'s softmax statistics
// (plain TF32 and bfloat16 products): 3·TP floats, each row's maximum and reciprocal sum as a
// pair, then the column sums c.
__host__ __device__ constexpr int stats_floats(int MT) { return 3 * 16 * MT; }
template <int MT>
__device__ __forceinline__ size_t stats_offset(int i, int heads, int h) {
    return ((size_t)i * heads + h) * stats_floats(MT);
}

}  // namespace fh::cuda::attn::tc
