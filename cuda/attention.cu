// SPEC §5.5 step 4 on the GPU: the attention reward model of SPEC §4 (the CPU reference is
// src/cpu/attention.cpp), L = mean_i (r̂(x̃_i) − r̃_i)² (over the Dims::Bg rows of every rank,
// SPEC §9), full backward; Adam (lr_aux) apart, after the gradient's sum across ranks.
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
//    (a block of the weight-gradient GEMM below); then (k_attn_fin, float64):
//      dW[c, a] = Σ_k M1[c,k] Wt[a,k] + Σ_k M2[c,k] Wg[a,k] + Σ_t S[t,c] e0_t[a]
//      db[c] = Σ_t S[t, c]
//      dP[t, a] = Σ_c W[c,a] S[t,c] + R[a, last] / T
//      dWt[a, k] = Σ_c W[c,a] M1[c,k] + R[a, k] / T,   dWg[a, k] = Σ_c W[c,a] M2[c,k] + R[a, td+k] / T
//      dbo = R[:, last],  dbt = Σ_{t<To} dP[t],  dbg = dP[To]
//    (e_t's gradient is de_t = Wᵀ dqkv_t + dpool / T, the second term from the residual.)
//
// One step:
//   k_attn_comp                   Wc, Wgc, cc, ebar (attention_factors.cu)
//   path.forward                  ā per (transition, head) (attention_paths.hpp; tensor cores at
//                                 the default sizes); per transition ē + bo into pool (not
//                                 where the head is factored), [stok | g | 1] into aug
//   pool += ā Woᵀ          nt M=B N=d  K=d  (beta 1)
//   h = pool Wr1ᵀ          nt M=B N=hh K=d
//   k_attn_head (warp per row; k_attn_head_reg up to hh = 128): r̂, loss, dr,
//                 dh = (dr w_r2) ⊙ SiLU'; partials of br1, w_r2, b_r2
//   dpool = dh Wr1         nn M=B N=d  K=hh
//     (these four are one tensor-core kernel in TF32 and BF16 at d = hh = 64:
//     attention_head.cu)
//   prod = [dh | dpool]ᵀ [pool | ā | aug | 0]  tn M=hh+d N=2d+td+G+1 (rounded up to 4) K=B:
//                 dWr1 = dhᵀ pool, dWo = dpoolᵀ ā and R = dpoolᵀ aug are three of its blocks
//                 (the forward and the head write those operands as columns of two matrices;
//                 one GEMM over the batch in place of three, each with its split-K reduction)
//   dā = dpool Wo          nn M=B N=d  K=d
//   In TF32 and BF16 at d = hh = 64 with td + G + 1 ≤ 32 (the default config), the head is
//   factored instead (attention_head_factored.cu): pool = M aug + ā Woᵀ, so h = C1 ā + C2 aug
//   and dā = dh C1 with C1 = Wr1 Wo, C2 = Wr1 M (k_head_fac_comp, float64, after k_attn_comp);
//   one tensor-core kernel forms h, the head, dh and dā (no pool, dpool or dā GEMM);
//   G = dhᵀ [ā | aug | 0] (tn M=hh N=ld_rhs, d+na rounded up to 4, K=B) gives
//   dWr1 = G_aug Mᵀ + G_ā Woᵀ, dWo = Wr1ᵀ G_ā and R = Wr1ᵀ G_aug (k_head_fac_grads, float64,
//   into prod's blocks).
//   path.backward                 recomputes q, k, v and A (as FlashAttention does); per-token
//                                 dq, dk, dv summed into partial rows of S, M1, M2 (no atomics)
//   reduce the partial rows; k_attn_fin, k_attn_fin2 (attention_factors.cu; dWr1 and dWo
//                                 copied out of prod).  (enqueue_adam: Adam.)
// The softmax, sums and products are float32 (the CPU uses float64 inside the softmax); the
// factoring changes the rounding, not the function. Every config the CPU accepts runs here.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "attention_head.hpp"
#include "attention_paths.hpp"
#include "aux_common.cuh"
#include "learners.hpp"
#include "launch.cuh"
#include "memory_plan.hpp"

