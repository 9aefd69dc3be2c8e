// SPEC §5.6 on the GPU, as src/cpu/adam_q.cpp: in a data-parallel step (SPEC §9) first the
// sum across the ranks of the Q-net gradient and of the metrics' batch sums (one NCCL group;
// allreduce.hpp), then the global norm ‖g‖ of the Q-net gradient
// (TD + CQL + confidence; a fixed-grid reduction in double), then one kernel for the clip
// scale, the bias corrections 1 − β^t (t = step + 1 read on the device, float64 rounded to
// float) and Adam over the flat Q buffer (nn.cu), Adam summing the norm's partials itself; the
// device step counter += 1 is left to GUARD_CHECK's final search block (guard.cu), which the
// schedule runs right after this task in the same child on every config (schedule.cpp). Why:
// the adam child was 7 kernels in a chain, launch latency more than work; with the final sum
// and the increment folded into the kernels beside them it is 5, with the same bits: adam child
// 0.030 → 0.024 ms at B = 16384 (TF32, multi- and single-stream, H200;
// bench/results/h200-2026-12-02-adam-folded-before-after.json).
#include "common.hpp"
#include "cuda_step.hpp"
#include "nn.cuh"
#include "reduce.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

__global__ void k_set_u64(uint64_t *p, uint64_t v) {
    pdl_enter();
    *p = v;
}

}  // namespace

void adam_q(CudaStep &st, const LaneCtx &l) {
    const fh_config &c = st.cfg;
    const size_t n = st.L.q.total;
    st.dp.sum({SumBuf::f32s(st.grad_q, n), SumBuf::f32s(&st.dm->td_loss, kSummedMetrics)},
              l.stream);
    reduce_f32(st.grad_q, n, 1, l.red, l.stream);
    adam(st.buf[BUF_Q], st.buf[BUF_Q_M], st.buf[BUF_Q_V], st.grad_q, n, c.lr_q, c.adam_beta1,
         c.adam_beta2, c.adam_eps, st.step, l.stream,
         NormPartials{l.red, reduce_blocks(n), &st.dm->grad_norm}, c.clip_norm);
}

void set_step_counter(uint64_t *counter, uint64_t v, cudaStream_t s) {
    FH_LAUNCH(k_set_u64, 1, 1, 0, s, counter, v);
}

}  // namespace fh::cuda
