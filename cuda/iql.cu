// SPEC §5.5 step 2 on the GPU: the two IQL expectile value nets V_hi, V_lo (Kostrikov et al.
// 2021), D → Hi → Hi → 1 with SiLU, as src/cpu/iql.cpp computes them:
//     ũ = Q̄sa − V_τ(x̃),  L_τ = mean_i |τ − [ũ < 0]| ũ²,  ω_i = min(exp(β (Q̄sa_i − V_hi(x̃_i))), ω_max)
// then one Adam step (lr_aux) over the whole [hi | lo] buffer (enqueue_adam, after the gradient's
// sum across ranks in a data-parallel step). The means are over Dims::Bg rows (SPEC §9).
//
// Both nets live in one buffer [hi | lo] of identical layouts (lo at +layout.iql.total), and so
// do their activations ([2, B, Hi], lo at +B·Hi), their gradient and their Adam moments. Every
// GEMM of the step ("site") is one call for both nets, by config.iql_gemm:
//   GROUPED     cublasGemmGroupedBatchedEx, one group of 2 problems (cuBLAS >= 12.5; its A/B/C
//               pointer arrays are device arrays, written by a kernel at the head of each step;
//               sizes, alpha and beta are host arrays that live as long as the learner)
//   BATCHED     cublasGemmStridedBatchedEx, batch 2, strides = the distance from the hi operand
//               to the lo operand (layout.iql.total for weights, B·Hi for activations, 0 for the
//               shared input x̃)
//   SEQUENTIAL  two gemm() calls (cublasLtMatmul, cuda/gemm.cpp; bfloat16 staged in BF16, but
//               for the fused path's dW2, whose operands the kernel stores as bfloat16 values)
//   AUTO        SEQUENTIAL, the fastest measured. H200, cuBLAS 13.1, B = 16384, TF32, IQL per
//               step: sequential 0.184 ms, batched 0.455 ms, grouped 0.884 ms (foxhunt-bench,
//               bench/results/h200-2026-11-29-iql-ablation.json). Two 16384-row GEMMs each fill
//               the GPU, inside a graph the launch gap the seed wanted to save is ~2 µs, and the
//               batched/grouped kernels cuBLAS picks for these shapes are slower.
// GROUPED needs cuBLAS >= 12.5 (cublasGetProperty at creation) and every operand pointer 16-byte
// aligned (below); otherwise it runs SEQUENTIAL.
// GROUPED that the library refuses (NOT_SUPPORTED / INVALID_VALUE / ARCH_MISMATCH) falls back to
// BATCHED for good; the eager run before capture meets that first, so the captured graph is
// consistent.
//
// Kernels and GEMMs of one step (Hi = iql_hidden, z = net):
//   F1  pre1[z] = x̃ W1[z]ᵀ              nt  M=B N=Hi K=D      then h1 = SiLU(pre1 + b1)
//   F2  pre2[z] = h1[z] W2[z]ᵀ           nt  M=B N=Hi K=Hi     then h2 = SiLU(pre2 + b2)
//   head (warp per row): V = h2·w3 + b3, ũ, loss, ω, dV = −2|τ−[ũ<0]|ũ/(W·B),
//        dpre2 = (dV w3) ⊙ SiLU'(pre2 + b2) in place of pre2; block partials of db2, dw3, db3, loss
//   B2w dW2[z] = dpre2[z]ᵀ h1[z]          tn  M=Hi N=Hi K=B
//   B2x dh1[z] = dpre2[z] W2[z]           nn  M=B N=Hi K=Hi     (into the dead h2 buffer)
//   dpre1 = dh1 ⊙ SiLU'(pre1 + b1) in place, with the column-sum partials of db1
//   B1w dW1[z] = dpre1[z]ᵀ x̃               tn  M=Hi N=D K=B
//   reductions of the partials (fixed order, double), Adam over 2·total floats.
// In TF32 and BF16 modes at iql_hidden = 128 with D % 8 == 0 and D ≤ 128 (src/iql_paths.hpp),
// F1, the two bias_silu passes, F2, the head, B2x and dsilu_colsum are one tensor-core kernel
// (iql_fused.cu) writing h1, dpre2 and dpre1 and the partial sums; B2w and B1w stay as above.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "aux_common.cuh"
#include "iql_fused.hpp"
#include "iql_head.hpp"
#include "iql_paths.hpp"
#include "learners.hpp"
#include "nn.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

constexpr int kHeadRowsPerWarp = 8;

