// SPEC §5.5 step 3 on the GPU: the implicit quantile network (Dabney et al. 2018), as
// src/cpu/iqn.cpp computes it:
//     ψ = SiLU(x Wψᵀ + bψ),  φ(τ)_j = SiLU(Σ_{k<C} cos(π k τ) Wφ[j,k] + bφ[j]),  m = ψ ⊙ φ,
//     Z(x, τ) = SiLU(m Wmᵀ + bm) · w_z + b_z
//     T_im = r̃_i + γ (1 − d̃_i) Z̄(x̃'_i, τ'_im)      (target net, already EMA-updated this step)
//     L = mean_i Σ_n (1/N') Σ_m |τ_in − [T_im − Z_in < 0]| huber_κ(T_im − Z_in) / κ
// then Adam (lr_aux; enqueue_adam, after the gradient's sum across ranks in a data-parallel
// step). τ_in = Philox purpose 2 at (row0 + i, n, step), τ'_im purpose 3 at (row0 + i, m, step),
// with `step` read from the device counter (the graph is captured once and replayed); the
// mean is over Dims::Bg rows and row0 is this rank's first row (SPEC §9).
// Rows of the per-quantile tensors are i·N + n (i·N' + m for the target).
//
// One step (Nr = N' for the target pass, N for the online pass; rows R = B·Nr):
//   target:  taucos → cos [R, C];  ψ̄ = x̃' W̄ψᵀ (nt M=B N=Hq K=D), + b̄ψ, SiLU;
//            φ̄raw = cos W̄φᵀ (nt M=R N=Hq K=C);  m̄ = ψ̄_i ⊙ SiLU(φ̄raw + b̄φ);
//            h̄ = m̄ W̄mᵀ (nt M=R N=Hq K=Hq);  Z̄ = SiLU(h̄ + b̄m)·w̄_z + b̄_z  (warp per row)
//   online:  the same on x̃ with τ (kept), the caches ψpre, ψ, φraw, m, hraw kept
//   head (warp per transition): Z_in, z_mean, T_im, the loss, dZ_in, dhpre = (dZ w_z) ⊙ SiLU',
//            block partials of dbm, dw_z, db_z and the loss
//   dWm = dhpreᵀ m (tn M=Hq N=Hq K=R);  dm = dhpre Wm (nn M=R N=Hq K=Hq, into hraw's buffer)
//   dφpre = (dm ⊙ ψ) ⊙ SiLU'(φpre) (in place of φraw), dψpre = (Σ_n dm ⊙ φ) ⊙ SiLU'(ψpre),
//            with the column-sum partials of dbφ and dbψ
//   dWφ = dφpreᵀ cos (tn M=Hq N=C K=R);  dWψ = dψpreᵀ x̃ (tn M=Hq N=D K=B);  (Adam apart).
// With the fused backward dWφ is a kernel of its own that forms cos from τ again
// (iqn_dwphi.cu), so the online pass stores no cosines and cos's buffer holds its partials.
// The learner's task is two (enqueue_loss: the passes through the head; enqueue_grad: dWm on),
// so that the schedule may run other work on the lane between them.
// The target pass runs first in the same scratch buffers; only Z̄ [B, N'] survives it. In TF32
// and BF16 modes at iqn_hidden = 128, iqn_cos = 64 the target pass after ψ̄ is one fused tensor-core
// kernel instead (iqn_target.cu), which writes Z̄ alone, and when also 16 % N == 0 the online
// pass after ψ with the head is one more (iqn_online.cu), which writes tau, cos (not with dWφ's
// kernel), m, dhpre, z_mean and the head's partials (the same buffers
// as the unfused head), and dm with the ψ/φ backward is a third (iqn_backward.cu: dm stays in
// registers, and φraw is recomputed from τ rather than stored by the online pass and read back),
// and hraw's buffer is not allocated.
// In BF16 mode the three multiply bfloat16 operands on the tensor cores
// (mma_bf16.cuh; iqn_fused.cuh's SmemB16 overloads), and the online pass and the backward
// write dWm's and dWφ's operands as bfloat16 (Impl's bf16_operands: buffers of their bfloat16
// size), which dWm's GEMM and dWφ's kernel read as they are. The unfused passes' kernels are in
// iqn_unfused.cu; this file orders the passes and owns the learner's buffers.
#include <algorithm>
#include <memory>

