// Input in device memory (include/foxhunt.h, "Device memory"): a call that passes device arrays
// enqueues their element checks (SPEC §8, §2.1) and the work that depends on them on the copy
// stream, and returns. The next call on the pipeline settles it: waits until the device has
// read the arrays (so the caller may reuse them once that call returns), and throws, with the
// status and message the same host input gets, if a check failed — in which case the dependent
// work did nothing (each of its kernels reads the status record first).
//
// One check is pending at most: every entry point settles before it enqueues anything.
#pragma once
#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "element_check.hpp"
#include "replay_device.hpp"

namespace fh::cuda {

class DeviceMemory;

// Throws FH_ERR_BAD_VALUE naming `what` unless `p` is device or managed memory of `device`
// (cudaPointerGetAttributes): host memory would fault in the kernels, or be read by another GPU.
void require_device_array(const void *p, const char *what, int device);

class DeviceCheck {
public:
    explicit DeviceCheck(DeviceMemory &mem);  // the status record and its pinned copy
    DeviceCheck(const DeviceCheck &) = delete;
    DeviceCheck &operator=(const DeviceCheck &) = delete;
    ~DeviceCheck() { release(); }
    void release() noexcept;

    // Enqueues `checks` (device arrays; the names and shapes stay on the host for the message)
    // on `s`. The dependent work follows on `s`, conditional on status(); then finish().
    void begin(std::vector<ElementCheck> checks, cudaStream_t s);
    const replay::CheckStatus *status() const { return dev_; }
    // The outcome to the host and "arrays read" on `s`; `on_pass` runs at settle() if every
    // element passed.
    void finish(cudaStream_t s, std::function<void()> on_pass);

    bool pending() const { return pending_; }
    // If a check is pending: waits for it, then throws its refusal or runs its on_pass.
    void settle();

private:
    replay::CheckStatus *dev_ = nullptr, *host_ = nullptr;
    cudaEvent_t read_ = nullptr;
    std::vector<ElementCheck> checks_;
    std::function<void()> on_pass_;
    bool pending_ = false;
};

}  // namespace fh::cuda
