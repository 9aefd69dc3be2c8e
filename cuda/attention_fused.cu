// A trial (FOXHUNT_TRIAL_ATTN_FUSED=1): the attention learner's forward, reward head and backward
// in one kernel, a transition at a time, at the default config's geometry with TF32 products.
//
// Why. Today the forward (k_attn_tc_fwd), the head (attention_head.cu) and the backward
// (k_attn_tc_bwd) are three passes over the batch, joined by dā = dpool Wo: the backward
// recomputes X, the projections and the scores (28 of its 100 tile products a (transition,
// head)) and reads 24 MiB of softmax statistics, only because the head needs a transition's four
// heads together. The loss is per row (SPEC §5.5: L = mean (r̂ − r̃)²), so a block whose four warps
// are a transition's four heads can run the head between its forward and its backward, with A,
// q, k and v still in registers and shared memory.
//
// The head, factored (attention.cu's header, step 2: pool = ē + bo + ā Woᵀ with ē + bo = M aug,
// M [d, na] = [Wt / T | Wg / T | ebar / T + bo]):
//   h = pool Wr1ᵀ = C1 ā + C2 aug        C1 = Wr1 Wo [hh, d], C2 = Wr1 M [hh, na]
//   r̂ = Σ_m SiLU(h_m + br1_m) w_r2_m + b_r2,  dr = 2 (r̂ − r̃) / rows,
//   dh = (dr w_r2) ⊙ SiLU'(h + br1)
//   dā = dpool Wo = dh Wr1 Wo = dh C1
// two products of a row instead of four, in float32 on the CUDA cores (each a 64 × 64 product,
// 128 threads: thread (m, half) sums half of row m, the halves added in a fixed order). The
// weight gradients need only G = dhᵀ [ā | aug] over the batch (one GEMM, [hh, d + na]):
//   dWr1 = G_aug Mᵀ + G_ā Woᵀ,  dWo = Wr1ᵀ G_ā,  R = Wr1ᵀ G_aug  (k_fused_head_grads, float64)
// in place of [dh | dpool]ᵀ [pool | ā | aug]; pool and dpool are never formed.
//
// Tiling. A block is one slot of the backward's (attention_tc.cu): 4 warps, warp h head h, 168
// registers, the backward's shared memory per warp (v kept in dS's place until β is formed) and
// 3.9 KB for the head, so three blocks an SM as the backward. Three block barriers a
// transition: after ā and aug, after h's halves, after dā's halves; between the last two every
// warp forms r̂ and dh itself (the same operations, the same bits) into a copy of its own. C1, C1ᵀ
// and C2 (32 KB), br1 and w_r2 are read through L1, coalesced (each thread's column of C1ᵀ for h
// and of C1 for dā), with plain loads: as __ldg the compiler hoisted them above the block's
// barriers and the kernel spilled 276 bytes (16 now, as the backward). Deterministic:
// fixed-order sums, float64 per-block sums of the head's gradients, no atomics.
#include <algorithm>

#include "attention_paths.hpp"
#include "attention_tc_grads.cuh"
#include "aux_common.cuh"
#include "device_math.cuh"
#include "launch.cuh"