#include "aux_common.cuh"
#include "iqn_fused.hpp"
#include "iqn_paths.hpp"
#include "iqn_unfused.hpp"
#include "learners.hpp"
#include "linear_silu.hpp"
#include "mma_tf32.cuh"
#include "nn.cuh"
#include "philox.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// Wψ of the online net (a) and of the target net (b), [Hq, D] each, rounded as linear_silu's
// fused kernel reads its weights (linear_silu.hpp's Wt: TF32, or bfloat16 with BF16) into
// out [2, Hq, D].
template <bool BF16>
__global__ void k_round_wpsi(const float *__restrict__ a, const float *__restrict__ b,
                             float *__restrict__ out, size_t n) {
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < 2 * n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = mma::rounded<BF16>(i < n ? a[i] : b[i - n]);
}

}  // namespace

struct IqnLearner::Impl {
    Dims d;
    IqnOffsets o;
    float *params, *target, *mom1, *mom2;
    uint64_t seed;
    float gamma, kappa;
    AdamHyper hyp;

    aux::Arena arena;
    float *cosb, *phi, *mbuf, *hraw, *dh, *psi_pre, *psi, *dpsi, *tau, *zt, *grad;
    // The ψ layers' weights rounded for linear_silu's fused kernel (k_round_wpsi): [2, Hq, D],
    // the online net's then the target's; with the fused target pass only (else null).
    float *wpsi_t = nullptr;
    double *part_head, *part_bwd;
    aux::RowPlan head;
    int bwd_chunks;
    // The passes fused on tensor cores (iqn_target.cu, iqn_online.cu, iqn_backward.cu) in TF32
    // and BF16 modes at the widths they are written for (strict FP32 and other widths run the
    // unfused passes). FOXHUNT_IQN_KERNELS picks how many of them those modes use, for tests
    // and side-by-side timing: unfused (none), target, online (the target and online passes), fused
    // or auto (all three).
    bool fused_target = false, fused_online = false, fused_backward = false;
    int target_blocks = 0, online_blocks = 0;
    // FH_MATH_BF16 with the fused online pass and backward: they write the weight gradients'
    // operands (m, dhpre, dφpre) as bfloat16; dWm multiplies them as they are (gemm_tn_bf16)
    // instead of float32 copies that gemm() stages in blocks, and dWφ is the dWφ kernel's
    // bfloat16 instance. dh is allocated at half its float32 size for dh16, m16 and dphi16 fill
    // the two halves of mbuf, and φ's float32 buffer is not allocated (src/iqn_paths.hpp).
    bool bf16_operands = false;
    bool bf16_target = false;  // FH_MATH_BF16: the fused target pass on bfloat16 products
    bool wg_target = false, wg_online = false;  // h on warpgroup products (below)
    // With the fused backward, dWφ is iqn_dwphi.cu's kernel, which forms the cosines from τ
    // (in BF16 its bfloat16 instance, on dφpre's bfloat16 copy): the online pass writes none,
    // and cos's buffer (cos_floats) holds the kernel's partials.
    size_t cos_floats = 0;
    Impl(const Dims &dd, const fh_config &c, const Layout &L, float *p, float *t, float *m,
         float *v)
        : d(dd), o(L.iqn), params(p), target(t), mom1(m), mom2(v) {
        seed = c.seed;
        gamma = c.gamma;
        kappa = c.huber_kappa;
        hyp = AdamHyper{c.lr_aux, c.adam_beta1, c.adam_beta2, c.adam_eps};
        const size_t Nmax = std::max(d.N, d.Nt);
        const size_t Rmax = (size_t)d.B * Nmax;
        if (Rmax > (size_t)INT32_MAX)
            fail(FH_ERR_BAD_DIMENSION, "config: batch_size * max(iqn_n, iqn_n_target) = %zu is "
                 "too large for the CUDA IQN learner", Rmax);
        const int W = 2 * (int)d.Hq + 2;
        head = iqn::head_plan((int)d.B, (int)d.N, (int)d.Nt, (int)d.Hq);
        // BF16 mode runs the fused kernels too, on bfloat16 products: faster than the unfused
        // passes' BF16 GEMMs (and than the same kernels on TF32 products: IQN lane 0.428 →
        // 0.376 ms single-stream at B = 16384, bench/results/
        // h200-2026-12-04-iqn-bf16-products-before-after.json).
        const IqnPaths paths = iqn_paths(d, c);
        fused_target = paths.target;
        fused_online = paths.online;
        fused_backward = paths.backward;
        if (fused_target) target_blocks = iqn::fused_blocks((size_t)d.B * d.Nt);
        if (fused_online) online_blocks = iqn::fused_blocks((size_t)d.B * d.N);
        // Partial rows for the unfused kernels' grids or the fused ones' (at most one per tile).
        const int tiles = (int)(((size_t)d.B * d.N + iqn::kFusedRowsPerTile - 1) / iqn::kFusedRowsPerTile);
        const int head_rows = std::max(head.blocks, tiles);
        bwd_chunks = iqn::psiphi_chunks((int)d.B);

        bf16_operands = paths.bf16_operands;
        const size_t Hq = d.Hq, half = bf16_operands ? 2 : 1;  // bfloat16: half the floats
        cos_floats = fused_backward ? iqn_dwphi_partial_floats((size_t)d.B * d.N) : Rmax * d.C;
        const size_t o_cos = arena.reserve_n<float>(cos_floats);
        // φraw (unfused passes) or dφpre (the fused backward in TF32); BF16's dφpre shares mbuf.
        const size_t o_phi = arena.reserve_n<float>(bf16_operands ? 0 : Rmax * Hq);
        const size_t o_m = arena.reserve_n<float>(Rmax * Hq);
        // hraw only for the unfused passes: with all three fused nothing writes it.
        const size_t o_h = arena.reserve_n<float>(fused_backward ? 0 : Rmax * Hq);
        const size_t o_dh = arena.reserve_n<float>((size_t)d.B * d.N * Hq / half);
        const size_t o_pp = arena.reserve_n<float>((size_t)d.B * Hq);
        const size_t o_ps = arena.reserve_n<float>((size_t)d.B * Hq);
        const size_t o_dp = arena.reserve_n<float>((size_t)d.B * Hq);
        const size_t o_tau = arena.reserve_n<float>((size_t)d.B * d.N);
        const size_t o_zt = arena.reserve_n<float>((size_t)d.B * d.Nt);
        const size_t o_g = arena.reserve_n<float>(o.total);
        const size_t o_ph = arena.reserve_n<double>((size_t)head_rows * W);
        const size_t o_pb = arena.reserve_n<double>((size_t)std::max(bwd_chunks, tiles) * 2 * Hq);
        const size_t o_wt = arena.reserve_n<float>(fused_target ? 2 * Hq * d.D : 0);
        arena.allocate("the IQN learner");
        cosb = arena.at<float>(o_cos);
        phi = bf16_operands ? nullptr : arena.at<float>(o_phi);
        mbuf = arena.at<float>(o_m);
        hraw = fused_backward ? nullptr : arena.at<float>(o_h);
        dh = arena.at<float>(o_dh);
        psi_pre = arena.at<float>(o_pp);
        psi = arena.at<float>(o_ps);
        dpsi = arena.at<float>(o_dp);
        tau = arena.at<float>(o_tau);
        zt = arena.at<float>(o_zt);
        grad = arena.at<float>(o_g);
        part_head = arena.at<double>(o_ph);
        part_bwd = arena.at<double>(o_pb);
        if (fused_target) wpsi_t = arena.at<float>(o_wt);
        // In TF32 mode on sm_90a code, h = m Wmᵀ of the fused target and online passes runs on
        // Hopper's warpgroup tensor cores (iqn_fused.cuh's SmemWg), elsewhere on mma.sync: IQN
        // lane 0.506 / 0.507 → 0.499 / 0.497 ms single-stream, multi-stream within the spread
        // (bench/results/h100-2026-12-05-iqn-wgmma-before-after*.json, on an H100).
        const bool tf32 = c.math_mode == FH_MATH_TF32;
        wg_target = fused_target && iqn::target_fused_prepare() && tf32;
        wg_online = fused_online && iqn::online_fused_prepare() && tf32;
        if (fused_backward) {
            iqn::backward_fused_prepare();
            iqn::dwphi_prepare();
        }
        bf16_target = c.math_mode == FH_MATH_BF16;
    }
    __nv_bfloat16 *dh16() const { return reinterpret_cast<__nv_bfloat16 *>(dh); }
    __nv_bfloat16 *m16() const { return reinterpret_cast<__nv_bfloat16 *>(mbuf); }
    __nv_bfloat16 *dphi16() const { return m16() + (size_t)d.B * d.N * d.Hq; }

