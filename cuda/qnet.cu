// SPEC §4 on the GPU: the branching Q network (Tavakoli et al. 2018) as src/cpu/qnet.cpp: the
// two-layer SiLU trunk, per branch a SiLU hidden layer and a linear head clamped to ±q_clip,
// and the softplus confidence head on the trunk (one warp per row). The forward passes of
// ddqn.cu and act.cu run the same trunk and branch functions.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "nn.cuh"

namespace fh::cuda {

namespace {

__global__ void k_bias_clamp(float *z, float *q, const float *e, int M, int N, float clip) {
    const size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = __fadd_rn(z[i], e[i % N]);
        z[i] = v;
        q[i] = fminf(fmaxf(v, -clip), clip);
    }
}

// One warp per row.
__global__ void k_conf_head(const float *h2, const float *w_u, const float *b_u, int M, int H,
                            float *pre_u, float *u) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= M) return;
    float acc = 0;
    for (int j = lane; j < H; j += 32) acc += h2[(size_t)row * H + j] * w_u[j];
    acc = warp_sum(acc);
    if (lane == 0) {
        const float p = __fadd_rn(acc, *b_u);
        pre_u[row] = p;
        u[row] = dev_softplus(p);
    }
}

}  // namespace

void q_forward_trunk(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                     const float *x, QCache &c) {
    const int M = c.M, H = (int)d.H, D = (int)d.D;
    gemm_nt(l.blas, M, H, D, x, w.W1, c.pre1, 0.0f, "trunk x W1^T");
    bias_silu(c.pre1, c.h1, w.p + L.q.b1, M, H, l.stream);
    gemm_nt(l.blas, M, H, H, c.h1, w.W2, c.pre2, 0.0f, "trunk h1 W2^T");
    bias_silu(c.pre2, c.h2, w.p + L.q.b2, M, H, l.stream);
}

void q_forward_branch(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                      QCache &c, int b, float q_clip) {
    const int M = c.M, H = (int)d.H, HB = (int)d.HB, A = (int)d.A;
    float *preg = c.preg + (size_t)b * M * HB, *g = c.g + (size_t)b * M * HB;
    float *z = c.z + (size_t)b * M * A, *q = c.q + (size_t)b * M * A;
    gemm_nt(l.blas, M, HB, H, c.h2, w.p + L.q.V[b], preg, 0.0f, "branch h2 V^T");
    bias_silu(preg, g, w.p + L.q.c[b], M, HB, l.stream);
    gemm_nt(l.blas, M, A, HB, g, w.p + L.q.U[b], z, 0.0f, "branch g U^T");
    k_bias_clamp<<<grid_for((size_t)M * A), kThreads, 0, l.stream>>>(z, q, w.p + L.q.e[b], M, A,
                                                                    q_clip);
    FH_LAUNCHED("k_bias_clamp");
}

void forward_trunk(CudaStep &st, const LaneCtx &l) {
    const QView w = st.online_view();
    q_forward_trunk(l, st.d, st.L, w, st.x2, st.on);
    const int M = (int)st.d.B;
    const int grid = (M + kThreads / 32 - 1) / (kThreads / 32);
    k_conf_head<<<grid, kThreads, 0, l.stream>>>(st.on.h2, w.p + st.L.q.w_u, w.p + st.L.q.b_u, M,
                                                 (int)st.d.H, st.on.pre_u, st.on.u);
    FH_LAUNCHED("k_conf_head");
}

void forward_branch(CudaStep &st, const LaneCtx &l, int b) {
    q_forward_branch(l, st.d, st.L, st.online_view(), st.on, b, st.cfg.q_clip);
}

}  // namespace fh::cuda
