// SPEC §5.4 on the GPU, as src/cpu/td.cpp: the regime-weighted Huber TD loss on the branch
// heads (ρ of the previous step; the clamp passes gradient strictly inside ±q_clip), the
// backward of each branch on its own lane (dU, de, dpre = (dz U) ⊙ SiLU' and dc in one kernel,
// k_branch_grads; then dV), and the trunk backward: dh2 = Σ_b dpre_b V_b fused with SiLU' and
// db2, dW2, dh1, db1, dW1, d_states = dpre1 W1eff, and the spectral-norm correction of §5.2.
// Where ddqn packs the
// branches (dh2_one_product, memory_plan.hpp) the branches write their dpre side by side,
// [B, NB·HB], and the trunk forms dh2 in one product over K = NB·HB against ddqn's packed V_cat;
// otherwise each branch writes dh2_b = dpre_b V_b and the trunk sums them in branch order. The
// one product replaced NB GEMMs writing [B, H] each and a SiLU' pass reading all of them:
// forward child 0.433 → 0.401 ms multi-stream and 0.631 → 0.582 single-stream at B = 16384,
// 48 MiB less memory (bench/results/h200-2026-12-02-dh2-one-product-before-after.json).
#include "branch_grads.hpp"
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "linear_silu.hpp"
#include "memory_plan.hpp"
#include "mma_tf32.cuh"
#include "reduce.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

__global__ void k_td_loss(const float *q, const float *z, const float *y, const int32_t *action,
                          const int32_t *regime, const float *rho, int R, int B, int NB, int A,
                          float rows, float kappa, float q_clip, float *delta, float *dz,
                          double *loss_elt, double *q_elt) {
    pdl_enter();
    // 1/(W·B·NB): the mean is over the rows of every rank (SPEC §9; rows = B when W = 1).
    const float scale = __fdiv_rn(1.0f, __fmul_rn(rows, (float)NB));
    const size_t n = (size_t)B * NB;
    for (size_t ib = blockIdx.x * (size_t)blockDim.x + threadIdx.x; ib < n;
         ib += (size_t)gridDim.x * blockDim.x) {
        const size_t i = ib / NB, b = ib % NB;
        const float w = R > 1 ? rho[regime[i]] : 1.0f;  // SPEC §5.5 step 8: R = 1 ⇒ ρ ≡ 1
        const int a = action[ib];
        const size_t base = b * (size_t)B * A + i * A;
        const float qa = q[base + a];
        const float d = __fadd_rn(qa, -y[ib]);
        delta[ib] = d;
        q_elt[ib] = (double)qa;
        loss_elt[ib] = (double)w * (double)dev_huber(d, kappa);
        const float za = z[base + a];
        const bool inside = za > -q_clip && za < q_clip;
        const float g = inside ? __fmul_rn(__fmul_rn(w, scale), dev_dhuber(d, kappa)) : 0.0f;
        for (int k = 0; k < A; ++k) dz[base + k] = k == a ? g : 0.0f;
    }
}

