// The divergence guard on the device (src/guard.hpp; docs/cuda.md, "Divergence guard"). The
// CPU executor's GUARD_SNAPSHOT and GUARD_CHECK tasks, as kernels that capture into the step
// graph (two snapshot parts, then the check's three) and decide on the device, with no host
// synchronisation:
//   snapshot(part): copies the persistent buffers of one part of the snapshot (guard.hpp's
//     snapshot_part) into a shadow copy (one kernel);
//   check(): finds the first non-finite quantity in guard.hpp's order, the step's scalars then
//     the persistent buffers end to end (a fixed-grid min-index reduction: exact, no atomics,
//     the same result whatever the schedule), updates the counters, and copies the shadow back
//     when there is one (the restore kernel returns at once when there is none). The search's
//     one-block final pass also advances the step counter (adam_q.cu leaves it to it; the
//     restore never touches the counter).
// report() reads the counters back (the caller has synchronised the step's streams).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "guard.hpp"

namespace fh::cuda {

class DivergenceGuard {
public:
    // @p bufs, @p sizes: the NUM_PERSISTENT persistent buffers of the layout (device, floats);
    // @p scalars: device addresses of the step's NUM_GUARD_SCALARS scalars, GuardScalar order;
    // @p step: the device step counter; check() increments it (the step's last ADAM_Q work)
    // and records the incremented value (= this step's number).
    DivergenceGuard(float *const bufs[], const size_t sizes[], const float *const scalars[],
                    uint64_t *step);
    ~DivergenceGuard();
    DivergenceGuard(const DivergenceGuard &) = delete;
    DivergenceGuard &operator=(const DivergenceGuard &) = delete;

    void snapshot(cudaStream_t s, int part);  // Task::GUARD_SNAPSHOT, part kSnapshot*
    void check(cudaStream_t s);     // Task::GUARD_CHECK
    // Synchronous copies on the legacy stream: call after the step's streams are synchronised.
    GuardReport report(bool clear);
    // Zero every counter: after the executor's eager run before capture, which runs the
    // schedule on zeroed buffers (non-finite there, e.g. a spectral norm of 0) and is no step.
    void reset_counters();
    size_t bytes() const;  // device memory held: the shadow copy and kScratchBytes

    static constexpr size_t kScratchBytes = 64 * 1024;  // memory_plan.cpp counts this
    struct Dev;  // the device-side state (guard.cu), public for its kernels

private:
    float *shadow_ = nullptr;
    unsigned char *scratch_ = nullptr;
    size_t shadow_floats_ = 0;
    uint64_t total_ = 0;  // persistent elements
    // Per part (kSnapshotSpectral, kSnapshotRest): its buffers as bits, its copy's grid.
    uint32_t part_mask_[2] = {0, 0};
    int copy_blocks_[2] = {1, 1};
};

}  // namespace fh::cuda
