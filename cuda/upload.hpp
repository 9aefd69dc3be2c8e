// Batch upload, double-buffered with no host waits (docs/cuda.md): upload() checks the caller's
// batch while copying it into the free one of two pinned staging slots, then, on its own copy
// stream, waits for the HER child of the step in flight (HER copies every batch tensor that it
// or a later child reads, so from then on the step no longer reads the block), copies the slot
// into the graph's fixed device block and records `uploaded`, which the next launch waits on.
// A slot is reused only once the copy out of it has finished; if it has not (the host two
// uploads ahead of the GPU) upload() blocks on it, and that wait is counted
// (fh_cuda_debug_back_pressure_waits, tested to stay zero where the GPU keeps up).
//
// The copy stream carries every call's input in call order: host and device batches here, the
// replay's inserts (replay_lane.hpp) beside them. So a step sees exactly the inputs of the calls
// made before it, whatever the GPU's timing.
#pragma once
#include <foxhunt.h>

#include <functional>

#include <cuda_runtime.h>

#include "common.hpp"
#include "config.hpp"
#include "cuda_step.hpp"
#include "device_memory.hpp"
#include "replay_device.hpp"

namespace fh::cuda {

class DeviceCheck;

// Pinned host staging reused in turn: acquire() returns the next slot once the copy out of it
// (enqueued after its previous acquire()) has run, blocking (counted) if it has not.
class StagingSlots {
public:
    StagingSlots() = default;
    StagingSlots(const StagingSlots &) = delete;
    StagingSlots &operator=(const StagingSlots &) = delete;
    ~StagingSlots() { release(); }
    void create(DeviceMemory &mem, MemCat cat, size_t bytes);
    void release() noexcept;  // the events; the memory belongs to DeviceMemory

    bool empty() const { return !slot_[0]; }
    size_t bytes() const { return bytes_; }
    unsigned char *acquire();
    // The copy out of the slot acquire() returned last is enqueued on `s`.
    void copied_on(cudaStream_t s);

private:
    static constexpr int kSlots = 2;
    unsigned char *slot_[kSlots] = {};
    cudaEvent_t free_[kSlots] = {};
    size_t bytes_ = 0;
    int next_ = 0, last_ = -1;
};

class Uploader {
public:
    // `host_slots`: whether host batches are uploaded at all (not with a replay, whose
    // pipeline refuses uploads: its batches are sampled into the block).
    Uploader(const Dims &d, DeviceMemory &mem, bool host_slots);
    Uploader(const Uploader &) = delete;
    Uploader &operator=(const Uploader &) = delete;
    ~Uploader() { release(); }
    void release() noexcept;

    const BatchBlock &block() const { return blk_; }
    // The block as the replay's kernels address it (sample, device batch copy).
    replay::BatchBlock targets() const;
    // A refused batch leaves only the free slot written; the block, the events and the next
    // slot are unchanged.
    void upload(const fh_batch &b, cudaEvent_t her_done);
    // A batch in device memory (memory = FH_MEMORY_DEVICE): after `her_done`, checked on the
    // device and copied into the block unless a check fails; `check` reports the outcome at the
    // next call (settle). `on_pass` runs then if it passed.
    void upload_device(const fh_batch &b, cudaEvent_t her_done, DeviceCheck &check, int device,
                       std::function<void()> on_pass);

    cudaStream_t stream() const { return copy_; }
    // Work enqueued on stream() since the last mark is input the next step must see.
    void mark_uploaded() { FH_CUDA(cudaEventRecord(uploaded_, copy_)); }
    cudaEvent_t uploaded() const { return uploaded_; }
    void sync() { FH_CUDA(cudaStreamSynchronize(copy_)); }

private:
    Dims d_;
    BatchBlock blk_;
    StagingSlots slots_;
    cudaStream_t copy_ = nullptr;
    cudaEvent_t uploaded_ = nullptr;
};

}  // namespace fh::cuda