namespace fh::cuda::attn {

namespace {

using namespace tc;

constexpr int kW = 64;               // d = hh, the head's widths
constexpr int kThreads = 128;        // a warp per head
constexpr int kPartW = 2 * kW + 2;   // dbr1 | dw_r2 | db_r2 | Σ loss terms
constexpr int kNa = GeomDefault::na; // aug's columns
// hc: C1 [hh, d] | C1ᵀ [d, hh] | C2 [hh, na] | G [hh, ldG]
constexpr int kC1 = 0, kC1T = kW * kW, kC2 = 2 * kW * kW, kG = kC2 + kW * kNa;
static_assert(kG % 4 == 0, "G 16-byte aligned for cuBLAS");
// The head's shared memory after the warps' regions (floats).
// ā | aug | dh (a copy a warp) | h's halves | dā's halves | c (a row a warp) | the float64 sums
constexpr int kHAbar = 0, kHAug = kHAbar + kW, kHDh = kHAug + 16, kHRed = kHDh + 4 * kW,
              kHRed2 = kHRed + kThreads, kHC = kHRed2 + kThreads, kHAcc = kHC + 4 * 32,
              kHFloats = kHAcc + 2 * kPartW;
constexpr int kTargetSamples = 64;

// Half of a 64-term dot product: Σ_u x_u W[u][col] over this thread's 32 rows u of W (rows kW
// apart, from w = W + 32·half·kW + col), x from shared memory, two chains (plain loads: see the
// header).
__device__ __forceinline__ float half_dot(const float *x, const float *w) {
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        const float4 v = x4[u];
        const float *c = w + (size_t)(4 * u) * kW;
        p0 = fmaf(c[0], v.x, p0);
        p1 = fmaf(c[kW], v.y, p1);
        p0 = fmaf(c[2 * kW], v.z, p0);
        p1 = fmaf(c[3 * kW], v.w, p1);
    }
    return p0 + p1;
}

__global__ void __launch_bounds__(kThreads, 3)
k_attn_fused(GeomDefault g, int spb, FusedArgs a) {
    pdl_enter();
    using S = TcShape<2, 1>;
    constexpr int MT = 2, NT = S::NT;
    extern __shared__ float4 sm4[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = warp;
    const int gi = lane >> 2, tq = lane & 3;
    float *ccb = reinterpret_cast<float *>(sm4);
    float *sm = ccb + S::cc_floats(g.heads) + warp * S::BWD_FLOATS;
    float *hs = ccb + S::cc_floats(g.heads) + g.heads * S::BWD_FLOATS;
    const float *X = sm + S::X, *q = sm + S::Q, *k = sm + S::K;
    float *V = sm + S::DS, *dS = sm + S::DS, *vec = sm + S::BWD_VEC, *gv = vec + S::TP;
    float *abar_s = hs + kHAbar, *aug_s = hs + kHAug, *dh_w = hs + kHDh + kW * warp,
          *red = hs + kHRed, *red2 = hs + kHRed2, *cs = hs + kHC + 32 * warp;
    double *hacc = reinterpret_cast<double *>(hs + kHAcc);  // dbr1 | dw_r2 | db_r2 | loss
    stage_cc<MT, 1>(g, a.comp, ccb);
    WFrag<1, false> w;
    w.load(g, h, a.comp, gi, tq);
    const int m = threadIdx.x & (kW - 1), half = threadIdx.x >> 6;
    const float br2 = __ldg(a.br2);
    const float *C1 = a.hc + kC1, *C1T = a.hc + kC1T, *C2 = a.hc + kC2;
    __syncthreads();
    const float Tf = (float)g.T;

    float sacc[3][NT][4], macc[3][1][4];
#pragma unroll
    for (int p = 0; p < 3; ++p) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[p][n][e] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e) macc[p][0][e] = 0.0f;
    }
    // The head's sums, each zeroed and updated by one thread of warp 0 (lane: m = lane and
    // lane + 32; lane 0 also dr and the loss).
    if (warp == 0) {
        hacc[lane] = hacc[lane + 32] = hacc[kW + lane] = hacc[kW + lane + 32] = 0.0;
        if (lane == 0) hacc[2 * kW] = hacc[2 * kW + 1] = 0.0;
    }

