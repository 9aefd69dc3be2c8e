// What an executor provides. The pipeline (api.cpp) does argument checking, the step and act
// counters, names and checkpoints; a backend owns the buffers of the layout and runs the step.
#pragma once
#include <foxhunt.h>
#include <cstdint>
#include <memory>

#include "batch.hpp"
#include "guard.hpp"
#include "init.hpp"
#include "layout.hpp"
#include "replay.hpp"
#include "schedule.hpp"

namespace fh {

// The step's scalar outputs into fh_metrics, from either executor's record of them (the CPU's
// StepScalars, CUDA's DevMetrics copied to the host: the same field names). The caller adds
// the regime scales and the counters the API keeps.
template <class Scalars>
void copy_step_metrics(const Scalars &s, uint32_t num_regimes, fh_metrics *m) {
    *m = fh_metrics{};
    m->td_loss = s.td_loss;
    m->q_mean = s.q_mean;
    m->cql_loss = s.cql_loss;
    m->iql_loss_hi = s.iql_loss[0];
    m->iql_loss_lo = s.iql_loss[1];
    m->iqn_loss = s.iqn_loss;
    m->attn_loss = s.attn_loss;
    m->conf_loss = s.conf_loss;
    m->grad_norm = s.grad_norm;
    for (int k = 0; k < 2; ++k) {
        m->sigma[k] = s.sigma[k];
        m->sigma_target[k] = s.sigma_t[k];
    }
    m->ensemble_std = s.ensemble_std;
    m->num_relabelled = (uint32_t)s.relabelled;  // a float sum on CUDA, exact below 2^24
    m->num_regimes = num_regimes;
}

class Backend {
public:
    virtual ~Backend() = default;
    // Takes a batch whose header check_batch_header() accepted (the caller's arrays, valid for
    // this call only): pack_batch() checks its elements while copying them into a buffer that
    // is not in use, so a refused batch leaves the previous one in place. The step after this
    // call trains on it.
    virtual void upload(const fh_batch &batch) = 0;
    // Whether a batch was accepted: a host upload, or a device batch whose check passed (known
    // after settle()). Steps of a pipeline without a replay need one.
    virtual bool has_batch() const = 0;
    // One training step; `step` = steps completed before it (SPEC §3). With a replay the step
    // first draws its batch from it (SPEC §5.0); the pipeline calls it only when
    // replay_rows() >= 1.
    virtual void step(uint64_t step) = 0;
    // `k` steps from `step` on, as k calls of step() (the default); all or nothing when one
    // fails (only the first step ever can: it allocates).
    virtual void train(uint64_t step, uint32_t k);

    // The replay (SPEC §2.1); the pipeline calls these only when its config has one.
    // Rows that passed read_rows() and check_rows_header(), host or device memory.
    virtual void insert(const fh_replay_rows &rows) = 0;
    virtual uint64_t replay_rows() const = 0;  // rows inserted so far (0 without a replay)
    virtual ReplayImage replay_image() = 0;
    virtual void restore_replay(const ReplayImage &img) = 0;  // checked by the checkpoint loader
    // A batch in device memory that passed check_batch_header() (memory = FH_MEMORY_DEVICE).
    virtual void upload_device(const fh_batch &batch) = 0;
    // Called first by every entry point that takes the pipeline: waits until the device has
    // read the device arrays of earlier calls, and throws the refusal of one whose check failed
    // there (include/foxhunt.h, "Device memory"). Default: nothing is ever pending.
    virtual void settle() {}
    // Waits for all queued work (after settle()). Default: nothing is queued.
    virtual void sync() {}

    // SPEC §7; `act_call` is the 0-based number of this act call.
    virtual void act(const float *obs, const float *goal, uint32_t n, float epsilon,
                     uint64_t act_call, int32_t *actions, float *q_values) = 0;
    // Whole or partial copies of a buffer of the layout (waits for outstanding work).
    virtual void read(Buf b, size_t offset, size_t count, float *out) = 0;
    virtual void write(Buf b, size_t offset, size_t count, const float *in) = 0;
    virtual void metrics(fh_metrics *m) = 0;   // struct_size already checked
    virtual void timings(fh_timings *t) = 0;
    virtual void memory(fh_memory_report *r) const = 0;
    virtual void dump_graph(const char *path);  // default: FH_ERR_NO_CUDA
    // The divergence guard's counters (guard.hpp), after outstanding work; @p clear starts a
    // new pending report. Default: an executor that does not run the guard (available = false).
    virtual GuardReport guard_report(bool clear);
};

std::unique_ptr<Backend> make_cpu_backend(const fh_config &c, const Layout &L, HostBuffers init);

// Defined in the CUDA build only; elsewhere a stub that fails with FH_ERR_NO_CUDA.
bool cuda_available(int device);
// Free device memory of CUDA device @p device now (cudaMemGetInfo), for the check before
// creation (memory_plan.hpp).
uint64_t cuda_free_bytes(int device);
std::unique_ptr<Backend> make_cuda_backend(const fh_config &c, const Layout &L, HostBuffers init);

// SPEC §9: rank and size of the NCCL communicator `comm` (an ncclComm_t), which must live on
// CUDA device `device` (FH_ERR_BAD_VALUE otherwise). Defined in cuda/allreduce.cpp; in a build
// without NCCL (or without CUDA) it fails with FH_ERR_UNSUPPORTED.
void nccl_rank_world(void *comm, int device, uint32_t *rank, uint32_t *world);

}  // namespace fh
