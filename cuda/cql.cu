// SPEC §5.5 step 5 on the GPU, as src/cpu/cql.cpp: the CQL(H) penalty (Kumar et al. 2020)
// per action branch, weighted per sample by IQL's ω: softmax over the clamped q with the
// logsumexp in double, the strict clamp mask on the raw logits; its part of dU_b, de_b is
// computed apart and then added to the TD part (one float rounding of the sum, as the CPU).
#include "common.hpp"
#include "cql_plan.hpp"
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

// The dzc terms of row i, branch b into dzc (and dzc_bf16) at `base` and into out[0..A), and
// its loss term: k_cql's arithmetic, for k_cql_grad.
__device__ __forceinline__ void cql_row(const float *q, const float *z, const int32_t *action,
                                        const float *omega, size_t i, size_t b, int B, int NB,
                                        int A, float scale, float alpha, float q_clip, float *dzc,
                                        float *dzc_bf16, double *loss_elt, float *out) {
    const size_t ib = i * NB + b, base = b * (size_t)B * A + i * A;
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
        out[k] = v;
    }
}

// Trial (FOXHUNT_CQL_GRAD=fused, src/cql_plan.hpp): k_cql's dzc and loss terms and, without
// GEMMs, the block's partial row of dU_b = dzc_bᵀ g_b [A, HB] and de_b = Σ_i dzc_b[i] [A] for
// every branch. Tiling: a block takes chunks of kCqlGradRows rows (chunk c, c + gridDim.x, ...);
// a thread per (row, branch) writes the chunk's dzc to shared memory [rows][NB·A]; then a thread
// per (branch, column j of g) sums its A columns of dU over the chunk's rows in row order, in
// double (g_b's row reads coalesce over j, eight rows' loads in flight; the dzc reads are
// broadcasts), and a thread per (branch, a) its de. The chunk's sums are added to the block's
// partial row in chunk order. kCqlGradThreads = NB·HB at the default config: one (branch, j)
// each. No atomics: the bits depend on B alone.
constexpr int kCqlGradThreads = 512;
__global__ void __launch_bounds__(kCqlGradThreads)
k_cql_grad(const float *q, const float *z, const int32_t *action, const float *omega,
           const float *g, int B, int NB, int A, int HB, float rows, float alpha, float q_clip,
           float *dzc, float *dzc_bf16, double *loss_elt, double *partial) {
    pdl_enter();
    extern __shared__ float dz_s[];  // [kCqlGradRows][NB·A]
    const float scale = __fdiv_rn(1.0f, __fmul_rn(rows, (float)NB));  // 1/(W·B·NB), SPEC §9
    const int NA = NB * A;
    double *const prow = partial + (size_t)blockIdx.x * ((size_t)NA * HB + NA);
    const int chunks = (B + (int)kCqlGradRows - 1) / (int)kCqlGradRows;
    for (int c = blockIdx.x; c < chunks; c += gridDim.x) {
        const int r0 = c * (int)kCqlGradRows, nr = min((int)kCqlGradRows, B - r0);
        const bool first = c == (int)blockIdx.x;
        for (int t = threadIdx.x; t < nr * NB; t += blockDim.x) {
            const int il = t / NB, b = t % NB;
            cql_row(q, z, action, omega, (size_t)(r0 + il), (size_t)b, B, NB, A, scale, alpha,
                    q_clip, dzc, dzc_bf16, loss_elt, dz_s + (size_t)il * NA + b * A);
        }
        __syncthreads();
        for (int t = threadIdx.x; t < NB * HB; t += blockDim.x) {
            const int b = t / HB, j = t % HB;
            const float *gb = g + ((size_t)b * B + r0) * HB + j;
            for (int a0 = 0; a0 < A; a0 += 8) {
                double acc[8] = {};
                for (int i0 = 0; i0 < nr; i0 += 8) {
                    float gv[8];
#pragma unroll
                    for (int u = 0; u < 8; ++u)
                        gv[u] = i0 + u < nr ? __ldg(gb + (size_t)(i0 + u) * HB) : 0.0f;
#pragma unroll
                    for (int u = 0; u < 8; ++u) {
                        if (i0 + u >= nr) break;
                        const float *dr = dz_s + (size_t)(i0 + u) * NA + b * A + a0;
#pragma unroll
                        for (int a = 0; a < 8; ++a)
                            if (a0 + a < A) acc[a] = fma((double)dr[a], (double)gv[u], acc[a]);
                    }
                }
#pragma unroll
                for (int a = 0; a < 8; ++a)
                    if (a0 + a < A) {
                        double &o = prow[((size_t)b * A + a0 + a) * HB + j];
                        o = first ? acc[a] : o + acc[a];
                    }
            }
        }
        for (int t = threadIdx.x; t < NA; t += blockDim.x) {
            double acc = 0;
            for (int il = 0; il < nr; ++il) acc += dz_s[(size_t)il * NA + t];
            double &o = prow[(size_t)NA * HB + t];
            o = first ? acc : o + acc;
        }
        __syncthreads();  // before the next chunk overwrites dz_s
    }
}

// The blocks' partial rows summed in block order (double), rounded to float once and added to
// the TD part of dU_b and de_b (one float rounding of the sum, as the CPU).
__global__ void k_cql_grad_final(const double *partial, int blocks, int NB, int A, int HB,
                                 float *grad, size_t U0, size_t e0, size_t br) {
    pdl_enter();
    const int NA = NB * A;
    const size_t row = (size_t)NA * HB + NA;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < row;
         t += (size_t)gridDim.x * blockDim.x) {
        double s = 0;
        int k = 0;
        for (; k + 8 <= blocks; k += 8) {  // eight loads in flight, summed in block order
            double v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = partial[(size_t)(k + u) * row + t];
#pragma unroll
            for (int u = 0; u < 8; ++u) s += v[u];
        }
        for (; k < blocks; ++k) s += partial[(size_t)k * row + t];
        const float v = (float)s;
        float *dst;
        if (t < (size_t)NA * HB) {
            const size_t b = t / ((size_t)A * HB);
            dst = grad + U0 + b * br + t % ((size_t)A * HB);
        } else {
            const size_t u = t - (size_t)NA * HB;
            dst = grad + e0 + (u / A) * br + u % A;
        }
        *dst = __fadd_rn(*dst, v);
    }
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
    const size_t br = NB > 1 ? o.U[1] - o.U[0] : 0;
    if (st.cql_gpart) {  // trial FOXHUNT_CQL_GRAD=fused (src/cql_plan.hpp)
        const int blocks = (int)cql_grad_blocks(d);
        FH_LAUNCH(k_cql_grad, blocks, kCqlGradThreads, kCqlGradRows * NB * A * sizeof(float), s,
                  st.on.q, st.on.z, st.action, st.omega, st.on.g, B, NB, A, HB, (float)d.Bg,
                  st.cfg.cql_alpha, st.cfg.q_clip, st.dzc, dzc16, st.cql_elt, st.cql_gpart);
        sum_to(st.cql_elt, (size_t)B * NB, &st.dm->cql_loss, (double)d.Bg * NB, l.red, s,
               (double)st.cfg.cql_alpha);
        const size_t row = cql_grad_partial_doubles(d);
        FH_LAUNCH(k_cql_grad_final, grid_for(row), kThreads, 0, s, st.cql_gpart, blocks, NB, A,
                  HB, st.grad_q, o.U[0], o.e[0], br);
        return;
    }
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
