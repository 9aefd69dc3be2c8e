// SPEC §5.5 step 5 on the GPU, as src/cpu/cql.cpp: the CQL(H) penalty (Kumar et al. 2020)
// per action branch, weighted per sample by IQL's ω: softmax over the clamped q with the
// logsumexp in double, the strict clamp mask on the raw logits; its part of dU_b, de_b is
// computed apart and then added to the TD part (one float rounding of the sum, as the CPU).
#include "common.hpp"
#include "cuda_step.hpp"
#include "reduce.cuh"
#include "launch.cuh"
#include "mma_tf32.cuh"

namespace fh::cuda {

namespace {

__global__ void k_cql(const float *q, const float *z, const int32_t *action, const float *omega,
                      int B, int NB, int A, float rows, float alpha, float q_clip, float *dzc,
                      float *dzc_bf16, double *loss_elt) {
    pdl_enter();
    const float scale = __fdiv_rn(1.0f, __fmul_rn(rows, (float)NB));  // 1/(W·B·NB), SPEC §9
    const size_t n = (size_t)B * NB;
    for (size_t ib = blockIdx.x * (size_t)blockDim.x + threadIdx.x; ib < n;
         ib += (size_t)gridDim.x * blockDim.x) {
        const size_t i = ib / NB, b = ib % NB;
        const size_t base = b * (size_t)B * A + i * A;
        const int a = action[ib];
        const float *qr = q + base;
        float m = qr[0];
        for (int k = 1; k < A; ++k) m = fmaxf(m, qr[k]);
        double se = 0;
        for (int k = 0; k < A; ++k) se += exp((double)qr[k] - m);
        const double lse = (double)m + log(se);
        loss_elt[ib] = (double)omega[i] * (lse - (double)qr[a]);
        const float coef = __fmul_rn(__fmul_rn(alpha, omega[i]), scale);
        for (int k = 0; k < A; ++k) {
            const float p = (float)(exp((double)qr[k] - lse));
            const float zk = z[base + k];
            const bool inside = zk > -q_clip && zk < q_clip;
            const float v = inside ? __fmul_rn(coef, __fadd_rn(p, k == a ? -1.0f : 0.0f)) : 0.0f;
            dzc[base + k] = v;
            if (dzc_bf16) dzc_bf16[base + k] = mma::rounded<true>(v);
        }
    }
}

__global__ void k_add_inplace(float *dst, const float *src, size_t n, size_t s_dst,
                              size_t s_src) {
    pdl_enter();
    dst += blockIdx.y * s_dst;
    src += blockIdx.y * s_src;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(dst[i], src[i]);
}

// dst += src (float, elementwise) in `batch` slices: slice k is dst + k·s_dst, src + k·s_src.
void add_inplace(float *dst, const float *src, size_t n, cudaStream_t s, int batch,
                 size_t s_dst, size_t s_src) {
    FH_LAUNCH(k_add_inplace, dim3(grid_for(n), batch), kThreads, 0, s, dst, src, n, s_dst, s_src);
}

}  // namespace

void cql(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, NB = (int)d.NB, A = (int)d.A, HB = (int)d.HB;
    const QOffsets &o = st.L.q;
    cudaStream_t s = l.stream;
    // As the CPU (cql.cpp): the CQL part of dU_b, de_b is computed apart, then added to
    // the TD part elementwise (one float rounding of the sum).
    // In FH_MATH_BF16, where every branch's fused layer stored g as bfloat16 values, k_cql also
    // writes dzc rounded to bfloat16 values, into dz (whose readers, the TD backward, ran in the
    // forward child): then dU's GEMMs multiply bfloat16 values without a stage. de sums the
    // unrounded dzc.
    const uint64_t all = NB >= 64 ? ~uint64_t{0} : (uint64_t{1} << NB) - 1;
    const bool dzc_rounded = l.blas.bf16_stage && (st.on.g_rounded & all) == all;
    float *const dzc16 = dzc_rounded ? st.dz : nullptr;
    FH_LAUNCH(k_cql, grid_for((size_t)B * NB), kThreads, 0, s, st.on.q, st.on.z, st.action,
              st.omega, B, NB, A, (float)d.Bg, st.cfg.cql_alpha, st.cfg.q_clip, st.dzc, dzc16,
              st.cql_elt);
    sum_to(st.cql_elt, (size_t)B * NB, &st.dm->cql_loss, (double)d.Bg * NB, l.red, s,
           (double)st.cfg.cql_alpha);
    // The branches' blocks in the flat Q buffer are equally spaced (V, c, U, e per branch),
    // so the column sums and the adds of all branches are one launch each. The GEMMs stay
    // one per branch: as one strided-batched call cuBLAS gives up split-K and runs the
    // K = B reduction on 8 CTAs (measured on the H200: 148 us for the batch instead of
    // ~4 x 10 us).
    const size_t br = NB > 1 ? o.U[1] - o.U[0] : 0;
    for (int b = 0; b < NB; ++b) {
        const GemmDesc g = desc_tn(A, HB, B, (dzc_rounded ? dzc16 : st.dzc) + (size_t)b * B * A,
                                   st.on.g + (size_t)b * B * HB, st.cql_dU + (size_t)b * A * HB);
        if (dzc_rounded)
            gemm_bf16_values(l.blas, g, 0.0f, "dU_cql = dzc^T g");
        else
            gemm(l.blas, g, 0.0f, "dU_cql = dzc^T g");
    }
    colsum_partial(st.dzc, B, A, nullptr, st.cql_part, s, NB, (size_t)B * A);
    colsum_final(st.cql_part, B, A, st.cql_de, s, NB, (size_t)A);
    add_inplace(st.grad_q + o.U[0], st.cql_dU, (size_t)A * HB, s, NB, br, (size_t)A * HB);
    add_inplace(st.grad_q + o.e[0], st.cql_de, (size_t)A, s, NB, br, (size_t)A);
}

}  // namespace fh::cuda
