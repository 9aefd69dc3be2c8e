// SPEC §5.6 on the GPU, as src/cpu/adam_q.cpp: the global norm ‖g‖ of the Q-net gradient
// (TD + CQL + confidence; a fixed-grid reduction in double), then one kernel for the clip
// scale, the bias corrections 1 − β^t (t = step + 1 read on the device, float64 rounded to
// float) and Adam over the flat Q buffer (nn.cu), then the device step counter += 1 (the last
// node of the step).
#include "common.hpp"
#include "cuda_step.hpp"
#include "nn.cuh"
#include "reduce.cuh"

namespace fh::cuda {

namespace {

__global__ void k_set_u64(uint64_t *p, uint64_t v) { *p = v; }
__global__ void k_inc_u64(uint64_t *p) { *p += 1; }

}  // namespace

void adam_q(CudaStep &st, const LaneCtx &l) {
    const fh_config &c = st.cfg;
    const size_t n = st.L.q.total;
    reduce_f32(st.grad_q, n, 1, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(n), &st.dm->grad_norm, 1, 1.0, l.stream);
    adam(st.buf[BUF_Q], st.buf[BUF_Q_M], st.buf[BUF_Q_V], st.grad_q, n, c.lr_q, c.adam_beta1,
         c.adam_beta2, c.adam_eps, st.step, l.stream, &st.dm->grad_norm, c.clip_norm);
    k_inc_u64<<<1, 1, 0, l.stream>>>(st.step);
    FH_LAUNCHED("k_inc_u64");
}

void set_step_counter(uint64_t *counter, uint64_t v, cudaStream_t s) {
    k_set_u64<<<1, 1, 0, s>>>(counter, v);
    FH_LAUNCHED("k_set_u64");
}

}  // namespace fh::cuda