    const int i0 = blockIdx.x * spb, i1 = min(g.B, i0 + spb);
    XRowVec<false> xr;
    if (i0 < i1) xr.fetch(g, a.x + (size_t)i0 * g.D, lane);
    for (int i = i0; i < i1; ++i) {
        const float ri = __ldg(a.r + i);
        xr.store(sm + S::X, lane);
        // aug = [Σ_{t<To} tok_t | g | 1] from the unrounded row: lane t holds token t (lane To
        // the goal), a butterfly over the lanes.
        if (warp == 0) {
            const bool tok = lane < GeomDefault::To;
            float e[4] = {xr.v.x, xr.v.y, xr.v.z, xr.v.w}, t4[4];
#pragma unroll
            for (int f = 0; f < 4; ++f) {
                t4[f] = warp_sum(tok ? e[f] : 0.0f);
                e[f] = __shfl_sync(0xffffffffu, e[f], GeomDefault::To);
            }
            float v = 1.0f;
#pragma unroll
            for (int f = 0; f < 4; ++f) {
                if (lane == f) v = t4[f];
                if (lane == 4 + f) v = e[f];
            }
            if (lane < kNa) {
                aug_s[lane] = v;
                a.aug[(size_t)i * a.ld + lane] = v;
            }
        }
        if (i + 1 < i1) xr.fetch(g, a.x + (size_t)(i + 1) * g.D, lane);
        __syncwarp();
        // The forward: q, k into the backward's places, v into dS's; A and its column sums c.
        QKFrag<MT> qk;
        project_qkv<MT, 1, false, false, true>(g, h, ccb, w, sm, nullptr, nullptr, qk, gi, tq);
        float s[MT][NT][4];
        {
            float c[NT][2];
            RowStats<MT> unused;
            softmax_rows<MT, 1, false>(g, qk, gi, tq, s, c, unused);
            // c to shared memory, for ā and for dvᵀ after the head (held in registers across the
            // head, it made the kernel spill)
            if (gi == 0)
#pragma unroll
                for (int nu = 0; nu < NT; ++nu)
                    *reinterpret_cast<float2 *>(cs + 8 * nu + 2 * tq) =
                        make_float2(c[nu][0], c[nu][1]);
        }
        __syncwarp();
        // ā_h[j] = Σ_s c_s v_s[j] / T, as k_attn_tc_fwd forms it.
        {
            const int j = lane & 15, s0 = (lane >> 4) * (S::TP / 2);
            float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
            for (int u = 0; u < S::TP / 2; u += 2) {
                a0 = fmaf(cs[s0 + u], V[(s0 + u) * kLDQ + j], a0);
                a1 = fmaf(cs[s0 + u + 1], V[(s0 + u + 1) * kLDQ + j], a1);
            }
            float av = a0 + a1;
            av += __shfl_xor_sync(0xffffffffu, av, 16);
            if (lane < g.dh) {
                av = div_by_T(g, Tf, av);
                abar_s[h * g.dh + lane] = av;
                a.abar[(size_t)i * a.ld + h * g.dh + lane] = av;
            }
        }
        __syncthreads();
        // h's halves: thread (m, half) sums C1[m][j] ā_j over its half of j (half 0 also C2 aug).
        {
            float p = half_dot(abar_s + 32 * half, C1T + (size_t)(32 * half) * kW + m);
            if (half == 0)
#pragma unroll
                for (int f = 0; f < kNa; ++f) p = fmaf(C2[m * kNa + f], aug_s[f], p);
            red[threadIdx.x] = p;
        }
        __syncthreads();
        // Every warp: h + br1, SiLU and the reward at m = lane and lane + 32, r̂ by a warp sum
        // (the same operations in each warp, so the same bits), dr and dh into its own copy of dh:
        // no block barrier between h and dā.
        float pre[2], sg[2], sl[2], wr2l[2], rp = 0.0f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int mm = lane + 32 * u;
            wr2l[u] = a.wr2[mm];
            pre[u] = __fadd_rn(__fadd_rn(red[mm], red[kW + mm]), a.br1[mm]);
            sg[u] = dev_sigmoid(pre[u]);
            sl[u] = __fmul_rn(pre[u], sg[u]);
            rp = __fadd_rn(rp, __fmul_rn(sl[u], wr2l[u]));
        }
        const float rhat = __fadd_rn(warp_sum(rp), br2);
        const float e = __fadd_rn(rhat, -ri);
        const float dr = __fdiv_rn(__fmul_rn(2.0f, e), a.rows);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int mm = lane + 32 * u;
            const float dh = __fmul_rn(__fmul_rn(dr, wr2l[u]), dev_dsilu_s(pre[u], sg[u]));
            dh_w[mm] = dh;
            if (warp == 0) {
                a.dh[(size_t)i * a.ld_dh + mm] = dh;
                hacc[mm] += (double)dh;
                hacc[kW + mm] += (double)dr * (double)sl[u];
            }
        }
        if (threadIdx.x == 0) {
            hacc[2 * kW] += (double)dr;
            hacc[2 * kW + 1] += (double)__fmul_rn(e, e);
        }
        __syncwarp();
        // dā's halves: thread (j = m, half) sums dh_m' C1[m'][j] over its half of m'.
        red2[threadIdx.x] = half_dot(dh_w + 32 * half, C1 + (size_t)(32 * half) * kW + m);
        __syncthreads();
        // γ = dā_h / T, then β_t = γ · v_t (lane t: row t of v).
        if (lane < kDHP) {
            const int j = h * g.dh + lane;
            gv[lane] = div_by_T(g, Tf, __fadd_rn(red2[j], red2[kW + j]));
        }
        __syncwarp();
        {
            const float *vr = V + lane * kLDQ;
            float b0 = 0.0f, b1 = 0.0f;
#pragma unroll
            for (int j = 0; j < kDHP; j += 2) {
                b0 = fmaf(gv[j], vr[j], b0);
                b1 = fmaf(gv[j + 1], vr[j + 1], b1);
            }
            vec[lane] = b0 + b1;
        }
        const float gam_lo = gv[gi], gam_hi = gv[gi + 8];
        float c[NT][2];