// The grouped GEMM's device pointer arrays, rewritten at the head of every step (x̃ is only
// known at enqueue time; a kernel keeps enqueue free of host-to-device copies).
constexpr int kSites = 5;
struct PtrTable {
    const void *p[kSites * 6];  // per site: A0 A1 B0 B1 C0 C1
};
__global__ void k_set_ptrs(PtrTable t, const void **dst) {
    pdl_enter();
    const int i = threadIdx.x;
    if (i < kSites * 6) dst[i] = t.p[i];
}

bool grouped_available() {
    int maj = 0, min = 0;
    FH_CUBLAS(cublasGetProperty(MAJOR_VERSION, &maj));
    FH_CUBLAS(cublasGetProperty(MINOR_VERSION, &min));
    return maj > 12 || (maj == 12 && min >= 5);
}

}  // namespace

struct IqlLearner::Impl {
    // One GEMM site: the two problems, and the grouped call's host arrays (group_count 1).
    struct Site {
        const char *name;
        GemmDesc g[2];
        cublasOperation_t ta, tb;
        int m, n, k, lda, ldb, ldc, gsize;
        float alpha, beta;
    };

    Dims d;
    IqlOffsets o;
    size_t total;
    float *params, *mom1, *mom2;
    float tau[2], awr_beta, awr_max;
    AdamHyper hyp;
    int mode;
    cublasStatus_t grouped_refused = CUBLAS_STATUS_SUCCESS;

    aux::Arena arena;
    float *pre1, *h1, *pre2, *h2, *grad;
    double *part_head, *part_b1;
    const void **dptrs;
    aux::RowPlan head;
    int b1_chunks;
    Site sites[kSites];
    // TF32 and BF16 modes at iql_hidden = 128, D % 8 == 0, D ≤ 128: F1, F2, the head, B2x and
    // dsilu_colsum are one kernel (iql_fused.cu), which writes h1, dpre2 (into pre2) and dpre1
    // (into h2); pre1 is not allocated. FOXHUNT_IQL_KERNELS=unfused keeps the separate passes.
    bool fused = false;
    int fused_blocks = 0;

    Impl(const Dims &dd, const fh_config &c, const Layout &L, float *p, float *m, float *v)
        : d(dd), o(L.iql), total(L.iql.total), params(p), mom1(m), mom2(v) {
        tau[0] = c.iql_tau_hi;
        tau[1] = c.iql_tau_lo;
        awr_beta = c.awr_beta;
        awr_max = c.awr_max;
        hyp = AdamHyper{c.lr_aux, c.adam_beta1, c.adam_beta2, c.adam_eps};
        if ((size_t)d.B * d.Hi > (size_t)INT32_MAX)
            fail(FH_ERR_BAD_DIMENSION, "config: batch_size * iql_hidden = %zu is too large for "
                 "the CUDA IQL learner", (size_t)d.B * d.Hi);

        // The grouped call reads its A/B/C pointers from device memory, where cuBLAS cannot
        // check them, and its tensor-core kernels fault (cudaErrorMisalignedAddress, seen on the
        // H200) on a pointer that is not 16-byte aligned. Every pointer it gets is a 256-byte
        // aligned allocation plus one of these offsets (in floats), so they must all be
        // multiples of 4. The layout pads each net to 256 bytes; odd widths can still break it.
        const bool aligned = o.W1 % 4 == 0 && o.W2 % 4 == 0 && o.w3 % 4 == 0 &&
                             total % 4 == 0 && ((size_t)d.B * d.Hi) % 4 == 0;
        const bool have_grouped = grouped_available() && aligned;
        // FH_MATH_BF16 stages its operands in gemm() (gemm_bf16.cu), which the grouped and
        // batched calls bypass: it runs the plain GEMMs.
        switch (c.math_mode == FH_MATH_BF16 ? FH_IQL_GEMM_SEQUENTIAL : c.iql_gemm) {
        case FH_IQL_GEMM_SEQUENTIAL: mode = FH_IQL_GEMM_SEQUENTIAL; break;
        case FH_IQL_GEMM_BATCHED: mode = FH_IQL_GEMM_BATCHED; break;
        case FH_IQL_GEMM_GROUPED:
            mode = have_grouped ? FH_IQL_GEMM_GROUPED : FH_IQL_GEMM_SEQUENTIAL;
            break;
        default:  // AUTO: the fastest measured (see the table above)
            mode = FH_IQL_GEMM_SEQUENTIAL;
            break;
        }

        const size_t BH = (size_t)d.B * d.Hi, W = 2 * (size_t)d.Hi + 2;
        head = aux::plan_rows(d.B, (int)W, kHeadRowsPerWarp, 0, "IQL head");
        b1_chunks = aux::col_chunks(d.B);
        fused = iql_fused(d, c);
        if (fused) {
            // The kernel reads W1 and W2 as float4s and x̃'s rows with 16-byte copies.
            if (o.W1 % 4 || o.W2 % 4 || total % 4)
                fail(FH_ERR_INTERNAL, "IQL layout: W1 at %zu, W2 at %zu, %zu floats per net: "
                     "the fused kernel needs multiples of 4", o.W1, o.W2, total);
            fused_blocks = iql::fused_blocks((int)d.B);
        }
        // Partial rows for the head's grid or the fused kernel's (at most one per 128-row tile).
        const int head_rows = std::max(head.blocks, b1_chunks);
        const size_t o_pre1 = arena.reserve_n<float>(fused ? 0 : 2 * BH);
        const size_t o_h1 = arena.reserve_n<float>(2 * BH);
        const size_t o_pre2 = arena.reserve_n<float>(2 * BH);
        const size_t o_h2 = arena.reserve_n<float>(2 * BH);
        const size_t o_grad = arena.reserve_n<float>(2 * total);
        const size_t o_ph = arena.reserve_n<double>(2 * (size_t)head_rows * W);
        const size_t o_pb = arena.reserve_n<double>(2 * (size_t)b1_chunks * d.Hi);
        const size_t o_ptr = arena.reserve_n<void *>(kSites * 6);
        arena.allocate("the IQL learner");
        pre1 = fused ? nullptr : arena.at<float>(o_pre1);
        h1 = arena.at<float>(o_h1);
        pre2 = arena.at<float>(o_pre2);
        h2 = arena.at<float>(o_h2);
        grad = arena.at<float>(o_grad);
        part_head = arena.at<double>(o_ph);
        part_b1 = arena.at<double>(o_pb);
        dptrs = arena.at<const void *>(o_ptr);
        aux::allow_smem(head_kernel(), head.smem, "IQL head");
        if (fused) iql::fused_prepare();
    }

