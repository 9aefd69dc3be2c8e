// SPEC §5.5 step 5 on the GPU, as src/cpu/cql.cpp: the CQL(H) penalty (Kumar et al. 2020)
// per action branch, weighted per sample by IQL's ω: softmax over the clamped q with the
// logsumexp in double, the strict clamp mask on the raw logits; its part of dU_b, de_b is
// computed apart and then added to the TD part (one float rounding of the sum, as the CPU).
// That part, dU_b = dzcᵀ g_b [A, HB] and de_b = Σ_i dzc_b, contracts B rows into a few
// thousand numbers: as cuBLAS GEMMs (M = A = 8) it took split-K over 128 slices and a reduction
// kernel per branch (13.7 us each at B = 16384 on the H200, warm), plus a column sum for de. A
// trial (cql_paths.hpp, FOXHUNT_CQL_GRADS=pass) sums every branch in one pass instead.
//
// The pass's tiling (k_cql_head_sums): block (p, b) of 256 threads, 128 columns × 2 row halves,
// takes chunks p, p + P, ... of 64 rows of branch b (P ≤ 128 blocks a branch, so the partial
// rows stay a few MiB at any B). A warp reads 32 consecutive columns of a row of g, whole
// sectors; the chunk's rows of dzc go to shared memory first and are read back as broadcasts. A
// thread loads g for 8 of its rows at once, then takes them in row order, keeping its column's
// A sums in double (exact products of floats; thread 0 of each half also the half's sums of
// dzc); the second half hands its sums to the first, which adds them and writes the block's
// partial row [dU (A·HB) | de (A)]. Columns past 128 take further rounds. reduce_partials then
// sums the blocks in its fixed pattern: no atomics, the same bits every run.
#include <cstdint>

#include "common.hpp"
#include "cql_head.hpp"
#include "cql_paths.hpp"
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

constexpr int kHeadCols = 128, kHeadBatch = 8;
constexpr int kHeadRows = (int)kCqlHeadRows, kHeadMaxA = (int)kCqlHeadMaxA;
// The halves' hand-over sums, then the chunk's rows of dzc.
constexpr size_t kHeadSmemBytes =
    ((size_t)kHeadCols * kHeadMaxA + kHeadMaxA) * sizeof(double) +
    (size_t)kHeadRows * kHeadMaxA * sizeof(float);

