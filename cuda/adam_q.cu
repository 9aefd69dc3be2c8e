// SPEC §5.6 on the GPU, as src/cpu/adam_q.cpp: the global norm ‖g‖ of the Q-net gradient
// (TD + CQL + confidence; a fixed-grid reduction in double), the clip scale and the bias
// corrections 1 − β^t (t = step + 1 read on the device, float64 rounded to float), Adam over
// the flat Q buffer, and the device step counter += 1 (the last node of the step).
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "reduce.cuh"

namespace fh::cuda {

namespace {

__global__ void k_set_u64(uint64_t *p, uint64_t v) { *p = v; }
__global__ void k_inc_u64(uint64_t *p) { *p += 1; }

__global__ void k_adam_prep(const float *norm, float clip, const uint64_t *step, float beta1,
                            float beta2, AdamScalars *out) {
    const float nrm = *norm;
    const double t = (double)(*step + 1);
    out->scale = nrm > clip ? __fdiv_rn(clip, nrm) : 1.0f;
    out->bc1 = (float)(1.0 - pow((double)beta1, t));
    out->bc2 = (float)(1.0 - pow((double)beta2, t));
}

__global__ void k_adam(float *p, float *m, float *v, const float *g, size_t n, float lr,
                       float beta1, float beta2, float eps, const AdamScalars *sc) {
    const float scale = sc->scale, bc1 = sc->bc1, bc2 = sc->bc2;
    const float ob1 = __fadd_rn(1.0f, -beta1), ob2 = __fadd_rn(1.0f, -beta2);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adam_update(p[i], m[i], v[i], __fmul_rn(g[i], scale), lr, beta1, beta2, ob1, ob2, bc1,
                    bc2, eps);
}

}  // namespace

void adam_q(CudaStep &st, const LaneCtx &l) {
    const fh_config &c = st.cfg;
    const size_t n = st.L.q.total;
    reduce_f32(st.grad_q, n, 1, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(n), &st.dm->grad_norm, 1, 1.0, l.stream);
    k_adam_prep<<<1, 1, 0, l.stream>>>(&st.dm->grad_norm, c.clip_norm, st.step, c.adam_beta1,
                                       c.adam_beta2, &st.dm->adam);
    FH_LAUNCHED("k_adam_prep");
    k_adam<<<grid_for(n), kThreads, 0, l.stream>>>(st.buf[BUF_Q], st.buf[BUF_Q_M], st.buf[BUF_Q_V],
                                                   st.grad_q, n, c.lr_q, c.adam_beta1,
                                                   c.adam_beta2, c.adam_eps, &st.dm->adam);
    FH_LAUNCHED("k_adam");
    k_inc_u64<<<1, 1, 0, l.stream>>>(st.step);
    FH_LAUNCHED("k_inc_u64");
}

void set_step_counter(uint64_t *counter, uint64_t v, cudaStream_t s) {
    k_set_u64<<<1, 1, 0, s>>>(counter, v);
    FH_LAUNCHED("k_set_u64");
}

}  // namespace fh::cuda