    // Forward of net P on input x with Nr quantile fractions of `purpose`: ψpre, ψ, cos, φraw,
    // m and hraw (= m Wmᵀ, no bias) in the scratch buffers.
    void forward(const Blas &bl, cudaStream_t s, const float *P, const float *x, int Nr,
                 uint32_t purpose, const uint64_t *step, float *tau_out) {
        const int B = (int)d.B, Hq = (int)d.Hq, C = (int)d.C, D = (int)d.D;
        const size_t R = (size_t)d.B * Nr;
        iqn::taucos(seed, step, purpose, d.row0, R, Nr, C, cosb, tau_out, s);
        gemm_nt(bl, B, Hq, D, x, P + o.Wpsi, psi_pre, 0.0f, "IQN psi = x Wpsi^T");
        bias_silu(psi_pre, psi, P + o.bpsi, d.B, Hq, s);
        gemm_nt(bl, (int)R, Hq, C, cosb, P + o.Wphi, phi, 0.0f, "IQN phi = cos Wphi^T");
        iqn::merge(phi, P + o.bphi, psi, mbuf, R, Nr, Hq, s);
        gemm_nt(bl, (int)R, Hq, Hq, mbuf, P + o.Wm, hraw, 0.0f, "IQN h = m Wm^T");
    }