#pragma unroll
        for (int nu = 0; nu < NT; ++nu) {
            const float2 cv = *reinterpret_cast<const float2 *>(cs + 8 * nu + 2 * tq);
            c[nu][0] = cv.x;
            c[nu][1] = cv.y;
        }
        __syncwarp();
        accumulate_grads<MT, 1, false, false>(g, s, c, vec, gam_lo, gam_hi, sm, X, q, k, dS, sacc,
                                              macc, gi, tq);
        __syncwarp();
    }
    store_partial_row<MT, 1>(g, a.partial + (size_t)blockIdx.x * g.pw, h, sacc, macc, gi, tq);
    // Each of warp 0's threads wrote only its own sums: no barrier before their stores.
    double *ph = a.part_head + (size_t)blockIdx.x * kPartW;
    if (warp == 0) {
#pragma unroll
        for (int u = 0; u < 4; ++u) ph[lane + 32 * u] = hacc[lane + 32 * u];
        if (lane == 0) {
            ph[2 * kW] = hacc[2 * kW];
            ph[2 * kW + 1] = hacc[2 * kW + 1];
        }
    }
}

// M[a][k] of the header (float64): pool's affine part in aug.
__device__ __forceinline__ double pool_affine(const Geom &g, const float *Wt, const float *Wg,
                                              const float *bo, const float *comp, int a, int k) {
    const double T = (double)g.T;
    if (k < g.td) return (double)Wt[a * g.td + k] / T;
    if (k < g.td + g.G) return (double)Wg[a * g.G + k - g.td] / T;
    return (double)comp[g.c_eb + a] / T + (double)bo[a];
}

// C1 = Wr1 Wo, its transpose, and C2 = Wr1 M (float64 sums), a thread per output.
__global__ void k_fused_head_comp(Geom g, const float *__restrict__ Wo,
                                  const float *__restrict__ Wr1, const float *__restrict__ Wt,
                                  const float *__restrict__ Wg, const float *__restrict__ bo,
                                  const float *__restrict__ comp, float *__restrict__ hc) {
    pdl_enter();
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < kW * kW) {
        const int m = o / kW, j = o % kW;
        double s = 0.0;
        for (int x = 0; x < kW; ++x) s += (double)Wr1[m * kW + x] * (double)Wo[x * kW + j];
        hc[kC1 + m * kW + j] = (float)s;
        hc[kC1T + j * kW + m] = (float)s;
    } else if (o < kW * kW + kW * g.na) {
        const int m = (o - kW * kW) / g.na, f = (o - kW * kW) % g.na;
        double s = 0.0;
        for (int x = 0; x < kW; ++x)
            s += (double)Wr1[m * kW + x] * pool_affine(g, Wt, Wg, bo, comp, x, f);
        hc[kC2 + m * g.na + f] = (float)s;
    }
}