namespace fh::cuda {

using attn::Geom;
using attn::Kernels;

namespace {

constexpr int kHeadRowsPerWarp = 8;

struct AttnHeadArgs {
    float *h;                    // [B, hh], rows ld apart; in: pool Wr1ᵀ (no bias), out: dL/d(pre)
    int ld;
    const float *br1, *wr2, *br2;
    const float *r;
    int B, hh;
    float rows;                  // W·B, the rows of the mean (SPEC §9)
    double *partial;             // [blocks, 2·hh + 2]: dbr1 | dw_r2 | db_r2 | Σ loss terms
    int rows_per_blk;
};

__global__ void k_attn_head(AttnHeadArgs a) {
    pdl_enter();
    extern __shared__ double acc_all[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int hh = a.hh, W = 2 * hh + 2;
    double *acc = acc_all + (size_t)warp * W;
    for (int c = lane; c < W; c += 32) acc[c] = 0.0;
    __syncwarp();
    const float br2 = *a.br2;
    const int r0 = blockIdx.x * a.rows_per_blk, r1 = min(a.B, r0 + a.rows_per_blk);
    for (int i = r0 + warp; i < r1; i += nw) {
        float *h = a.h + (size_t)i * a.ld;
        float s = 0.0f;
        for (int j = lane; j < hh; j += 32)
            s = fmaf(dev_silu(__fadd_rn(h[j], a.br1[j])), a.wr2[j], s);
        s = warp_sum(s);
        const float rhat = __fadd_rn(s, br2);
        const float e = __fadd_rn(rhat, -a.r[i]);
        const float dr = __fdiv_rn(__fmul_rn(2.0f, e), a.rows);
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

// k_attn_head for hh ≤ 128, the lane's K columns (j = lane + 32k < hh ≤ 32K) in registers: br1,
// w_r2, the column sums, and the next row's h loaded while this row is computed (k_attn_head's
// per-row read-modify-write of its shared-memory sums was a dependent chain). The same float
// operations and the same order of every float64 sum as k_attn_head: the same bits.
template <int K>
__global__ void k_attn_head_reg(AttnHeadArgs a) {
    pdl_enter();
    extern __shared__ double acc_all[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int hh = a.hh;
    float br1[K], wr2[K];
    aux::load_lane_cols(a.br1, hh, br1);
    aux::load_lane_cols(a.wr2, hh, wr2);
    double sb[K], sw[K], sdr = 0.0, sloss = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k) sb[k] = sw[k] = 0.0;
    const float br2 = *a.br2;
    const int r0 = blockIdx.x * a.rows_per_blk, r1 = min(a.B, r0 + a.rows_per_blk);
    // Row i's reward and h (zeros past the block's rows).
    auto fetch = [&](int i, float &r, float (&h)[K]) {
        const bool ok = i < r1;
        r = ok ? a.r[i] : 0.0f;
        aux::load_lane_cols(ok ? a.h + (size_t)i * a.ld : nullptr, hh, h);
    };
    int i = r0 + warp;
    float ri, hv[K];
    fetch(i, ri, hv);
    for (; i < r1; i += nw) {
        float rn, hn[K];
        fetch(i + nw, rn, hn);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k)
            if (lane + 32 * k < hh) s = fmaf(dev_silu(__fadd_rn(hv[k], br1[k])), wr2[k], s);
        s = warp_sum(s);
        const float rhat = __fadd_rn(s, br2);
        const float e = __fadd_rn(rhat, -ri);
        const float dr = __fdiv_rn(__fmul_rn(2.0f, e), a.rows);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int j = lane + 32 * k;
            if (j >= hh) continue;
            const float pre = __fadd_rn(hv[k], br1[k]);
            const float sg = dev_sigmoid(pre);
            const float v = __fmul_rn(__fmul_rn(dr, wr2[k]), dev_dsilu_s(pre, sg));
            a.h[(size_t)i * a.ld + j] = v;
            sb[k] += (double)v;
            sw[k] += (double)dr * (double)__fmul_rn(pre, sg);
        }
        sdr += (double)dr;
        sloss += (double)__fmul_rn(e, e);
#pragma unroll
        for (int k = 0; k < K; ++k) hv[k] = hn[k];
        ri = rn;
    }
    aux::flush_lane_cols(acc_all, hh, sb, sw, sdr, sloss,
                         a.partial + (size_t)blockIdx.x * (2 * hh + 2));
}

}  // namespace

struct AttentionLearner::Impl {
    Dims d;
    AttnOffsets o;
    float *params, *mom1, *mom2;
    AdamHyper hyp;