// The branch backward below the head (branch_grads.hpp). Block: kGradRows rows, 256 threads as
// 128 columns × 2 row halves (a warp reads 32 consecutive columns of one row: whole sectors of g,
// preg and dpre). The block's rows of dz go to shared memory first (read back as broadcasts).
// A thread loads g and preg for kGradBatch of its rows at once, then takes them in row order,
// keeping its column's sums in double (and column 0's thread the half's sums of dz); the second
// half hands its sums to the first through shared memory, which adds them (first + second) and
// writes the block's partial row: dU [A·HB] | dc [HB] | de [A]. Columns past 128 take further
// rounds.
// 64 rows a block rather than 128: a branch's 256 blocks put two blocks (16 warps) on an SM
// where the branches run one after another, and each thread walks 32 rows instead of 64.
// Single-stream forward child 0.617 → 0.595 ms, multi-stream unchanged (the branches side by side
// already filled the SMs) (bench/results/h200-2026-12-02-reduce-final-before-after.json, "new"
// against "new64").
constexpr int kGradRows = 64, kGradCols = 128, kGradMaxA = 8, kGradBatch = 8;
// AC: A compiled in (8), or 0 to read it from a.
template <int AC>
__global__ void __launch_bounds__(2 * kGradCols) k_branch_grads(BranchGradArgs a) {
    pdl_enter();
    __shared__ float dz_s[kGradRows][kGradMaxA];
    __shared__ double hand[kGradCols][kGradMaxA + 1];
    __shared__ double hand_de[kGradMaxA];
    const int tc = threadIdx.x % kGradCols, half = threadIdx.x / kGradCols;
    const int A = AC ? AC : a.A, HB = a.HB, W = A * HB + HB + A;
    const int b0 = blockIdx.x * kGradRows, nb = min(kGradRows, a.B - b0);
    for (int e = threadIdx.x; e < kGradRows * kGradMaxA; e += blockDim.x) {
        const int r = e / kGradMaxA, k = e % kGradMaxA;
        dz_s[r][k] = r < nb && k < A ? a.dz[(size_t)(b0 + r) * A + k] : 0.0f;
    }
    __syncthreads();
    const int r0 = half * (kGradRows / 2), r1 = min(nb, r0 + kGradRows / 2);  // block rows
    double *out = a.part + (size_t)blockIdx.x * W;
    for (int c0 = 0; c0 < HB; c0 += kGradCols) {
        const int c = c0 + tc;
        const bool col = c < HB, de_thread = tc == 0 && c0 == 0;
        float u[kGradMaxA];
#pragma unroll
        for (int k = 0; k < kGradMaxA; ++k) u[k] = col && k < A ? a.U[(size_t)k * HB + c] : 0.0f;
        const float bias = col ? a.c[c] : 0.0f;
        double su[kGradMaxA], se[kGradMaxA], sc = 0.0;
#pragma unroll
        for (int k = 0; k < kGradMaxA; ++k) su[k] = se[k] = 0.0;
        if (col)
            for (int rb = r0; rb < r1; rb += kGradBatch) {
                float gv[kGradBatch], pv[kGradBatch];
#pragma unroll
                for (int t = 0; t < kGradBatch; ++t) {
                    const size_t at = (size_t)(b0 + rb + t) * HB + c;
                    gv[t] = rb + t < r1 ? __ldg(a.g + at) : 0.0f;
                    pv[t] = rb + t < r1 ? __ldg(a.preg + at) : 0.0f;
                }
#pragma unroll
                for (int t = 0; t < kGradBatch; ++t) {
                    if (rb + t >= r1) break;
                    const float *dzi = dz_s[rb + t];
                    float dg = 0.0f;
#pragma unroll
                    for (int k = 0; k < kGradMaxA; ++k)
                        if (k < A) dg = fmaf(dzi[k], u[k], dg);
                    const float v = __fmul_rn(dg, dev_dsilu(__fadd_rn(pv[t], bias)));
                    a.dpre[(size_t)(b0 + rb + t) * a.ld + c] =
                        a.dpre_bf16 ? mma::rounded<true>(v) : v;
                    sc += (double)v;
#pragma unroll
                    for (int k = 0; k < kGradMaxA; ++k)
                        if (k < A) su[k] = fma((double)dzi[k], (double)gv[t], su[k]);
                    if (de_thread)
#pragma unroll
                        for (int k = 0; k < kGradMaxA; ++k) se[k] += (double)dzi[k];
                }
            }
        if (half == 1) {
#pragma unroll
            for (int k = 0; k < kGradMaxA; ++k) hand[tc][k] = su[k];
            hand[tc][kGradMaxA] = sc;
            if (de_thread)
#pragma unroll
                for (int k = 0; k < kGradMaxA; ++k) hand_de[k] = se[k];
        }
        __syncthreads();
        if (half == 0 && col) {
#pragma unroll
            for (int k = 0; k < kGradMaxA; ++k)
                if (k < A) out[(size_t)k * HB + c] = su[k] + hand[tc][k];
            out[(size_t)A * HB + c] = sc + hand[tc][kGradMaxA];
            if (de_thread)
#pragma unroll
                for (int k = 0; k < kGradMaxA; ++k)
                    if (k < A) out[(size_t)A * HB + HB + k] = se[k] + hand_de[k];
        }
        __syncthreads();  // the shared sums are read before the next round writes them
    }
}

}  // namespace