// AC: A compiled in (8), or 0 to read it from A_.
template <int AC>
__global__ void __launch_bounds__(2 * kHeadCols)
    k_cql_head_sums(const float *dzc, const float *g, int B, int A_, int HB, double *part) {
    pdl_enter();
    extern __shared__ float4 sm4[];
    double *hand = reinterpret_cast<double *>(sm4);                 // [kHeadCols][kHeadMaxA]
    double *hand_de = hand + kHeadCols * kHeadMaxA;                  // [kHeadMaxA]
    float *dz_s = reinterpret_cast<float *>(hand_de + kHeadMaxA);   // [kHeadRows][kHeadMaxA]
    const int A = AC ? AC : A_;
    const int tc = threadIdx.x % kHeadCols, half = threadIdx.x / kHeadCols;
    const int P = gridDim.x, W = A * HB + A, chunks = (B + kHeadRows - 1) / kHeadRows;
    dzc += (size_t)blockIdx.y * B * A;
    g += (size_t)blockIdx.y * B * HB;
    double *out = part + ((size_t)blockIdx.y * P + blockIdx.x) * W;
    for (int c0 = 0; c0 < HB; c0 += kHeadCols) {
        const int c = c0 + tc;
        const bool col = c < HB, de_thread = tc == 0 && c0 == 0;
        double su[kHeadMaxA], se[kHeadMaxA];
#pragma unroll
        for (int k = 0; k < kHeadMaxA; ++k) su[k] = se[k] = 0.0;
        for (int ch = blockIdx.x; ch < chunks; ch += P) {
            const int b0 = ch * kHeadRows, nb = min(kHeadRows, B - b0);
            __syncthreads();  // the previous chunk's rows of dzc are read
            for (int e = threadIdx.x; e < kHeadRows * kHeadMaxA; e += blockDim.x) {
                const int r = e / kHeadMaxA, k = e % kHeadMaxA;
                dz_s[e] = r < nb && k < A ? dzc[(size_t)(b0 + r) * A + k] : 0.0f;
            }
            __syncthreads();
            const int r0 = half * (kHeadRows / 2), r1 = min(nb, r0 + kHeadRows / 2);
            if (col)
                for (int rb = r0; rb < r1; rb += kHeadBatch) {
                    float gv[kHeadBatch];
#pragma unroll
                    for (int t = 0; t < kHeadBatch; ++t)
                        gv[t] = rb + t < r1 ? __ldg(g + (size_t)(b0 + rb + t) * HB + c) : 0.0f;
#pragma unroll
                    for (int t = 0; t < kHeadBatch; ++t) {
                        if (rb + t >= r1) break;
                        const float *dzi = dz_s + (rb + t) * kHeadMaxA;
#pragma unroll
                        for (int k = 0; k < kHeadMaxA; ++k)
                            if (k < A) su[k] = fma((double)dzi[k], (double)gv[t], su[k]);
                        if (de_thread)
#pragma unroll
                            for (int k = 0; k < kHeadMaxA; ++k) se[k] += (double)dzi[k];
                    }
                }
        }
        if (half == 1) {
#pragma unroll
            for (int k = 0; k < kHeadMaxA; ++k) hand[tc * kHeadMaxA + k] = su[k];
            if (de_thread)
#pragma unroll
                for (int k = 0; k < kHeadMaxA; ++k) hand_de[k] = se[k];
        }
        __syncthreads();
        if (half == 0 && col) {
#pragma unroll
            for (int k = 0; k < kHeadMaxA; ++k)
                if (k < A) out[(size_t)k * HB + c] = su[k] + hand[tc * kHeadMaxA + k];
            if (de_thread)
#pragma unroll
                for (int k = 0; k < kHeadMaxA; ++k)
                    if (k < A) out[(size_t)A * HB + k] = se[k] + hand_de[k];
        }
        __syncthreads();  // the hand-over sums are read before the next round writes them
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

void cql_head_sums(const float *dzc, const float *g, int B, int A, int HB, int NB, double *part,
                   float *dU, float *de, cudaStream_t s) {
    if (A < 1 || A > kHeadMaxA || B < 1 || HB < 1 || NB < 1)
        fail(FH_ERR_INTERNAL, "cql_head_sums: B = %d, A = %d, HB = %d, NB = %d", B, A, HB, NB);
    const int P = (int)cql_head_blocks((uint32_t)B);
    if (A == kHeadMaxA)
        FH_LAUNCH(k_cql_head_sums<kHeadMaxA>, dim3(P, NB), 2 * kHeadCols, kHeadSmemBytes, s, dzc,
                  g, B, A, HB, part);
    else
        FH_LAUNCH(k_cql_head_sums<0>, dim3(P, NB), 2 * kHeadCols, kHeadSmemBytes, s, dzc, g, B,
                  A, HB, part);
    Segs sg;
    sg.add(dU, 0, A * HB, (size_t)A * HB);
    sg.add(de, A * HB, A, (size_t)A);
    reduce_partials(part, P, A * HB + A, NB, sg, s);
}

void cql(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int B = (int)d.B, NB = (int)d.NB, A = (int)d.A, HB = (int)d.HB;
    const QOffsets &o = st.L.q;
    cudaStream_t s = l.stream;
    // As the CPU (cql.cpp): the CQL part of dU_b, de_b is computed apart, then added to
    // the TD part elementwise (one float rounding of the sum).
    // In FH_MATH_BF16 without the pass, where every branch's fused layer stored g as bfloat16
    // values, k_cql also writes dzc rounded to bfloat16 values, into dz (whose readers, the TD
    // backward, ran in the forward child): then dU's GEMMs multiply bfloat16 values without a
    // stage. de sums the unrounded dzc. The pass multiplies the float32 dzc.
    const bool pass = cql_head_pass(d);
    const uint64_t all = NB >= 64 ? ~uint64_t{0} : (uint64_t{1} << NB) - 1;
    const bool dzc_rounded = !pass && l.blas.bf16_stage && (st.on.g_rounded & all) == all;
    float *const dzc16 = dzc_rounded ? st.dz : nullptr;
    FH_LAUNCH(k_cql, grid_for((size_t)B * NB), kThreads, 0, s, st.on.q, st.on.z, st.action,
              st.omega, B, NB, A, (float)d.Bg, st.cfg.cql_alpha, st.cfg.q_clip, st.dzc, dzc16,
              st.cql_elt);
    sum_to(st.cql_elt, (size_t)B * NB, &st.dm->cql_loss, (double)d.Bg * NB, l.red, s,
           (double)st.cfg.cql_alpha);
    // The branches' blocks in the flat Q buffer are equally spaced (V, c, U, e per branch),
    // so the column sums and the adds of all branches are one launch each. Without the pass
    // the GEMMs stay one per branch: as one strided-batched call cuBLAS gives up split-K and
    // runs the K = B reduction on 8 CTAs (measured on the H200: 148 us for the batch instead
    // of ~4 x 10 us).
    const size_t br = NB > 1 ? o.U[1] - o.U[0] : 0;
    if (pass) {
        cql_head_sums(st.dzc, st.on.g, B, A, HB, NB, st.cql_part, st.cql_dU, st.cql_de, s);
    } else {
        for (int b = 0; b < NB; ++b) {
            const GemmDesc g =
                desc_tn(A, HB, B, (dzc_rounded ? dzc16 : st.dzc) + (size_t)b * B * A,
                        st.on.g + (size_t)b * B * HB, st.cql_dU + (size_t)b * A * HB);
            if (dzc_rounded)
                gemm_bf16_values(l.blas, g, 0.0f, "dU_cql = dzc^T g");
            else
                gemm(l.blas, g, 0.0f, "dU_cql = dzc^T g");
        }
        colsum_partial(st.dzc, B, A, nullptr, st.cql_part, s, NB, (size_t)B * A);
        colsum_final(st.cql_part, B, A, st.cql_de, s, NB, (size_t)A);
    }
    add_inplace(st.grad_q + o.U[0], st.cql_dU, (size_t)A * HB, s, NB, br, (size_t)A * HB);
    add_inplace(st.grad_q + o.e[0], st.cql_de, (size_t)A, s, NB, br, (size_t)A);
}

}  // namespace fh::cuda
