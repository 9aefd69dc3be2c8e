// SPEC §5.5 step 7 on the GPU, as src/cpu/confidence.cpp: the confidence head trained with
// the uncertainty Bellman equation (O'Donoghue et al. 2018), target s² + γ²(1 − d̃) ū(x̃') with
// ū from the target trunk features of x̃' (ddqn's target pass, before the EMA) and the target
// head after the EMA; the gradient goes into w_u and b_u only.
#include <cstdlib>
#include <cstring>

#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "reduce.cuh"

namespace fh::cuda {

namespace {

// Row `row` (one warp): the double dot of the target trunk features with the target head, then
// on lane 0 the row's terms: dpre[row] and conf[row] written, the loss term 0.5 e² and dpre
// returned in loss and dp (lane 0 only; the other lanes return false).
__device__ __forceinline__ bool conf_row(const float *h2t_next, const float *wt_u, const float *bt_u,
                                         const float *var, const float *done, const float *u,
                                         const float *pre_u, int H, float rows, float gamma,
                                         int row, int lane, float *dpre, float *conf,
                                         double &loss, double &dp) {
    double acc = 0;
    for (int j = lane; j < H; j += 32) acc += (double)h2t_next[(size_t)row * H + j] * wt_u[j];
    acc = warp_sum(acc);
    if (lane != 0) return false;
    const float ubar = dev_softplus(__fadd_rn((float)acc, *bt_u));
    const float g2 = __fmul_rn(gamma, gamma);
    const float t = __fadd_rn(var[row], __fmul_rn(__fmul_rn(g2, __fadd_rn(1.0f, -done[row])), ubar));
    const float uu = u[row];
    const float e = __fadd_rn(uu, -t);
    loss = 0.5 * (double)e * e;
    const float d = __fmul_rn(__fdiv_rn(e, rows), dev_sigmoid(pre_u[row]));  // mean over W·B rows
    dpre[row] = d;
    dp = (double)d;
    conf[row] = __fdiv_rn(1.0f, __fadd_rn(1.0f, sqrtf(uu)));
    return true;
}

// One warp per row (conf_row).
__global__ void k_confidence(const float *h2t_next, const float *wt_u, const float *bt_u,
                             const float *var, const float *done, const float *u,
                             const float *pre_u, int B, int H, float rows, float gamma,
                             float *dpre, double *loss_elt, float *conf, double *part) {
    __shared__ double sh[kThreads / 32][2];
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (part) {
        // With `part`, each block sums its rows' loss terms and dpre in warp order into
        // part[block] (Σ loss) and part[gridDim.x + block] (Σ dpre): one final tree sum over
        // the blocks for each, instead of a sum over loss_elt and a column sum of dpre (two
        // kernels each).
        double l = 0.0, g = 0.0;
        if (row < B) conf_row(h2t_next, wt_u, bt_u, var, done, u, pre_u, H, rows, gamma, row,
                              lane, dpre, conf, l, g);
        if (lane == 0) {
            sh[warp][0] = l;
            sh[warp][1] = g;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double sl = 0.0, sg = 0.0;
            for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
                sl += sh[w][0];
                sg += sh[w][1];
            }
            part[blockIdx.x] = sl;
            part[gridDim.x + blockIdx.x] = sg;
        }
        return;
    }
    if (row >= B) return;
    double l, g;
    if (conf_row(h2t_next, wt_u, bt_u, var, done, u, pre_u, H, rows, gamma, row, lane, dpre, conf,
                 l, g))
        loss_elt[row] = l;
}

}  // namespace

void confidence(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B, H = (int)st.d.H;
    const QOffsets &o = st.L.q;
    const float *wt = st.buf[BUF_Q_TARGET];
    const int grid = (B + kThreads / 32 - 1) / (kThreads / 32);
    // Trial switch FOXHUNT_TAIL=unfused: the per-row loss terms and the b_u column sum apart,
    // as before. Otherwise the block sums land in conf_elt's first 2·grid doubles (grid ≤ B/8),
    // each half summed by one block's fixed tree (reduce_final; a column pass over 2048 rows of
    // width 2 walked them one after another: 33 µs).
    const char *e = getenv("FOXHUNT_TAIL");
    const bool fused = !(e && !strcmp(e, "unfused"));
    k_confidence<<<grid, kThreads, 0, l.stream>>>(st.tgt.h2 + (size_t)B * H, wt + o.w_u, wt + o.b_u,
                                                  st.buf[BUF_ENS_VAR], st.done_f, st.on.u,
                                                  st.on.pre_u, B, H, (float)st.d.Bg,
                                                  st.cfg.gamma, st.dpre_u, st.conf_elt,
                                                  st.buf[BUF_CONFIDENCE],
                                                  fused ? st.conf_elt : nullptr);
    FH_LAUNCHED("k_confidence");
    colsum(st.on.h2, B, H, st.dpre_u, st.grad_q + o.w_u, l.col, l.stream);
    if (fused) {
        reduce_final(st.conf_elt, grid, &st.dm->conf_loss, 0, (double)st.d.Bg, l.stream);
        reduce_final(st.conf_elt + grid, grid, st.grad_q + o.b_u, 0, 1.0, l.stream);
        return;
    }
    sum_to(st.conf_elt, B, &st.dm->conf_loss, (double)st.d.Bg, l.red, l.stream);
    colsum(st.dpre_u, B, 1, nullptr, st.grad_q + o.b_u, l.col, l.stream);
}

}  // namespace fh::cuda
