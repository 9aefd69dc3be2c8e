// SPEC §5.5 step 7 on the GPU, as src/cpu/confidence.cpp: the confidence head trained with
// the uncertainty Bellman equation (O'Donoghue et al. 2018), target s² + γ²(1 − d̃) ū(x̃') with
// ū from the target trunk features of x̃' (ddqn's target pass, before the EMA) and the target
// head after the EMA; the gradient goes into w_u and b_u only.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "reduce.cuh"

namespace fh::cuda {

namespace {

// One warp per row: the double dot of the target trunk features with the target head.
__global__ void k_confidence(const float *h2t_next, const float *wt_u, const float *bt_u,
                             const float *var, const float *done, const float *u,
                             const float *pre_u, int B, int H, float gamma, float *dpre,
                             double *loss_elt, float *conf) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= B) return;
    double acc = 0;
    for (int j = lane; j < H; j += 32) acc += (double)h2t_next[(size_t)row * H + j] * wt_u[j];
    acc = warp_sum(acc);
    if (lane != 0) return;
    const float ubar = dev_softplus(__fadd_rn((float)acc, *bt_u));
    const float g2 = __fmul_rn(gamma, gamma);
    const float t = __fadd_rn(var[row], __fmul_rn(__fmul_rn(g2, __fadd_rn(1.0f, -done[row])), ubar));
    const float uu = u[row];
    const float e = __fadd_rn(uu, -t);
    loss_elt[row] = 0.5 * (double)e * e;
    dpre[row] = __fmul_rn(__fdiv_rn(e, (float)B), dev_sigmoid(pre_u[row]));
    conf[row] = __fdiv_rn(1.0f, __fadd_rn(1.0f, sqrtf(uu)));
}

}  // namespace

void confidence(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B, H = (int)st.d.H;
    const QOffsets &o = st.L.q;
    const float *wt = st.buf[BUF_Q_TARGET];
    const int grid = (B + kThreads / 32 - 1) / (kThreads / 32);
    k_confidence<<<grid, kThreads, 0, l.stream>>>(st.tgt.h2 + (size_t)B * H, wt + o.w_u, wt + o.b_u,
                                                  st.buf[BUF_ENS_VAR], st.done_f, st.on.u,
                                                  st.on.pre_u, B, H, st.cfg.gamma, st.dpre_u,
                                                  st.conf_elt, st.buf[BUF_CONFIDENCE]);
    FH_LAUNCHED("k_confidence");
    sum_to(st.conf_elt, B, &st.dm->conf_loss, (double)B, l.red, l.stream);
    colsum(st.on.h2, B, H, st.dpre_u, st.grad_q + o.w_u, l.col, l.stream);
    colsum(st.dpre_u, B, 1, nullptr, st.grad_q + o.b_u, l.col, l.stream);
}

}  // namespace fh::cuda