void td_loss(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, NB = (int)d.NB;
    FH_LAUNCH(k_td_loss, grid_for((size_t)B * NB), kThreads, 0, l.stream, st.on.q, st.on.z, st.y,
              st.action, st.regime, st.buf[BUF_REGIME] + d.R, (int)d.R, B, NB, (int)d.A,
              (float)d.Bg, st.cfg.huber_kappa, st.cfg.q_clip, st.delta, st.dz, st.td_elt, st.q_elt);
}

void td_metrics(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const size_t n = (size_t)d.B * d.NB;
    sum_to(st.td_elt, n, &st.dm->td_loss, (double)d.Bg * d.NB, l.red, l.stream);
    sum_to(st.q_elt, n, &st.dm->q_mean, (double)d.Bg * d.NB, l.red, l.stream);
}

size_t branch_grad_partials(int B, int HB, int A) {
    return (size_t)((B + kGradRows - 1) / kGradRows) * ((size_t)A * HB + HB + A);
}

bool branch_grads(const BranchGradArgs &a, cudaStream_t s) {
    if (a.A < 1 || a.A > kGradMaxA || a.B < 1 || a.HB < 1) return false;
    const int blocks = (a.B + kGradRows - 1) / kGradRows;
    if (a.A == 8)
        FH_LAUNCH(k_branch_grads<8>, blocks, 2 * kGradCols, 0, s, a);
    else
        FH_LAUNCH(k_branch_grads<0>, blocks, 2 * kGradCols, 0, s, a);
    const int AH = a.A * a.HB;
    Segs sg;
    sg.add(a.dU, 0, AH);
    sg.add(a.dc, AH, a.HB);
    sg.add(a.de, AH + a.HB, a.A);
    reduce_partials(a.part, blocks, AH + a.HB + a.A, 1, sg, s);
    return true;
}

// SPEC §5.4 backward of branch b (CPU: td.cpp backward_branch).
void backward_branch(CudaStep &st, const LaneCtx &l, int b) {
    const Dims &d = st.d;
    const int B = (int)d.B, H = (int)d.H, HB = (int)d.HB, A = (int)d.A;
    const QOffsets &o = st.L.q;
    const float *p = st.buf[BUF_Q];
    float *g = st.grad_q;
    const float *dz = st.dz + (size_t)b * B * A;
    const float *gb = st.on.g + (size_t)b * B * HB, *preg = st.on.preg + (size_t)b * B * HB;
    const bool cat = dh2_one_product(st.d);
    const int ld = cat ? (int)d.NB * HB : HB;  // dpre's row stride
    float *dpre = cat ? st.dpreg + (size_t)b * HB : st.dpreg + (size_t)b * B * HB;
    // dU, de, dpre and dc in one pass over the branch's rows (branch_grads), its block partials
    // in the part of dh2's buffer that this branch writes later or that the trunk backward
    // writes after the join. It replaced two GEMMs (dU = dzᵀ g with split-K, dg = dz U at
    // K = A) and three column-sum passes (de, and dsilu_colsum's dc), which remain the path for
    // A > 8 or partials that do not fit: forward child 0.460 → 0.435 ms and wall 1.639 →
    // 1.615 ms multi-stream, 0.697 → 0.621 and 2.110 → 2.033 single-stream at B = 16384
    // (bench/results/h200-2026-12-02-branch-grads-before-after.json). The partials take this
    // branch's floats of dh2 (all of dh2_b, or its NB-th with the branches side by side), from
    // an 8-byte boundary.
    const size_t span = (size_t)B * H / (cat ? d.NB : 1);
    float *base = st.dh2 + (size_t)b * span;
    const size_t pad = (uintptr_t)base % sizeof(double) ? 1 : 0;
    BranchGradArgs ga{dz, gb, preg, p + o.U[b], p + o.c[b], B, HB, A, ld, dpre,
                      reinterpret_cast<double *>(base + pad), g + o.U[b], g + o.c[b], g + o.e[b]};
    ga.dpre_bf16 = l.blas.bf16_stage != nullptr;
    // In FH_MATH_BF16, dV's operands are bfloat16 values when this kernel ran (dpre rounded)
    // and the trunk's fused layer wrote h2: then no stage (gemm_bf16_values).
    bool dpre_bf16 = false;
    if (branch_grad_partials(B, HB, A) <= (span - pad) / 2 && branch_grads(ga, l.stream)) {
        dpre_bf16 = ga.dpre_bf16;
    } else {
        gemm_tn(l.blas, A, HB, B, dz, gb, g + o.U[b], 0.0f, "dU = dz^T g");
        colsum(dz, B, A, nullptr, g + o.e[b], l.col, l.stream);
        gemm(l.blas, strided(desc_nn(B, HB, A, dz, p + o.U[b], dpre), 0, 0, ld), 0.0f,
             "dg = dz U");
        PtrList in{};
        in.p[0] = dpre;
        in.n = 1;
        dsilu_colsum(in, preg, p + o.c[b], B, HB, kColsumRows, dpre, l.col, l.stream, 1, 0, ld);
        colsum_final(l.col, B, HB, g + o.c[b], l.stream);
    }
    const GemmDesc dv = strided(desc_tn(HB, H, B, dpre, st.on.h2, g + o.V[b]), ld, 0, 0);
    if (dpre_bf16 && st.on.h2_rounded)
        gemm_bf16_values(l.blas, dv, 0.0f, "dV = dpre^T h2");
    else
        gemm(l.blas, dv, 0.0f, "dV = dpre^T h2");
    if (!cat)
        gemm_nn(l.blas, B, H, HB, dpre, p + o.V[b], st.dh2 + (size_t)b * B * H, 0.0f,
                "dh2_b = dpre V");
}

