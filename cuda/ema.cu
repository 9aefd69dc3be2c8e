// SPEC §5.5 step 1 on the GPU, as src/cpu/ema.cpp: Polyak averaging of the target nets,
// θ̄ ← τθ + (1−τ)θ̄ (the CPU's float expression, unfused), for the Q net (confidence head
// included) and the IQN net, with the online weights before this step's Adam.
#include "common.hpp"
#include "cuda_step.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

__global__ void k_polyak(float *t, const float *o, size_t n, float tau) {
    pdl_enter();
    const float keep = __fadd_rn(1.0f, -tau);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        t[i] = __fadd_rn(__fmul_rn(tau, o[i]), __fmul_rn(keep, t[i]));
}

// θ̄ ← τθ + (1−τ)θ̄ over n floats.
void polyak(float *target, const float *online, size_t n, float tau, cudaStream_t s) {
    FH_LAUNCH(k_polyak, grid_for(n), kThreads, 0, s, target, online, n, tau);
}

}  // namespace

void ema_targets(CudaStep &st, const LaneCtx &l) {
    polyak(st.buf[BUF_Q_TARGET], st.buf[BUF_Q], st.L.q.total, st.cfg.ema_tau, l.stream);
    polyak(st.buf[BUF_IQN_TARGET], st.buf[BUF_IQN], st.L.iqn.total, st.cfg.ema_tau, l.stream);
}

}  // namespace fh::cuda
