// Batch upload, double-buffered with no host waits (docs/cuda.md): upload() checks the caller's
// batch while copying it into the free one of two pinned staging slots, then, on its own copy
// stream, waits for the HER child of the step in flight (HER copies every batch tensor that it
// or a later child reads, so from then on the step no longer reads the block), copies the slot
// into the graph's fixed device block and records `uploaded`, which the next launch waits on.
// A slot is reused only once the copy out of it has finished; if it has not (the host two
// uploads ahead of the GPU) upload() blocks on it, and that wait is counted
// (fh_cuda_debug_host_waits, tested to stay zero).
#pragma once
#include <foxhunt.h>

#include <cuda_runtime.h>

#include "common.hpp"
#include "config.hpp"
#include "cuda_step.hpp"

namespace fh::cuda {

class DeviceMemory;

class Uploader {
public:
    Uploader(const Dims &d, DeviceMemory &mem);
    Uploader(const Uploader &) = delete;
    Uploader &operator=(const Uploader &) = delete;
    ~Uploader() { release(); }
    void release() noexcept;

    const BatchBlock &block() const { return blk_; }
    // A refused batch leaves only the free slot written; the block, the events and the next
    // slot are unchanged.
    void upload(const fh_batch &b, cudaEvent_t her_done);
    cudaEvent_t uploaded() const { return uploaded_; }
    void sync() { FH_CUDA(cudaStreamSynchronize(copy_)); }

private:
    static constexpr int kSlots = 2;
    Dims d_;
    BatchBlock blk_;
    unsigned char *pinned_[kSlots] = {};
    int next_ = 0;
    cudaStream_t copy_ = nullptr;
    cudaEvent_t slot_free_[kSlots] = {};
    cudaEvent_t uploaded_ = nullptr;
};

}  // namespace fh::cuda