    // The head's kernel: columns in registers up to Hi = 128 (IQL 0.180 → 0.162 ms at B = 16384
    // on the H200, bench/results/h200-2026-12-02-iql-head-before-after.json), k_iql_head beyond.
    const void *head_kernel() const { return iql::head_kernel((int)d.Hi); }

    // The five sites for input x; activations of net z at +z·B·Hi, parameters at +z·total.
    void build_sites(const float *x) {
        const int B = (int)d.B, Hi = (int)d.Hi, D = (int)d.D;
        const size_t BH = (size_t)d.B * d.Hi;
        for (int z = 0; z < 2; ++z) {
            const float *P = params + z * total;
            float *G = grad + z * total;
            const size_t A = z * BH;
            // dpre2 lives in pre2, dh1 and then dpre1 in h2 (see the file comment).
            sites[0].g[z] = desc_nt(B, Hi, D, x, P + o.W1, pre1 ? pre1 + A : nullptr);
            sites[1].g[z] = desc_nt(B, Hi, Hi, h1 + A, P + o.W2, pre2 + A);
            sites[2].g[z] = desc_tn(Hi, Hi, B, pre2 + A, h1 + A, G + o.W2);
            sites[3].g[z] = desc_nn(B, Hi, Hi, pre2 + A, P + o.W2, h2 + A);
            sites[4].g[z] = desc_tn(Hi, D, B, h2 + A, x, G + o.W1);
        }
        const char *names[kSites] = {"IQL F1 pre1 = x W1^T", "IQL F2 pre2 = h1 W2^T",
                                     "IQL B2w dW2 = dpre2^T h1", "IQL B2x dh1 = dpre2 W2",
                                     "IQL B1w dW1 = dpre1^T x"};
        for (int k = 0; k < kSites; ++k) {
            Site &s = sites[k];
            const GemmDesc &g = s.g[0];
            s.name = names[k];
            s.ta = g.opa; s.tb = g.opb;
            s.m = g.m; s.n = g.n; s.k = g.k;
            s.lda = g.lda; s.ldb = g.ldb; s.ldc = g.ldc;
            s.gsize = 2;
            s.alpha = 1.0f;
            s.beta = 0.0f;
        }
    }

