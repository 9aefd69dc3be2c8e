// SPEC §9 on the GPU: the sums across the ranks of a data-parallel step, through the caller's
// NCCL communicator, enqueued (and so captured into the step graph) at the points the task
// files call them:
//   IQL's gradient, before its Adam                         forward child, lane 2, beside the
//                                                           trunk backward (one branch: aux
//                                                           child, lane 0, before the fork)
//   IQN's and attention's gradients, before their Adam      aux child, lane 0, after the join
//                                                           (world = 1: none, their Adam steps
//                                                           end their lanes)
//   the regime statistics (sum, count per regime)           aux child, lane 3, regime_scale
//   the Q-net gradient and the metrics' batch sums          adam child, before ‖g‖
// Every call is one NCCL group (one launch, whatever the number of buffers), on lane 0 of its
// child, or lane 3 for the regime statistics, the aux child's only collective between its fork
// and join, or lane 2 for IQL's, the forward child's only collective: no two collectives of
// the communicator can run at the same time (NCCL forbids it; it can deadlock), and each rank
// enqueues them in the same order.
//
// Sums are in place (ncclSum over float32, or float64 where the sums are double). NCCL's
// reduction order is fixed for a fixed communicator, so the result is bitwise the same run to
// run, and every rank receives the same bits (an all-reduce broadcasts one reduced value).
// Without a communicator every call does nothing, so the graph is exactly the one of §5; with a
// communicator of one rank NCCL enqueues nothing for an in-place sum (src/device/onerank.cu):
// W = 1 is exactly §5 too.
//
// Only this file's .cpp includes nccl.h, and only when the build has NCCL (FOXHUNT_HAVE_NCCL);
// without it a communicator is refused before a pipeline exists (nccl_rank_world).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <cuda_runtime.h>

namespace fh::cuda {

// A device buffer to sum across ranks: n floats or n doubles.
struct SumBuf {
    void *p;
    size_t n;
    bool f64;
    static SumBuf f32s(float *p, size_t n) { return SumBuf{p, n, false}; }
    static SumBuf f64s(double *p, size_t n) { return SumBuf{p, n, true}; }
};

class Allreduce {
public:
    explicit Allreduce(void *comm) : comm_(comm) {}
    // Every buffer summed in place across the ranks, one NCCL group on stream `s`; nothing
    // without a communicator. Throws FH_ERR_CUDA naming the NCCL call that failed.
    void sum(std::initializer_list<SumBuf> bufs, cudaStream_t s) const;
    // Whether there is a communicator (a data-parallel step, of one rank or more).
    bool active() const { return comm_ != nullptr; }

private:
    void *comm_;  // ncclComm_t, the caller's
};

}  // namespace fh::cuda