    Geom g{};
    std::unique_ptr<attn::Path> path;
    aux::RowPlan head;
    // The output projection and reward head on attention_head.cu's kernel (TF32 and BF16,
    // widths 64),
    // else two GEMMs, k_attn_head and the dpool GEMM: attention lane 0.423 → 0.407 ms
    // single-stream at B = 16384, wall 0.469 → 0.446 ms multi-stream at B = 1024
    // (bench/results/h200-2026-12-03-attn-head-before-after*.json).
    bool head_tc = false;
    bool head_bf16 = false;  // FH_MATH_BF16: the fused head rounds to and stores bfloat16 values
    int head_tc_blocks = 0;
    // The head factored (attention_head_factored.cu) where the fused head runs and aug has at
    // most kHeadFactoredMaxNa columns: C1 | C2 | G in one allocation (fh_memory_plan's
    // attention_head_factored_floats), G [hh, ld_rhs] as wide as rhs's rows. Against the
    // unfactored head, side by side on an H100: TF32 wall 1.379 → 1.364 ms multi-stream, BF16
    // 1.307 → 1.285, 1.612 → 1.620 single-stream
    // (bench/results/h100-2026-12-07-head-factored-before-after.json).
    bool head_fac = false;
    float *fac_C1 = nullptr, *fac_C2 = nullptr, *fac_G = nullptr;

    aux::Arena arena;
    // The weight gradients' GEMM prod = lhsᵀ rhs over the batch: lhs = [dh | dpool] [B, LL],
    // rhs = [pool | ā | aug | 0] [B, LR] (the forward's and the head's outputs, written in
    // place as their columns), so that dWr1 = dhᵀ pool, dWo = dpoolᵀ ā and R = dpoolᵀ aug are
    // blocks of one product (prod [LL, LR]; its other blocks are not needed). The factored head
    // writes the same blocks of prod, and has neither pool nor dpool: rhs = [ā | aug | 0],
    // lhs = [dh]. Their rows are ld_rhs and ld_lhs floats apart (fh_memory_plan's
    // attention_batch_cols).
    int LL = 0, LR = 0, ld_rhs = 0, ld_lhs = 0;
    float *comp, *rhs, *lhs, *prod, *dabar, *tot, *grad, *part;
    float *abar, *aug, *hbuf;                 // views: columns of rhs and lhs
    float *pool = nullptr, *dpool = nullptr;  // the same, unfactored only
    double *part_head;
    cudaEvent_t ev[4] = {};  // time_phases(): forward begin/end, backward begin/end

    ~Impl() {
        for (cudaEvent_t e : ev)
            if (e) cudaEventDestroy(e);
    }
    void mark(int k, cudaStream_t s) {
        if (ev[0]) FH_CUDA(cudaEventRecord(ev[k], s));
    }