    // The target and online passes, the head and the loss: z_mean, loss, dhpre (dh), the
    // head's gradient sums, and τ, ψ, ψpre, m (and the unfused passes' φraw, cos, hraw) for
    // grad_pass.
    void loss_pass(const Lane &lane, const StepInputs &in, float *z_mean, float *loss) {
        cudaStream_t s = lane.stream;
        const Blas &bl = checked_blas(lane, "IQN");
        const int B = (int)d.B, N = (int)d.N, Nt = (int)d.Nt, Hq = (int)d.Hq, D = (int)d.D;
        const size_t RT = (size_t)d.B * d.Nt;

        // ψ̄ and ψ as SiLU layers on linear_silu's fused kernel where it runs and pays (TF32 or
        // BF16 on Hopper): their weights rounded first, both nets in one pass; else (and where
        // the kernel refuses) cuBLAS + bias_silu. Only the online ψ keeps its pre-activation
        // (for the backward).
        const bool psi_tc = wpsi_t && bl.linear_tc && linear_tc_pays(B, Hq) && D % 32 == 0;
        if (psi_tc) {
            const size_t n = (size_t)Hq * D;
            const unsigned blocks = (unsigned)std::min<size_t>((2 * n + 255) / 256, 1024);
            if (bl.linear_bf16)
                FH_LAUNCH(k_round_wpsi<true>, blocks, 256, 0, s, params + o.Wpsi,
                          target + o.Wpsi, wpsi_t, n);
            else
                FH_LAUNCH(k_round_wpsi<false>, blocks, 256, 0, s, params + o.Wpsi,
                          target + o.Wpsi, wpsi_t, n);
        }
        const float *wt_online = psi_tc ? wpsi_t : nullptr;
        const float *wt_target = psi_tc ? wpsi_t + (size_t)Hq * D : nullptr;

        // Target Z̄ on x̃' (target net, τ' purpose 3).
        if (fused_target) {
            linear_silu(bl, s, B, Hq, D, in.xn, false, target + o.Wpsi, wt_target,
                        target + o.bpsi, psi, psi, "IQN target psi");
            iqn::TargetArgs t{psi, target + o.Wphi, target + o.bphi, target + o.Wm,
                              target + o.bm, target + o.w_z, target + o.b_z, seed, in.step,
                              B, Nt, d.row0, zt, bf16_target, wg_target};
            iqn::target_fused(t, target_blocks, s);
        } else {
            forward(bl, s, target, in.xn, Nt, PURPOSE_IQN_TARGET, in.step, nullptr);
            iqn::zrows(hraw, target + o.bm, target + o.w_z, target + o.b_z, RT, Hq, zt, s);
        }

        // Online forward on x̃ (τ purpose 2), kept for the backward, and the head: Z, z_mean, the
        // loss, dZ, dhpre and the head's gradient partials.
        int head_blocks = head.blocks;
        if (fused_online) {
            linear_silu(bl, s, B, Hq, D, in.x, false, params + o.Wpsi, wt_online, params + o.bpsi,
                        psi_pre, psi, "IQN psi = x Wpsi^T");
            iqn::OnlineArgs f{};
            f.psi = psi;
            f.Wphi = params + o.Wphi; f.bphi = params + o.bphi; f.Wm = params + o.Wm;
            f.bm = params + o.bm; f.wz = params + o.w_z; f.bz = params + o.b_z;
            f.zt = zt; f.r = in.r; f.done = in.done;
            f.gamma = gamma; f.kappa = kappa;
            f.scale = 1.0 / ((double)d.Bg * d.Nt);
            f.seed = seed; f.step = in.step;
            f.B = B; f.N = N; f.Nt = Nt; f.row0 = d.row0;
            // φraw only for the unfused backward: the fused one recomputes it from τ.
            f.tau = tau; f.cos = fused_backward ? nullptr : cosb;
            f.phi = fused_backward ? nullptr : phi;
            f.m = mbuf;
            f.dh = dh;
            f.z_mean = z_mean; f.partial = part_head;
            f.wg = wg_online;
            if (bf16_operands) {
                f.m16 = m16();
                f.dh16 = dh16();
            }
            iqn::online_fused(f, online_blocks, s);
            head_blocks = online_blocks;
        } else {
            forward(bl, s, params, in.x, N, PURPOSE_IQN_ONLINE, in.step, tau);
            iqn::HeadArgs a{};
            a.hraw = hraw;
            a.bm = params + o.bm; a.wz = params + o.w_z; a.bz = params + o.b_z;
            a.zt = zt; a.tau = tau; a.r = in.r; a.done = in.done;
            a.gamma = gamma; a.kappa = kappa;
            a.B = B; a.N = N; a.Nt = Nt; a.Hq = Hq;
            a.scale = 1.0 / ((double)d.Bg * d.Nt);
            a.z_mean = z_mean; a.dh = dh; a.partial = part_head;
            a.samples_per_blk = head.rows_per_blk;
            iqn::head(a, head, s);
        }
        {
            aux::Segs g;
            g.add(grad + o.bm, 0, Hq);
            g.add(grad + o.w_z, Hq, Hq);
            g.add(grad + o.b_z, 2 * Hq, 1);
            g.add(loss, 2 * Hq + 1, 1, 0, (double)d.Bg * d.Nt);
            aux::reduce_partials(part_head, head_blocks, 2 * Hq + 2, 1, g, s);
        }
    }

