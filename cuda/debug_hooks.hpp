// The executor's side of the test hooks in debug_hooks.h: what a pipeline publishes about itself
// for the tests (its batch block, FH_MATH_BF16's rounded operands, its IQL learner, its child
// graphs' node counts and the event after its last launched step) and withdraws when it is
// destroyed. The tests read the most recently created pipeline's; nothing here changes a step.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#include "replay_device.hpp"
#include "schedule.hpp"

namespace fh::cuda::hooks {

// debug_hooks.h's fh_cuda_debug_bf16_operands pairs: device pointers and float counts.
struct Bf16Operands {
    const float *ptr[6] = {};
    size_t count[6] = {};
};

// At creation, before the eager run: `owner` becomes the pipeline the hooks describe.
void publish_pipeline(const void *owner, const replay::BatchBlock &block, const Bf16Operands &ops,
                      int iql_gemm_mode, const float *iql_grad, size_t iql_grad_floats);
// After capturing child `id`.
void publish_child_nodes(ChildId id, long nodes);
// After a step's launches: `done` is recorded after the last one.
void step_launched(const void *owner, cudaEvent_t done);
// At release: forgets what `owner` published (another pipeline's stays).
void withdraw(const void *owner);

}  // namespace fh::cuda::hooks
