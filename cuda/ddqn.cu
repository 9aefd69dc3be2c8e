// SPEC §5.3 on the GPU: double DQN targets (van Hasselt et al. 2016) per branch, as
// src/cpu/ddqn.cpp. Lane A: the online net on x̃' and a*_b = argmax (ties: lowest index);
// lane B: the target net on [x̃; x̃'] (2B rows: its x̃ rows give Q̄sa, its x̃' rows evaluate a*
// and, through their trunk features, the confidence target of the aux child); the join: y and
// Q̄sa. Both passes run all branches at once where the config allows (qnet.cu,
// q_forward_branches_packed): the branches' weights side by side, one GEMM per layer.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "memory_plan.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

__global__ void k_argmax(const float *q, int M, int NB, int A, int32_t *out) {
    pdl_enter();
    const size_t n = (size_t)M * NB;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / NB, b = k % NB;
        out[k] = dev_first_argmax(q + b * (size_t)M * A + i * A, A);
    }
}

__global__ void k_ddqn_join(const float *qt, const int32_t *a_star, const int32_t *action,
                            const float *r, const float *done, int B, int NB, int A, float gamma,
                            float *y, float *qbar_sa) {
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B;
         i += (size_t)gridDim.x * blockDim.x) {
        double qsa = 0;
        const float coef = __fmul_rn(gamma, __fadd_rn(1.0f, -done[i]));
        for (int b = 0; b < NB; ++b) {
            const size_t ib = i * NB + b;
            const float *qb = qt + (size_t)b * 2 * B * A;
            const float qn = qb[((size_t)B + i) * A + a_star[ib]];
            y[ib] = __fadd_rn(r[i], __fmul_rn(coef, qn));
            qsa += qb[i * A + action[ib]];
        }
        qbar_sa[i] = (float)(qsa / NB);
    }
}

// One of ddqn's forward-only passes on x: its weights packed first where the config allows
// (memory_plan.hpp, ddqn_branches_packed; the trunk then reads their rounded copies, TF32 or
// bfloat16, where the lane fuses its SiLU layers), the trunk, then the branches packed
// (qnet.cu) or one after another.
void forward_pass(CudaStep &st, const LaneCtx &l, QView w, const float *x, QCache &c,
                  float *pack) {
    const bool packed = ddqn_branches_packed(st.d);
    if (packed) w = q_pack(l, st.d, st.L, w, pack);
    q_forward_trunk(l, st.d, st.L, w, x, c);
    if (packed) {
        q_forward_branches_packed(l, st.d, st.L, w, c, st.cfg.q_clip);
        return;
    }
    for (uint32_t b = 0; b < st.d.NB; ++b) q_forward_branch(l, st.d, st.L, w, c, (int)b, st.cfg.q_clip);
}

}  // namespace

void ddqn_online_next(CudaStep &st, const LaneCtx &l) {
    forward_pass(st, l, st.online_view(), st.inputs().xn, st.next, st.pack_next);
    const size_t n = (size_t)st.d.B * st.d.NB;
    FH_LAUNCH(k_argmax, grid_for(n), kThreads, 0, l.stream, st.next.q, (int)st.d.B, (int)st.d.NB,
              (int)st.d.A, st.a_star);
}

void ddqn_target(CudaStep &st, const LaneCtx &l) {
    forward_pass(st, l, st.target_view(), st.x2, st.tgt, st.pack_tgt);
}

void ddqn_join(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    FH_LAUNCH(k_ddqn_join, grid_for(d.B), kThreads, 0, l.stream, st.tgt.q, st.a_star, st.action,
              st.r, st.done_f, (int)d.B, (int)d.NB, (int)d.A, st.cfg.gamma, st.y, st.qbar_sa);
}

}  // namespace fh::cuda