    // The rest of the gradient from what loss_pass() left: the merge layer, then ψ and φ.
    void grad_pass(const Lane &lane, const StepInputs &in) {
        cudaStream_t s = lane.stream;
        const Blas &bl = checked_blas(lane, "IQN");
        const int B = (int)d.B, N = (int)d.N, Hq = (int)d.Hq, C = (int)d.C, D = (int)d.D;
        const size_t RN = (size_t)d.B * d.N;
        if (bf16_operands)
            gemm_tn_bf16(bl, Hq, Hq, (int)RN, dh16(), m16(), grad + o.Wm, 0.0f,
                         "IQN dWm = dh^T m");
        else
            gemm_tn(bl, Hq, Hq, (int)RN, dh, mbuf, grad + o.Wm, 0.0f, "IQN dWm = dh^T m");
        int bwd_rows = bwd_chunks;
        if (fused_backward) {
            iqn::BackwardArgs f{dh, params + o.Wm, params + o.bphi, params + o.Wphi, tau, psi,
                                psi_pre, params + o.bpsi, phi, dpsi, B, N, part_bwd};
            if (bf16_operands) {
                f.dh16 = dh16();
                f.dphi16 = dphi16();
            }
            bwd_rows = iqn::backward_fused(f, online_blocks, s);
        } else {
            gemm_nn(bl, (int)RN, Hq, Hq, dh, params + o.Wm, hraw, 0.0f, "IQN dm = dh Wm");
            iqn::psiphi_bwd(hraw, phi, params + o.bphi, psi, psi_pre, params + o.bpsi, dpsi, B,
                            N, Hq, part_bwd, s);
        }
        {
            aux::Segs g;
            g.add(grad + o.bphi, 0, Hq);
            g.add(grad + o.bpsi, Hq, Hq);
            aux::reduce_partials(part_bwd, bwd_rows, 2 * Hq, 1, g, s);
        }
        if (fused_backward && bf16_operands)
            iqn::dwphi(dphi16(), tau, RN, cosb, cos_floats, grad + o.Wphi, s);
        else if (fused_backward)
            iqn::dwphi(phi, tau, RN, cosb, cos_floats, grad + o.Wphi, s);
        else
            gemm_tn(bl, Hq, C, (int)RN, phi, cosb, grad + o.Wphi, 0.0f,
                    "IQN dWphi = dphi^T cos");
        // In FH_MATH_BF16 the fused backward stored dψpre as bfloat16 values: with HER's x̃ of
        // bfloat16 values, no stage.
        if (bf16_operands && in.x_bf16)
            gemm_bf16_values(bl, desc_tn(Hq, D, B, dpsi, in.x_bf16, grad + o.Wpsi), 0.0f,
                             "IQN dWpsi = dpsi^T x");
        else
            gemm_tn(bl, Hq, D, B, dpsi, in.x, grad + o.Wpsi, 0.0f, "IQN dWpsi = dpsi^T x");
    }
};

IqnLearner::IqnLearner(const Dims &d, const fh_config &c, const Layout &L, float *params,
                       float *target, float *m, float *v)
    : impl_(std::make_unique<Impl>(d, c, L, params, target, m, v)) {}

IqnLearner::~IqnLearner() = default;

void IqnLearner::enqueue_loss(const Lane &lane, const StepInputs &in, float *z_mean,
                              float *loss) {
    impl_->loss_pass(lane, in, z_mean, loss);
}

void IqnLearner::enqueue_grad(const Lane &lane, const StepInputs &in) {
    impl_->grad_pass(lane, in);
}

void IqnLearner::enqueue_adam(const Lane &lane, const uint64_t *step) {
    Impl &m = *impl_;
    aux::adam(m.params, m.mom1, m.mom2, m.grad, m.o.total, m.hyp, step, lane.stream);
}

float *IqnLearner::grad_device() { return impl_->grad; }

size_t IqnLearner::grad_floats() const { return impl_->o.total; }

size_t IqnLearner::bytes() const { return impl_->arena.bytes(); }

}  // namespace fh::cuda
