// SPEC §5.4 on the GPU, as src/cpu/td.cpp: the regime-weighted Huber TD loss on the branch
// heads (ρ of the previous step; the clamp passes gradient strictly inside ±q_clip), the
// backward of each branch on its own lane (dU, de, dg, SiLU' with dc, dV), and the trunk
// backward: dh2 = Σ_b dpre_b V_b fused with SiLU' and db2, dW2, dh1, db1, dW1,
// d_states = dpre1 W1eff, and the spectral-norm correction of §5.2. Where ddqn packs the
// branches (dh2_one_product, memory_plan.hpp) the branches write their dpre side by side,
// [B, NB·HB], and the trunk forms dh2 in one product over K = NB·HB against ddqn's packed V_cat;
// otherwise each branch writes dh2_b = dpre_b V_b and the trunk sums them in branch order. The
// one product replaced NB GEMMs writing [B, H] each and a SiLU' pass reading all of them:
// forward child 0.433 → 0.401 ms multi-stream and 0.631 → 0.582 single-stream at B = 16384,
// 48 MiB less memory (bench/results/h200-2026-12-02-dh2-one-product-before-after.json).
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "linear_silu.hpp"
#include "memory_plan.hpp"
#include "reduce.cuh"

namespace fh::cuda {

namespace {

__global__ void k_td_loss(const float *q, const float *z, const float *y, const int32_t *action,
                          const int32_t *regime, const float *rho, int B, int NB, int A,
                          float rows, float kappa, float q_clip, float *delta, float *dz,
                          double *loss_elt, double *q_elt) {
    // 1/(W·B·NB): the mean is over the rows of every rank (SPEC §9; rows = B when W = 1).
    const float scale = __fdiv_rn(1.0f, __fmul_rn(rows, (float)NB));
    const size_t n = (size_t)B * NB;
    for (size_t ib = blockIdx.x * (size_t)blockDim.x + threadIdx.x; ib < n;
         ib += (size_t)gridDim.x * blockDim.x) {
        const size_t i = ib / NB, b = ib % NB;
        const float w = rho[regime[i]];
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

}  // namespace

void td_loss(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, NB = (int)d.NB;
    k_td_loss<<<grid_for((size_t)B * NB), kThreads, 0, l.stream>>>(
        st.on.q, st.on.z, st.y, st.action, st.regime, st.buf[BUF_REGIME] + d.R, B, NB, (int)d.A,
        (float)d.Bg, st.cfg.huber_kappa, st.cfg.q_clip, st.delta, st.dz, st.td_elt, st.q_elt);
    FH_LAUNCHED("k_td_loss");
}

void td_metrics(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const size_t n = (size_t)d.B * d.NB;
    sum_to(st.td_elt, n, &st.dm->td_loss, (double)d.Bg * d.NB, l.red, l.stream);
    sum_to(st.q_elt, n, &st.dm->q_mean, (double)d.Bg * d.NB, l.red, l.stream);
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
    gemm_tn(l.blas, A, HB, B, dz, gb, g + o.U[b], 0.0f, "dU = dz^T g");
    colsum(dz, B, A, nullptr, g + o.e[b], l.col, l.stream);
    GemmDesc dg = desc_nn(B, HB, A, dz, p + o.U[b], dpre);
    dg.ldc = ld;
    gemm(l.blas, dg, 0.0f, "dg = dz U");
    PtrList in{};
    in.p[0] = dpre;
    in.n = 1;
    dsilu_colsum(in, preg, p + o.c[b], B, HB, kColsumRows, dpre, l.col, l.stream, 1, 0, ld);
    colsum_final(l.col, B, HB, g + o.c[b], l.stream);
    GemmDesc dv = desc_tn(HB, H, B, dpre, st.on.h2, g + o.V[b]);
    dv.ldb = ld;
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
    // On the fused kernel (linear_dsilu; TF32 on Hopper, with ddqn's pack, whose W2ᵀ and V_catᵀ
    // copies it reads): dh2 and dpre2, then dh1 and dpre1, each one kernel instead of a GEMM and
    // dsilu_colsum, the bias gradients' column sums from its per-tile partials (in dh2's buffer,
    // which nothing else uses then). dpre2 and dpre1 are stored rounded to TF32: their other
    // readers are TF32 GEMMs. Forward child 0.473 → 0.460 ms, wall 1.646 → 1.636 ms
    // multi-stream at B = 16384 (three side-by-side runs,
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
    bool dpre2_tf32 = false;
    if (fused)
        dpre2_tf32 = linear_dsilu(l.blas, l.stream, B, H, (int)(d.NB * d.HB), st.dpreg, false,
                                  st.pack_next + pk.VcatT, st.on.pre2, w.p + o.b2, st.dpre2, part);
    PtrList in{};
    if (dpre2_tf32) {
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
    if (!dpre2_tf32) {
        dsilu_colsum(in, st.on.pre2, w.p + o.b2, B, H, kColsumRows, st.dpre2, l.col, l.stream);
        colsum_final(l.col, B, H, g + o.b2, l.stream);
    }
    gemm_tn(l.blas, H, H, B, st.dpre2, st.on.h1, g + o.W2, 0.0f, "dW2sn = dpre2^T h1");
    if (fused && linear_dsilu(l.blas, l.stream, B, H, H, st.dpre2, dpre2_tf32,
                              st.pack_next + pk.W2T, st.on.pre1, w.p + o.b1, st.dpre1, part)) {
        bias_grad(g + o.b1);
    } else {
        gemm_nn(l.blas, B, H, H, st.dpre2, w.W2, st.dpre1, 0.0f, "dh1 = dpre2 W2sn");
        in.p[0] = st.dpre1;
        in.n = 1;
        dsilu_colsum(in, st.on.pre1, w.p + o.b1, B, H, kColsumRows, st.dpre1, l.col, l.stream);
        colsum_final(l.col, B, H, g + o.b1, l.stream);
    }
    gemm_tn(l.blas, H, D, B, st.dpre1, st.x2, g + o.W1, 0.0f, "dW1sn = dpre1^T x");
    gemm_nn(l.blas, B, D, H, st.dpre1, w.W1, st.buf[BUF_D_STATES], 0.0f,
            "d_states = dpre1 W1sn");
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
