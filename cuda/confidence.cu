// SPEC §5.5 step 7 on the GPU, as src/cpu/confidence.cpp: the confidence head trained with
// the uncertainty Bellman equation (O'Donoghue et al. 2018), target s² + γ²(1 − d̃) ū(x̃') with
// ū from the target trunk features of x̃' (ddqn's target pass, before the EMA) and the target
// head after the EMA; the gradient goes into w_u and b_u only.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "memory_plan.hpp"
#include "reduce.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// A block of 8 warps takes kConfidenceRows rows (8 per warp, in order). Each warp forms its
// rows' dots h̄2(x̃')·w̄_u in double (lane j takes columns j, j + 32, ..., then a butterfly),
// lane k finishes row k's terms (ū, the target t, the error e, the loss ½e² and
// dpre = e/(W·B) · σ(pre_u)), and the block, a thread per column, adds dpre_i · h2_i over its
// rows in row order. One partial row per block, [Σ dpre·h2 (H columns) | Σ dpre | Σ ½e²]; one
// column-sum pass over the blocks' rows finishes w_u's and b_u's gradients and conf_loss
// (reduce_partials). This replaced a warp per row, whose 8-row blocks could not carry the
// H-wide column sum, and a two-kernel column sum over h2 (aux tail 0.0375 → 0.0299 ms at
// B = 16384 on the H200, bench/results/h200-2026-12-02-confidence-fused-before-after.json). A
// first version walked its rows in dependent batches of 8 loads and was slower, 0.0375 →
// 0.0479 ms (-confidence-fused-first-rejected.json): now half of a pass's loads are in flight
// at once, within 128 registers.
constexpr int kRowsPerWarp = (int)kConfidenceRows / (kThreads / 32);
static_assert(kRowsPerWarp == 8, "lane k < 8 finishes row k of its warp");

__global__ void __launch_bounds__(kThreads, 2)
    k_confidence(const float *h2t_next, const float *wt_u, const float *bt_u, const float *var,
                 const float *done, const float *u, const float *pre_u, const float *h2, int B,
                 int H, float rows, float gamma, float *conf, double *part) {
    pdl_enter();
    __shared__ float dsh[kConfidenceRows];
    __shared__ double lsh[kConfidenceRows];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = blockIdx.x * (int)kConfidenceRows, wr0 = r0 + warp * kRowsPerWarp;
    double acc[kRowsPerWarp];
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) acc[k] = 0.0;
    // Four column steps of all 8 rows loaded before any is summed (32 loads in flight per
    // lane); each row's sum still runs over the lane's columns in order.
    constexpr int J = 4;
    for (int j0 = lane; j0 < H; j0 += 32 * J) {
        float v[J][kRowsPerWarp], w[J];
#pragma unroll
        for (int m = 0; m < J; ++m) {
            const int j = j0 + 32 * m;
            w[m] = j < H ? wt_u[j] : 0.0f;
#pragma unroll
            for (int k = 0; k < kRowsPerWarp; ++k)
                v[m][k] = j < H && wr0 + k < B ? h2t_next[(size_t)(wr0 + k) * H + j] : 0.0f;
        }
#pragma unroll
        for (int m = 0; m < J; ++m)
#pragma unroll
            for (int k = 0; k < kRowsPerWarp; ++k)
                if (j0 + 32 * m < H) acc[k] += (double)v[m][k] * w[m];
    }
    double mine = 0.0;
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
        const double a = warp_sum(acc[k]);
        if (lane == k) mine = a;
    }
    if (lane < kRowsPerWarp) {
        const int row = wr0 + lane;
        float d = 0.0f;
        double loss = 0.0;
        if (row < B) {
            const float ubar = dev_softplus(__fadd_rn((float)mine, *bt_u));
            const float g2 = __fmul_rn(gamma, gamma);
            const float t = __fadd_rn(var[row], __fmul_rn(__fmul_rn(g2, __fadd_rn(1.0f, -done[row])), ubar));
            const float uu = u[row];
            const float e = __fadd_rn(uu, -t);
            loss = 0.5 * (double)e * e;
            d = __fmul_rn(__fdiv_rn(e, rows), dev_sigmoid(pre_u[row]));  // mean over W·B rows
            conf[row] = __fdiv_rn(1.0f, __fadd_rn(1.0f, sqrtf(uu)));
        }
        dsh[warp * kRowsPerWarp + lane] = d;
        lsh[warp * kRowsPerWarp + lane] = loss;
    }
    __syncthreads();
    const int nr = min((int)kConfidenceRows, B - r0);
    double *out = part + (size_t)blockIdx.x * (H + 2);
    for (int j = threadIdx.x; j < H; j += blockDim.x) {
        // Half of the block's rows loaded before any is summed, twice; summed in row order.
        constexpr int U = (int)kConfidenceRows / 2;
        const float *col = h2 + (size_t)r0 * H + j;
        double c = 0.0;
#pragma unroll 1
        for (int k0 = 0; k0 < (int)kConfidenceRows; k0 += U) {
            float v[U];
#pragma unroll
            for (int k = 0; k < U; ++k, col += H) v[k] = k0 + k < nr ? *col : 0.0f;
#pragma unroll
            for (int k = 0; k < U; ++k)
                if (k0 + k < nr) c = fma((double)dsh[k0 + k], (double)v[k], c);
        }
        out[j] = c;
    }
    if (threadIdx.x == 0) {
        double sd = 0.0, sl = 0.0;
        for (int k = 0; k < nr; ++k) {
            sd += (double)dsh[k];
            sl += lsh[k];
        }
        out[H] = sd;
        out[H + 1] = sl;
    }
}

}  // namespace

void confidence(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B, H = (int)st.d.H, grid = (int)confidence_chunks(B);
    const QOffsets &o = st.L.q;
    const float *wt = st.buf[BUF_Q_TARGET];
    FH_LAUNCH(k_confidence, grid, kThreads, 0, l.stream, st.tgt.h2 + (size_t)B * H, wt + o.w_u,
              wt + o.b_u, st.buf[BUF_ENS_VAR], st.done_f, st.on.u, st.on.pre_u, st.on.h2, B, H,
              (float)st.d.Bg, st.cfg.gamma, st.buf[BUF_CONFIDENCE], st.conf_part);
    Segs segs;
    segs.add(st.grad_q + o.w_u, 0, H);
    segs.add(st.grad_q + o.b_u, H, 1);
    segs.add(&st.dm->conf_loss, H + 1, 1, 0, (double)st.d.Bg);
    reduce_partials(st.conf_part, grid, H + 2, 1, segs, l.stream);
}

}  // namespace fh::cuda