// dWr1 [hh, d], dWo [d, d] and R [d, na] from G = dhᵀ [ā | aug] (float64 sums), into the blocks
// of attention.cu's weight-gradient product where k_attn_fin reads them.
__global__ void k_fused_head_grads(Geom g, const float *__restrict__ G, int ldG,
                                   const float *__restrict__ Wo, const float *__restrict__ Wr1,
                                   const float *__restrict__ Wt, const float *__restrict__ Wg,
                                   const float *__restrict__ bo, const float *__restrict__ comp,
                                   float *__restrict__ prod, int ldP) {
    pdl_enter();
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < kW * kW) {  // dWr1[m][x] = Σ_f G_aug[m][f] M[x][f] + Σ_j G_ā[m][j] Wo[x][j]
        const int m = o / kW, x = o % kW;
        double s = 0.0;
        for (int f = 0; f < g.na; ++f)
            s += (double)G[m * ldG + kW + f] * pool_affine(g, Wt, Wg, bo, comp, x, f);
        for (int j = 0; j < kW; ++j) s += (double)G[m * ldG + j] * (double)Wo[x * kW + j];
        prod[(size_t)m * ldP + x] = (float)s;
    } else if (o < 2 * kW * kW + kW * g.na) {  // dWo[x][j] | R[x][f] = Σ_m Wr1[m][x] G[m][·]
        const int r = o - kW * kW, x = r / (kW + g.na), col = r % (kW + g.na);
        double s = 0.0;
        for (int m = 0; m < kW; ++m) s += (double)Wr1[m * kW + x] * (double)G[m * ldG + col];
        prod[(size_t)(kW + x) * ldP + kW + col] = (float)s;
    }
}

int blocks_for(int outputs) { return (outputs + 255) / 256; }

}  // namespace

bool fused_fits(const Geom &g, Products prod) {
    return prod == Products::TF32 && GeomDefault::matches(g) && g.hh == kW;
}

size_t fused_hc_floats(const Geom &g) { return (size_t)kG + (size_t)kW * fused_ldG(g); }

int fused_ldG(const Geom &g) { return (g.d + g.na + 3) / 4 * 4; }

void fused_plan(const Geom &g, int *blocks, int *spb, size_t *smem) {
    *smem = (TcShape<2, 1>::cc_floats(g.heads) + (size_t)g.heads * TcShape<2, 1>::BWD_FLOATS +
             kHFloats) * sizeof(float);
    aux::allow_smem((const void *)k_attn_fused, *smem, "attention fused (tensor cores)");
    *spb = wave_samples_per_block((const void *)k_attn_fused, kThreads, *smem, g.B,
                                  kTargetSamples);
    *blocks = (g.B + *spb - 1) / *spb;
}

void fused_composites(const Geom &g, const float *Wo, const float *Wr1, const float *Wt,
                      const float *Wg, const float *bo, const float *comp, float *hc,
                      cudaStream_t s) {
    FH_LAUNCH(k_fused_head_comp, blocks_for(kW * kW + kW * g.na), 256, 0, s, g, Wo, Wr1, Wt, Wg,
              bo, comp, hc);
}

void fused_step(const Geom &g, int blocks, int spb, size_t smem, const FusedArgs &a,
                cudaStream_t s) {
    aux::require_aligned16(a.x, "attention: x~");
    FH_LAUNCH(k_attn_fused, blocks, kThreads, smem, s, GeomDefault{g.B}, spb, a);
}

void fused_head_grads(const Geom &g, const float *hc, const float *Wo, const float *Wr1,
                      const float *Wt, const float *Wg, const float *bo, const float *comp,
                      float *prod, int ldP, cudaStream_t s) {
    FH_LAUNCH(k_fused_head_grads, blocks_for(2 * kW * kW + kW * g.na), 256, 0, s, g, hc + kG,
              fused_ldG(g), Wo, Wr1, Wt, Wg, bo, comp, prod, ldP);
}

}  // namespace fh::cuda::attn