// SPEC §5.4 trunk backward (CPU: td.cpp backward_trunk).
void backward_trunk(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, H = (int)d.H, D = (int)d.D;
    const QOffsets &o = st.L.q;
    float *g = st.grad_q;
    const QView w = st.online_view();
    // On the fused kernel (linear_dsilu; TF32 or BF16 on Hopper, with ddqn's pack, whose W2ᵀ and
    // V_catᵀ copies it reads): dh2 and dpre2, then dh1 and dpre1, each one kernel instead of a GEMM
    // and dsilu_colsum, the bias gradients' column sums from its per-tile partials (in dh2's
    // buffer, which nothing else uses then). dpre2 and dpre1 are stored rounded to TF32 (bfloat16
    // in FH_MATH_BF16): their other readers are GEMMs of the same math. Forward child 0.473 →
    // 0.460 ms, wall 1.646 → 1.636 ms multi-stream at B = 16384 (three side-by-side runs,
    // bench/results/h200-2026-12-02-trunk-backward-dsilu-before-after*.json; single-stream
    // 2.108 → 2.105 ms; the means of the three).
    const int tiles = (B + 127) / 128;
    // (⌈B / 128⌉ rows of H doubles fit dh2's B·H floats for every B > 1.)
    const bool fused = l.blas.linear_tc && st.pack_next && dh2_one_product(d) && 2 * tiles <= B &&
                       linear_tc_pays(B, H);
    double *part = reinterpret_cast<double *>(st.dh2);
    const auto bias_grad = [&](float *out) {
        Segs sg;
        sg.add(out, 0, H);
        reduce_partials(part, tiles, H, 1, sg, l.stream);
    };
    const PackedBranches pk = packed_branches(d);
    bool dpre2_rounded = false;
    if (fused)
        dpre2_rounded = linear_dsilu(l.blas, l.stream, B, H, (int)(d.NB * d.HB), st.dpreg, false,
                                  st.pack_next + pk.VcatT, st.on.pre2, w.p + o.b2, st.dpre2, part);
    PtrList in{};
    if (dpre2_rounded) {
        bias_grad(g + o.b2);
    } else if (dh2_one_product(st.d)) {
        // dh2 = Σ_b dpre_b V_b as one product over K = NB·HB (the branches' dpre side by side).
        const int K = (int)(d.NB * d.HB);
        gemm_nn(l.blas, B, H, K, st.dpreg, st.pack_next + pk.Vcat, st.dh2, 0.0f,
                "dh2 = dpre_cat V_cat");
        in.p[0] = st.dh2;
        in.n = 1;
    } else {
        for (uint32_t b = 0; b < d.NB; ++b) in.p[b] = st.dh2 + (size_t)b * B * H;
        in.n = (int)d.NB;
    }
    if (!dpre2_rounded) {
        dsilu_colsum(in, st.on.pre2, w.p + o.b2, B, H, kColsumRows, st.dpre2, l.col, l.stream);
        colsum_final(l.col, B, H, g + o.b2, l.stream);
    }
    // In FH_MATH_BF16, with both fused layers, dpre2 and h1 hold bfloat16 values: no stage.
    const GemmDesc dw2 = desc_tn(H, H, B, st.dpre2, st.on.h1, g + o.W2);
    if (dpre2_rounded && st.on.h1_rounded)
        gemm_bf16_values(l.blas, dw2, 0.0f, "dW2sn = dpre2^T h1");
    else
        gemm(l.blas, dw2, 0.0f, "dW2sn = dpre2^T h1");
    bool dpre1_rounded = false;
    if (fused && linear_dsilu(l.blas, l.stream, B, H, H, st.dpre2, dpre2_rounded,
                              st.pack_next + pk.W2T, st.on.pre1, w.p + o.b1, st.dpre1, part)) {
        dpre1_rounded = true;
        bias_grad(g + o.b1);
    } else {
        gemm_nn(l.blas, B, H, H, st.dpre2, w.W2, st.dpre1, 0.0f, "dh1 = dpre2 W2sn");
        in.p[0] = st.dpre1;
        in.n = 1;
        dsilu_colsum(in, st.on.pre1, w.p + o.b1, B, H, kColsumRows, st.dpre1, l.col, l.stream);
        colsum_final(l.col, B, H, g + o.b1, l.stream);
    }
    // In FH_MATH_BF16 the fused layer stored dpre1 as bfloat16 values; with HER's x̃ of bfloat16
    // values and the pack's rounded W1sn (W1t: ddqn's online pass packed the same matrix), dW1
    // and d_states multiply bfloat16 values without a stage.
    const bool bf16 = dpre1_rounded && l.blas.bf16_stage && st.x_bf16;
    const GemmDesc dw1 = desc_tn(H, D, B, st.dpre1, bf16 ? st.x_bf16 : st.x2, g + o.W1);
    if (bf16)
        gemm_bf16_values(l.blas, dw1, 0.0f, "dW1sn = dpre1^T x");
    else
        gemm(l.blas, dw1, 0.0f, "dW1sn = dpre1^T x");
    const GemmDesc dst = desc_nn(B, D, H, st.dpre1, bf16 ? st.pack_next + pk.W1t : w.W1,
                                 st.buf[BUF_D_STATES]);
    if (bf16)
        gemm_bf16_values(l.blas, dst, 0.0f, "d_states = dpre1 W1sn");
    else
        gemm(l.blas, dst, 0.0f, "d_states = dpre1 W1sn");
    const float *u = st.buf[BUF_SN_U];
    const size_t off[2] = {o.W1, o.W2};
    const int cols[2] = {D, H};
    const bool sn[2] = {d.sn1, d.sn2};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        const size_t n = (size_t)H * cols[k];
        reduce_dot(g + off[k], st.weff[k], n, l.red, l.stream);
        reduce_final(l.red, reduce_blocks(n), &st.dm->sn_ip[k], 0, 1.0, l.stream);
        sn_backward(g + off[k], &st.dm->sn_ip[k], u + (size_t)k * H, st.sn_v[k], &st.dm->sigma[k],
                    H, cols[k], l.stream);
    }
}

}  // namespace fh::cuda
