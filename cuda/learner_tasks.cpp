// SPEC §5.5 steps 2–4 as tasks of the aux child: the learners of learners.hpp on their lanes,
// with the sums of their gradients across the ranks of a data-parallel step (SPEC §9,
// allreduce.hpp) before their Adam steps:
//   lane 0:  IQL loss and gradient, its all-reduce, its Adam (V_hi's update precedes nothing
//            else that reads it: ω and v_hi were written before)
//   lane 1:  IQN loss and gradient          lane 2: attention loss and gradient
//   join, lane 0 (learner_adam): both gradients' all-reduce (one NCCL group), both Adam steps.
// The two Adam steps wait for the join even without a communicator: one schedule for both
// cases, and an Adam over ~10^5 floats adds microseconds to lane 0.
#include "cuda_step.hpp"

namespace fh::cuda {

void learner_iql(CudaStep &s, const LaneCtx &l) {
    s.iql->enqueue_loss_grad(l.lane(), s.inputs(), s.v_hi, s.v_lo, s.omega, s.dm->iql_loss);
    s.dp.sum({SumBuf::f32s(s.iql->grad_device(), s.iql->grad_floats())}, l.stream);
    s.iql->enqueue_adam(l.lane(), s.step);
}

void learner_iqn(CudaStep &s, const LaneCtx &l) {
    s.iqn->enqueue_loss_grad(l.lane(), s.inputs(), s.z_mean, &s.dm->iqn_loss);
}

void learner_attention(CudaStep &s, const LaneCtx &l) {
    s.attn->enqueue_loss_grad(l.lane(), s.inputs(), &s.dm->attn_loss);
}

void learner_adam(CudaStep &s, const LaneCtx &l) {
    s.dp.sum({SumBuf::f32s(s.iqn->grad_device(), s.iqn->grad_floats()),
              SumBuf::f32s(s.attn->grad_device(), s.attn->grad_floats())},
             l.stream);
    s.iqn->enqueue_adam(l.lane(), s.step);
    s.attn->enqueue_adam(l.lane(), s.step);
}

}  // namespace fh::cuda