    static Kernels requested(Kernels k) {
        if (k != Kernels::AUTO) return k;
        const char *e = getenv("FOXHUNT_ATTN_KERNELS");
        if (!e || !*e || !strcmp(e, "auto")) return Kernels::AUTO;
        for (Kernels c : {Kernels::TC, Kernels::TC_SPLIT, Kernels::GENERAL})
            if (!strcmp(e, attn::kernels_name(c))) return c;
        fail(FH_ERR_BAD_VALUE, "FOXHUNT_ATTN_KERNELS='%s': expected auto, tc, tc-split or general",
             e);
    }

    static Geom geometry(const Dims &d) {
        Geom g{};
        g.B = (int)d.B; g.D = (int)d.D; g.O = (int)d.O; g.G = (int)d.G; g.td = (int)d.td;
        g.To = (int)d.To; g.T = (int)d.T; g.d = (int)d.d; g.d3 = 3 * (int)d.d;
        g.heads = (int)d.heads; g.dh = (int)d.dh; g.hh = (int)d.hh;
        g.na = g.td + g.G + 1;
        g.scale = (float)(1.0 / std::sqrt((double)d.dh));
        g.c_wg = g.d3 * g.td;
        g.c_cc = g.c_wg + g.d3 * g.G;
        g.c_eb = g.c_cc + g.T * g.d3;
        g.c_total = g.c_eb + g.d;
        g.pw = g.T * g.d3 + g.d3 * g.td + g.d3 * g.G;
        return g;
    }

    // The tensor-core path's products for a math mode: split TF32 in strict FP32, bfloat16 in
    // BF16, else TF32.
    static attn::Products products(fh_math_mode m) {
        if (m == FH_MATH_STRICT) return attn::Products::SPLIT;
        if (m == FH_MATH_BF16) return attn::Products::BF16;
        return attn::Products::TF32;
    }

    static std::unique_ptr<attn::Path> choose(const Geom &g, Kernels want, fh_math_mode m) {
        std::unique_ptr<attn::Path> path;
        switch (want) {
        case Kernels::AUTO:
            path = attn::make_tc_path(g, products(m));
            if (!path) path = attn::make_general_path(g);
            return path;
        case Kernels::TC:
            path = attn::make_tc_path(g, m == FH_MATH_BF16 ? products(m) : attn::Products::TF32);
            break;
        case Kernels::TC_SPLIT: path = attn::make_tc_path(g, attn::Products::SPLIT); break;
        case Kernels::GENERAL: path = attn::make_general_path(g); break;
        }
        if (!path)
            fail(FH_ERR_BAD_DIMENSION,
                 "the attention kernels '%s' do not support this config (%d tokens, d_head %d, "
                 "attn_token_dim %d, goal_dim %d, %d heads)",
                 attn::kernels_name(want), g.T, g.dh, g.td, g.G, g.heads);
        return path;
    }

