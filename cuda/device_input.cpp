#include "device_input.hpp"

#include <utility>

#include "common.hpp"
#include "device_memory.hpp"
#include "error.hpp"

namespace fh::cuda {

void require_device_array(const void *p, const char *what, int device) {
    cudaPointerAttributes a{};
    FH_CUDA(cudaPointerGetAttributes(&a, p));
    if (a.type == cudaMemoryTypeManaged) return;  // migrates to whichever device reads it
    if (a.type != cudaMemoryTypeDevice)
        fail(FH_ERR_BAD_VALUE, "%s = %p is not CUDA device memory (memory = FH_MEMORY_DEVICE; "
             "pass host arrays with FH_MEMORY_HOST)", what, p);
    if (a.device != device)
        fail(FH_ERR_BAD_VALUE, "%s = %p is memory of CUDA device %d, the pipeline runs on "
             "device %d", what, p, a.device, device);
}

DeviceCheck::DeviceCheck(DeviceMemory &mem) {
    // Batch staging: a device batch needs it as much as a device insert does.
    dev_ = mem.alloc_n<replay::CheckStatus>(MEM_STAGING, 1);
    host_ = static_cast<replay::CheckStatus *>(mem.pinned(MEM_STAGING, sizeof(replay::CheckStatus)));
    FH_CUDA(cudaEventCreateWithFlags(&read_, cudaEventDisableTiming));
}

void DeviceCheck::release() noexcept {
    if (read_) cudaEventDestroy(read_);
    read_ = nullptr;
}

void DeviceCheck::begin(std::vector<ElementCheck> checks, cudaStream_t s) {
    if (pending_) fail(FH_ERR_INTERNAL, "a device check was enqueued before the last one settled");
    checks_ = std::move(checks);
    replay::enqueue_checks(checks_, dev_, s);
}

void DeviceCheck::finish(cudaStream_t s, std::function<void()> on_pass) {
    FH_CUDA(cudaMemcpyAsync(host_, dev_, sizeof *host_, cudaMemcpyDeviceToHost, s));
    FH_CUDA(cudaEventRecord(read_, s));
    on_pass_ = std::move(on_pass);
    pending_ = true;
}

void DeviceCheck::settle() {
    if (!pending_) return;
    // Whatever happens below, this check is over: the next call starts afresh.
    pending_ = false;
    std::function<void()> on_pass = std::move(on_pass_);
    FH_CUDA(cudaEventSynchronize(read_));
    replay::throw_check_status(*host_, checks_);
    on_pass();
}

}  // namespace fh::cuda