    void strided(const Blas &bl, const Site &s) {
        const GemmDesc &g0 = s.g[0], &g1 = s.g[1];
        const long long sa = (long long)(g1.a - g0.a), sb = (long long)(g1.b - g0.b),
                        sc = (long long)(g1.c - g0.c);
        const cublasStatus_t st = cublasGemmStridedBatchedEx(
            bl.handle, g0.opa, g0.opb, g0.m, g0.n, g0.k, &s.alpha, g0.a, CUDA_R_32F, g0.lda, sa,
            g0.b, CUDA_R_32F, g0.ldb, sb, &s.beta, g0.c, CUDA_R_32F, g0.ldc, sc, 2, bl.compute,
            CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            char call[200];
            snprintf(call, sizeof call, "cublasGemmStridedBatchedEx(%s: m=%d n=%d k=%d, batch 2)",
                     s.name, g0.m, g0.n, g0.k);
            throw_cublas(st, call, __FILE__, __LINE__);
        }
    }

    void run(const Blas &bl, int k) {
        const Site &s = sites[k];
        if (mode == FH_IQL_GEMM_SEQUENTIAL) {
            gemm(bl, s.g[0], 0.0f, s.name);
            gemm(bl, s.g[1], 0.0f, s.name);
            return;
        }
        if (mode == FH_IQL_GEMM_GROUPED) {
            const void *const *A = dptrs + k * 6;
            const cublasStatus_t st = cublasGemmGroupedBatchedEx(
                bl.handle, &s.ta, &s.tb, &s.m, &s.n, &s.k, &s.alpha, A, CUDA_R_32F, &s.lda, A + 2,
                CUDA_R_32F, &s.ldb, &s.beta, (void *const *)(A + 4), CUDA_R_32F, &s.ldc, 1,
                &s.gsize, bl.compute);
            if (st == CUBLAS_STATUS_SUCCESS) return;
            if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE &&
                st != CUBLAS_STATUS_ARCH_MISMATCH) {
                char call[200];
                snprintf(call, sizeof call, "cublasGemmGroupedBatchedEx(%s: m=%d n=%d k=%d, 2)",
                         s.name, s.m, s.n, s.k);
                throw_cublas(st, call, __FILE__, __LINE__);
            }
            // Refused before anything was enqueued: batched from now on (a real argument error
            // would fail the batched call too, and be reported there).
            grouped_refused = st;
            mode = FH_IQL_GEMM_BATCHED;
        }
        strided(bl, s);
    }

    // F1 .. B2x in one kernel, and the sums of its partial rows (iql_fused.cu).
    void fused_pass(const StepInputs &in, float *v_hi, float *v_lo, float *omega, float *loss,
                    bool bf16_stores, cudaStream_t s) {
        aux::require_aligned16(in.x, "IQL: x~");
        iql::FusedArgs a{};
        a.x = in.x;
        a.params = params;
        a.total = total;
        a.off_W1 = o.W1; a.off_b1 = o.b1; a.off_W2 = o.W2;
        a.off_b2 = o.b2; a.off_w3 = o.w3; a.off_b3 = o.b3;
        a.qsa = in.qbar_sa;
        a.B = (int)d.B; a.D = (int)d.D;
        a.rows = (float)d.Bg;
        a.tau[0] = tau[0]; a.tau[1] = tau[1];
        a.awr_beta = awr_beta; a.awr_max = awr_max;
        a.v_out[0] = v_hi; a.v_out[1] = v_lo; a.omega = omega;
        a.h1 = h1; a.dpre2 = pre2; a.dpre1 = h2;
        a.part_head = part_head; a.part_b1 = part_b1;
        a.bf16_stores = bf16_stores;
        iql::fused(a, fused_blocks, s);
        reduce_head(fused_blocks, loss, s);
        reduce_b1(fused_blocks, s);
    }

    // The head's partial rows (db2 | dw3 | db3 | loss terms) into the gradient and the losses.
    void reduce_head(int rows, float *loss, cudaStream_t s) {
        const int Hi = (int)d.Hi;
        aux::Segs g;
        g.add(grad + o.b2, 0, Hi, total);
        g.add(grad + o.w3, Hi, Hi, total);
        g.add(grad + o.b3, 2 * Hi, 1, total);
        g.add(loss, 2 * Hi + 1, 1, 1, (double)d.Bg);  // loss[0] hi, loss[1] lo
        aux::reduce_partials(part_head, rows, 2 * Hi + 2, 2, g, s);
    }
    // db1's partial rows into the gradient.
    void reduce_b1(int rows, cudaStream_t s) {
        aux::Segs g;
        g.add(grad + o.b1, 0, (int)d.Hi, total);
        aux::reduce_partials(part_b1, rows, (int)d.Hi, 2, g, s);
    }

    void loss_grad(const Lane &lane, const StepInputs &in, float *v_hi, float *v_lo,
                   float *omega, float *loss) {
        cudaStream_t s = lane.stream;
        const Blas &bl = checked_blas(lane, "IQL");
        const size_t B = d.B;
        const int Hi = (int)d.Hi;

        build_sites(in.x);
        if (mode == FH_IQL_GEMM_GROUPED) {
            PtrTable t{};
            for (int k = 0; k < kSites; ++k)
                for (int z = 0; z < 2; ++z) {
                    t.p[k * 6 + z] = sites[k].g[z].a;
                    t.p[k * 6 + 2 + z] = sites[k].g[z].b;
                    t.p[k * 6 + 4 + z] = sites[k].g[z].c;
                }
            FH_LAUNCH(k_set_ptrs, 1, 32, 0, s, t, dptrs);
        }

        if (fused) {
            // FH_MATH_BF16: the kernel stores h1, dpre2 and dpre1 as bfloat16 values, and dW2
            // multiplies them without the stage (gemm_bf16_values), as dW1 does with HER's x̃ of
            // bfloat16 values.
            const bool bf16 = bl.bf16_stage != nullptr;
            fused_pass(in, v_hi, v_lo, omega, loss, bf16, s);
            if (bf16)
                for (int z = 0; z < 2; ++z)
                    gemm_bf16_values(bl, sites[2].g[z], 0.0f, sites[2].name);
            else
                run(bl, 2);
            if (bf16 && in.x_bf16) {
                for (int z = 0; z < 2; ++z)  // dW1 = dpre1ᵀ x̃, dpre1 in h2 (build_sites)
                    gemm_bf16_values(bl,
                                     desc_tn(Hi, (int)d.D, (int)B, h2 + z * B * Hi, in.x_bf16,
                                             grad + z * total + o.W1),
                                     0.0f, sites[4].name);
            } else {
                run(bl, 4);
            }
            return;
        }

        // Forward.
        run(bl, 0);
        bias_silu(pre1, h1, params + o.b1, B, Hi, s, 2, total);
        run(bl, 1);
        bias_silu(pre2, h2, params + o.b2, B, Hi, s, 2, total);

        // V, loss, ω, and dpre2 with the head's gradient partials.
        iql::HeadArgs a{};
        a.h2 = h2; a.pre2 = pre2; a.params = params;
        a.total = total; a.off_w3 = o.w3; a.off_b3 = o.b3; a.off_b2 = o.b2;
        a.qsa = in.qbar_sa;
        a.B = (int)d.B; a.Hi = Hi;
        a.rows = (float)d.Bg;
        a.tau[0] = tau[0]; a.tau[1] = tau[1];
        a.awr_beta = awr_beta; a.awr_max = awr_max;
        a.v_out[0] = v_hi; a.v_out[1] = v_lo; a.omega = omega;
        a.partial = part_head;
        a.rows_per_blk = head.rows_per_blk;
        {
            void *args[] = {&a};
            FH_CUDA(launch_pdl(head_kernel(), dim3(head.blocks, 2), head.warps * 32, head.smem, s,
                               args));
        }
        reduce_head(head.blocks, loss, s);

        // Backward through layer 2 and layer 1.
        run(bl, 2);
        run(bl, 3);
        PtrList dh1{};
        dh1.p[0] = h2;
        dh1.n = 1;
        dsilu_colsum(dh1, pre1, params + o.b1, (int)B, Hi, aux::kColRows, h2, part_b1,
                     s, 2, total);
        reduce_b1(b1_chunks, s);
        run(bl, 4);
    }
};

IqlLearner::IqlLearner(const Dims &d, const fh_config &c, const Layout &L, float *params,
                       float *m, float *v)
    : impl_(std::make_unique<Impl>(d, c, L, params, m, v)) {}

IqlLearner::~IqlLearner() = default;

void IqlLearner::enqueue_loss_grad(const Lane &lane, const StepInputs &in, float *v_hi,
                                   float *v_lo, float *omega, float *loss) {
    impl_->loss_grad(lane, in, v_hi, v_lo, omega, loss);
}

// One Adam over [hi | lo].
void IqlLearner::enqueue_adam(const Lane &lane, const uint64_t *step) {
    Impl &m = *impl_;
    aux::adam(m.params, m.mom1, m.mom2, m.grad, 2 * m.total, m.hyp, step, lane.stream);
}

float *IqlLearner::grad_device() { return impl_->grad; }

size_t IqlLearner::grad_floats() const { return 2 * impl_->total; }

size_t IqlLearner::bytes() const { return impl_->arena.bytes(); }

int IqlLearner::gemm_mode() const { return impl_->mode; }

}  // namespace fh::cuda