    Impl(const Dims &dd, const fh_config &c, const Layout &L, float *p, float *m, float *v,
         Kernels kernels)
        : d(dd), o(L.attn), params(p), mom1(m), mom2(v) {
        hyp = AdamHyper{c.lr_aux, c.adam_beta1, c.adam_beta2, c.adam_eps};
        if (o.Wk != o.Wq + (size_t)d.d * d.d || o.Wv != o.Wk + (size_t)d.d * d.d ||
            o.bk != o.bq + d.d || o.bv != o.bk + d.d)
            fail(FH_ERR_INTERNAL, "attention: Wq|Wk|Wv and bq|bk|bv are not contiguous in the layout");
        g = geometry(d);
        path = choose(g, requested(kernels), (fh_math_mode)c.math_mode);
        head = aux::plan_rows(d.B, 2 * (int)d.hh + 2, kHeadRowsPerWarp, 0, "attention head");
        head_tc = attn::head_fused_fits(c.math_mode, (int)d.d, (int)d.hh);
        head_bf16 = c.math_mode == FH_MATH_BF16;
        head_tc_blocks = head_tc ? attn::head_fused_blocks((int)d.B) : 0;
        const uint64_t fac_floats = attention_head_factored_floats(d, c);
        head_fac = fac_floats > 0;

        const size_t B = d.B;
        const size_t o_comp = arena.reserve_n<float>(g.c_total);
        LL = (int)(d.hh + d.d);
        LR = (int)attention_rhs_cols(d);
        const AttentionBatchCols cols = attention_batch_cols(d, c);
        ld_rhs = (int)cols.rhs;
        ld_lhs = (int)cols.lhs;
        const size_t o_rhs = arena.reserve_n<float>(B * ld_rhs);
        const size_t o_lhs = arena.reserve_n<float>(B * ld_lhs);
        const size_t o_dabar = arena.reserve_n<float>(B * d.d);
        const size_t o_prod = arena.reserve_n<float>((size_t)LL * LR);
        const size_t o_tot = arena.reserve_n<float>(g.pw);
        const size_t o_grad = arena.reserve_n<float>(o.total);
        const size_t o_part = arena.reserve_n<float>((size_t)path->partial_rows() * g.pw);
        // The head's partial rows: k_attn_head's grid or the fused kernel's (at most one per
        // 128-row tile), whichever is larger, on either path (src/memory_plan.cpp).
        const size_t tiles = (B + attn::kHeadFusedTileRows - 1) / attn::kHeadFusedTileRows;
        const size_t o_ph =
            arena.reserve_n<double>(std::max<size_t>(head.blocks, tiles) * (2 * d.hh + 2));
        // The plan's count (src/memory_plan.cpp) against the kernels' own fit and size.
        const size_t fac_own = head_tc && attn::head_factored_fits(g.na)
                                   ? attn::head_factored_floats(g.na, ld_rhs) : 0;
        if (fac_floats != fac_own)
            fail(FH_ERR_INTERNAL, "attention: the factored head's buffer has %llu floats, not %zu",
                 (unsigned long long)fac_floats, fac_own);
        const size_t o_hfac = arena.reserve_n<float>(fac_floats);
        const size_t o_scr = arena.reserve(path->scratch_bytes());
        arena.allocate("the attention learner");
        comp = arena.at<float>(o_comp);
        rhs = arena.at<float>(o_rhs);
        lhs = arena.at<float>(o_lhs);
        dabar = arena.at<float>(o_dabar);
        prod = arena.at<float>(o_prod);
        hbuf = lhs;
        if (head_fac) {
            abar = rhs;
            aug = rhs + d.d;
        } else {
            pool = rhs;
            abar = rhs + d.d;
            aug = rhs + 2 * d.d;
            dpool = lhs + d.hh;
        }
        tot = arena.at<float>(o_tot);
        grad = arena.at<float>(o_grad);
        part = arena.at<float>(o_part);
        part_head = arena.at<double>(o_ph);
        if (path->scratch_bytes()) path->bind_scratch(arena.at<char>(o_scr));
        if (head_fac) {
            fac_C1 = arena.at<float>(o_hfac);
            fac_C2 = fac_C1 + d.d * d.d;
            fac_G = fac_C2 + d.d * g.na;
        }
        aux::allow_smem(head_kernel(), head.smem, "attention head");
    }

    // The head's kernel: columns in registers up to hh = 128, k_attn_head beyond.
    const void *head_kernel() const {
        const void *const regs[4] = {
            (const void *)k_attn_head_reg<1>, (const void *)k_attn_head_reg<2>,
            (const void *)k_attn_head_reg<3>, (const void *)k_attn_head_reg<4>};
        return aux::pick_lane_cols((int)d.hh, regs, (const void *)k_attn_head);
    }

