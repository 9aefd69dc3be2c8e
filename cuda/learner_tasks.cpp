// SPEC §5.5 steps 2–4 as tasks: the learners of learners.hpp on their lanes, with the sums of
// their gradients across the ranks of a data-parallel step (SPEC §9, allreduce.hpp) before
// their Adam steps:
//   IQL (forward child, lane 2, beside the trunk backward; aux child, lane 0, with one branch:
//        schedule.cpp): loss and gradient, its all-reduce, its Adam (V_hi's update precedes
//        nothing else that reads it: ω and v_hi were written before)
//   aux child, lane 1: IQN loss, then its gradient (two tasks: schedule.cpp may run the tail
//        between them), its Adam   lane 2: attention loss and gradient, its Adam
// In a data-parallel step (world > 1) the two Adam steps wait for the join instead, on lane 0
// after both gradients' all-reduce (one NCCL group, on lane 0: no collective runs on the
// learners' lanes).
#include "cuda_step.hpp"
#include "schedule.hpp"

namespace fh::cuda {

void learner_iql(CudaStep &s, const LaneCtx &l) {
    s.iql->enqueue_loss_grad(l.lane(), s.inputs(), s.v_hi, s.v_lo, s.omega, s.dm->iql_loss);
    s.dp.sum({SumBuf::f32s(s.iql->grad_device(), s.iql->grad_floats())}, l.stream);
    s.iql->enqueue_adam(l.lane(), s.step);
}

void learner_iqn(CudaStep &s, const LaneCtx &l) {
    s.iqn->enqueue_loss(l.lane(), s.inputs(), s.z_mean, &s.dm->iqn_loss);
}

void learner_iqn_backward(CudaStep &s, const LaneCtx &l) {
    s.iqn->enqueue_grad(l.lane(), s.inputs());
}

void learner_attention(CudaStep &s, const LaneCtx &l) {
    s.attn->enqueue_loss_grad(l.lane(), s.inputs(), &s.dm->attn_loss);
}

void learner_adam(CudaStep &s, const LaneCtx &l, int learners) {
    // After the join (a data-parallel step) both gradients are summed in one group first. On
    // the learners' own lanes (world = 1) there is nothing to sum, and no collective may run
    // beside the other lanes.
    if (learners == (kAdamIqn | kAdamAttention))
        s.dp.sum({SumBuf::f32s(s.iqn->grad_device(), s.iqn->grad_floats()),
                  SumBuf::f32s(s.attn->grad_device(), s.attn->grad_floats())},
                 l.stream);
    if (learners & kAdamIqn) s.iqn->enqueue_adam(l.lane(), s.step);
    if (learners & kAdamAttention) s.attn->enqueue_adam(l.lane(), s.step);
}

}  // namespace fh::cuda
