// The replay in the CUDA executor (SPEC §2.1, §5.0): the ring in device memory, the SAMPLE task
// of the step graph, and inserts on the copy stream (docs/cuda.md, "The replay and device
// input").
//
// Ordering. Inserts go on the copy stream (upload.hpp), after the event node that ends the
// sample child of the last launched step, which is the last reader of the ring until the next
// launch; the executor then records `uploaded`, which the next launch waits on. So a step
// samples the ring exactly as the calls before it left it, and the host never waits for a step
// (only, as uploads do, for a staging slot whose copy has not run yet).
//
// Host rows are checked on the host before anything is enqueued: an insert that fits one
// staging slot while it is copied into the slot (one pass over the caller's arrays, like an
// upload), a larger one in a read-only pass first (its chunks go to the ring one by one). Device
// rows are checked on the device (device_input.hpp); the append does nothing if a check failed.
#pragma once
#include <foxhunt.h>

#include <cstdint>

#include <cuda_runtime.h>

#include "config.hpp"
#include "replay.hpp"
#include "replay_device.hpp"
#include "upload.hpp"

namespace fh::cuda {

class DeviceCheck;
class DeviceMemory;

class ReplayLane {
public:
    // The ring (device memory, emptied) and the pinned staging of host inserts, counted as
    // fh_memory_report.replay; `out` is the batch block the sample writes.
    ReplayLane(const fh_config &c, const Dims &d, DeviceMemory &mem,
               const replay::BatchBlock &out);

    // Task::SAMPLE: the batch of the step whose counter is *step (device) into the block.
    void sample(const uint64_t *step, cudaStream_t s) const;

    // Rows that passed check_rows_header(), appended on `copy` after `ring_free` (the end of
    // the last launched step's sample). Host rows: refused (thrown) before anything is
    // enqueued. Device rows: checked on the device through `check`, reported at settle().
    void insert_host(const fh_replay_rows &r, cudaStream_t copy, cudaEvent_t ring_free);
    void insert_device(const fh_replay_rows &r, cudaStream_t copy, cudaEvent_t ring_free,
                       DeviceCheck &check, int device);

    // Rows inserted so far (as far as settled: a device insert counts once its check passed).
    uint64_t rows() const { return n_ins_; }
    // The valid rows, oldest first; the caller has synchronised the streams.
    ReplayImage image() const;
    // Replaces the contents by `img` (checked by the checkpoint loader) through the staging, on
    // `copy`; the caller has synchronised the streams.
    void restore(const ReplayImage &img, cudaStream_t copy);

private:
    // Rows [first, first + n) of r into the staging slot `dst` (field by field).
    void stage(const fh_replay_rows &r, uint64_t first, uint64_t n, unsigned char *dst) const;
    fh_replay_rows staged(const unsigned char *slot, uint64_t n, bool regime) const;
    // Rows already checked: the newest min(R, K) through the staging, chunk by chunk.
    void append_host(const fh_replay_rows &r, cudaStream_t copy);

    const fh_config &cfg_;
    Dims d_;
    replay::DeviceRing ring_{};
    replay::BatchBlock out_;
    StagingSlots slots_;
    uint64_t slot_rows_ = 0;              // rows one staging slot holds, in [1, K]
    size_t slot_off_[RF_COUNT] = {};      // field f's bytes in a slot
    uint64_t n_ins_ = 0;
};

}  // namespace fh::cuda