    void loss_grad(const Lane &lane, const StepInputs &in, float *loss) {
        cudaStream_t s = lane.stream;
        const Blas &bl = checked_blas(lane, "attention");
        const int B = (int)d.B, dm = (int)d.d, hh = (int)d.hh;
        const float *P = params;
        const float *Wg = d.G > 0 ? P + o.Wg : nullptr, *bg = d.G > 0 ? P + o.bg : nullptr;

        attn::composites(g, P + o.Wq, P + o.bq, P + o.Wt, P + o.bt, Wg, bg, P + o.P, comp, s);
        if (head_fac)
            attn::head_factored_composites(g, P + o.Wo, P + o.Wr1, P + o.Wt, Wg, P + o.bo, comp,
                                           fac_C1, fac_C2, s);
        mark(0, s);
        path->forward(attn::FwdArgs{in.x, comp, P + o.Wt, Wg, P + o.bo, abar, pool, aug, ld_rhs},
                      s);
        mark(1, s);
        int head_rows = head.blocks;
        if (head_fac) {
            attn::HeadFactoredArgs a{abar,      aug,       fac_C1, fac_C2, P + o.br1,
                                     P + o.w_r2, P + o.b_r2, in.r, B, g.na, (float)d.Bg,
                                     hbuf,      dabar,     part_head};
            a.bf16 = head_bf16;
            a.ld_in = ld_rhs;
            attn::head_factored(a, head_tc_blocks, s);
            head_rows = head_tc_blocks;
        } else if (head_tc) {
            attn::HeadFusedArgs a{abar, pool, P + o.Wo, P + o.Wr1, P + o.br1, P + o.w_r2,
                                  P + o.b_r2, in.r, B, (float)d.Bg, hbuf, dpool, part_head};
            a.bf16 = head_bf16;
            a.ld_in = LR;
            a.ld_out = LL;
            attn::head_fused(a, head_tc_blocks, s);
            head_rows = head_tc_blocks;
        } else {
            gemm(bl, strided(desc_nt(B, dm, dm, abar, P + o.Wo, pool), LR, 0, LR), 1.0f,
                 "attention pool += abar Wo^T");
            gemm(bl, strided(desc_nt(B, hh, dm, pool, P + o.Wr1, hbuf), LR, 0, LL), 0.0f,
                 "attention h = pool Wr1^T");
            AttnHeadArgs a{};
            a.h = hbuf; a.ld = LL; a.br1 = P + o.br1; a.wr2 = P + o.w_r2; a.br2 = P + o.b_r2;
            a.r = in.r; a.B = B; a.hh = hh; a.rows = (float)d.Bg; a.partial = part_head;
            a.rows_per_blk = head.rows_per_blk;
            void *args[] = {&a};
            FH_CUDA(launch_pdl(head_kernel(), head.blocks, head.warps * 32, head.smem, s, args));
        }
        {
            aux::Segs sg;
            sg.add(grad + o.br1, 0, hh);
            sg.add(grad + o.w_r2, hh, hh);
            sg.add(grad + o.b_r2, 2 * hh, 1);
            sg.add(loss, 2 * hh + 1, 1, 0, (double)d.Bg);
            aux::reduce_partials(part_head, head_rows, 2 * hh + 2, 1, sg, s);
        }
        if (!head_tc)
            gemm(bl, strided(desc_nn(B, dm, hh, hbuf, P + o.Wr1, dpool), LL, 0, LL), 0.0f,
                 "attention dpool = dh Wr1");
        // dWr1, dWo and R in one GEMM (staged to bfloat16 in FH_MATH_BF16): attention lane
        // 0.363 → 0.344 ms single-stream at B = 16384 against three GEMMs, each with its split-K
        // reduction (H200, bench/results/h200-2026-12-04-attn-wgrad-merged-*.json).
        if (head_fac) {
            gemm(bl, strided(desc_tn(hh, ld_rhs, B, hbuf, abar, fac_G), 0, ld_rhs, 0), 0.0f,
                 "attention G = dh^T [abar | aug]");
            attn::head_factored_grads(g, fac_G, ld_rhs, P + o.Wo, P + o.Wr1, P + o.Wt, Wg, P + o.bo,
                                      comp, prod, LR, s);
        } else {
            gemm_tn(bl, LL, LR, B, lhs, rhs, prod, 0.0f,
                    "attention [dh | dpool]^T [pool | abar | aug]");
            gemm(bl, strided(desc_nn(B, dm, dm, dpool, P + o.Wo, dabar), LL, 0, 0), 0.0f,
                 "attention dabar = dpool Wo");
        }

        mark(2, s);
        path->backward(attn::BwdArgs{in.x, comp, dabar, part}, s);
        mark(3, s);
        {
            aux::Segs sg;
            sg.add(tot, 0, g.pw);
            aux::reduce_partials(part, path->partial_rows(), g.pw, 1, sg, s);
        }
        attn::FinArgs f{};
        f.W = P + o.Wq; f.Wt = P + o.Wt; f.bt = P + o.bt; f.Wg = Wg; f.bg = bg; f.P = P + o.P;
        f.tot = tot;
        f.R = prod + (size_t)hh * LR + 2 * dm;
        f.dWr1 = prod;
        f.dWo = prod + (size_t)hh * LR + dm;
        f.ldG = LR; f.hh = hh;
        f.gWr1 = grad + o.Wr1; f.gWo = grad + o.Wo;
        f.gW = grad + o.Wq; f.gb = grad + o.bq; f.gP = grad + o.P; f.gWt = grad + o.Wt;
        f.gWg = d.G > 0 ? grad + o.Wg : nullptr; f.gbo = grad + o.bo;
        f.gbt = grad + o.bt; f.gbg = d.G > 0 ? grad + o.bg : nullptr;
        attn::param_grads(g, f, s);
    }
};

AttentionLearner::AttentionLearner(const Dims &d, const fh_config &c, const Layout &L,
                                   float *params, float *m, float *v, AttnKernels kernels)
    : impl_(std::make_unique<Impl>(d, c, L, params, m, v, kernels)) {}

AttentionLearner::~AttentionLearner() = default;

void AttentionLearner::path_sizes(const Dims &d, const fh_config &c, size_t *partial_rows,
                                  size_t *scratch_bytes) {
    const Geom g = Impl::geometry(d);
    const std::unique_ptr<attn::Path> path =
        Impl::choose(g, Impl::requested(Kernels::AUTO), (fh_math_mode)c.math_mode);
    *partial_rows = (size_t)path->partial_rows();
    *scratch_bytes = path->scratch_bytes();
}

void AttentionLearner::enqueue_loss_grad(const Lane &lane, const StepInputs &in, float *loss) {
    impl_->loss_grad(lane, in, loss);
}

void AttentionLearner::enqueue_adam(const Lane &lane, const uint64_t *step) {
    Impl &m = *impl_;
    aux::adam(m.params, m.mom1, m.mom2, m.grad, m.o.total, m.hyp, step, lane.stream);
}

float *AttentionLearner::grad_device() { return impl_->grad; }

size_t AttentionLearner::grad_floats() const { return impl_->o.total; }

AttnKernels AttentionLearner::kernels() const { return impl_->path->kind(); }

bool AttentionLearner::head_factored() const { return impl_->head_fac; }

void AttentionLearner::time_phases(bool on) {
    for (cudaEvent_t &e : impl_->ev) {
        if (on && !e) FH_CUDA(cudaEventCreate(&e));
        if (!on && e) {
            FH_CUDA(cudaEventDestroy(e));
            e = nullptr;
        }
    }
}

void AttentionLearner::phase_ms(float *forward, float *backward) const {
    const cudaEvent_t *ev = impl_->ev;
    if (!ev[0]) fail(FH_ERR_INTERNAL, "attention: phase_ms() without time_phases(true)");
    FH_CUDA(cudaEventSynchronize(ev[3]));
    FH_CUDA(cudaEventElapsedTime(forward, ev[0], ev[1]));
    FH_CUDA(cudaEventElapsedTime(backward, ev[2], ev[3]));
}

size_t AttentionLearner::bytes() const { return impl_->arena.bytes(); }

}  // namespace fh::cuda
