#include "upload.hpp"

#include <atomic>

#include "batch.hpp"
#include "common.hpp"
#include "debug_hooks.h"
#include "device_memory.hpp"

namespace fh::cuda {

namespace {
std::atomic<uint64_t> g_host_waits{0};
}  // namespace

Uploader::Uploader(const Dims &d, DeviceMemory &mem) : d_(d) {
    // The block: floats, then int32, then bytes, each field 256-byte aligned.
    auto place = [&](size_t bytes) {
        const size_t off = blk_.bytes;
        blk_.bytes += (bytes + 255) / 256 * 256;
        return off;
    };
    const size_t B = d.B;
    blk_.obs = place(B * d.O * 4);
    blk_.next_obs = place(B * d.O * 4);
    blk_.reward = place(B * 4);
    blk_.goal = place(B * d.G * 4);
    blk_.nag = place(B * d.G * 4);
    blk_.her_goal = place(B * d.G * 4);
    blk_.action = place(B * d.NB * 4);
    blk_.regime = place(B * 4);
    blk_.done = place(B);
    try {
        FH_CUDA(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
        for (cudaEvent_t &e : slot_free_)
            FH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        FH_CUDA(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
        blk_.dev = static_cast<unsigned char *>(mem.alloc(MEM_STAGING, blk_.bytes));
        for (unsigned char *&p : pinned_)
            p = static_cast<unsigned char *>(mem.pinned(MEM_STAGING, blk_.bytes));
    } catch (...) {
        release();
        throw;
    }
}

void Uploader::release() noexcept {
    if (copy_) {
        cudaStreamSynchronize(copy_);
        cudaStreamDestroy(copy_);
    }
    copy_ = nullptr;
    for (cudaEvent_t &e : slot_free_) {
        if (e) cudaEventDestroy(e);
        e = nullptr;
    }
    if (uploaded_) cudaEventDestroy(uploaded_);
    uploaded_ = nullptr;
}

void Uploader::upload(const fh_batch &b, cudaEvent_t her_done) {
    const int s = next_;
    const cudaError_t q = cudaEventQuery(slot_free_[s]);
    if (q == cudaErrorNotReady) {
        // The copy out of this slot (two uploads ago) has not run yet: the host is ahead of the
        // GPU by more than the double buffer. Back-pressure, counted for the no-sync test.
        g_host_waits.fetch_add(1);
        FH_CUDA(cudaEventSynchronize(slot_free_[s]));
    } else if (q != cudaSuccess) {
        FH_CUDA(q);
    }
    // Checked and copied from the caller's arrays into the free pinned slot in one host pass.
    unsigned char *h = pinned_[s];
    pack_batch(d_, b,
               BatchDst{(float *)(h + blk_.obs), (float *)(h + blk_.goal),
                        (float *)(h + blk_.reward), (float *)(h + blk_.next_obs),
                        (float *)(h + blk_.nag), (float *)(h + blk_.her_goal),
                        (int32_t *)(h + blk_.action), (int32_t *)(h + blk_.regime),
                        (uint8_t *)(h + blk_.done)});
    FH_CUDA(cudaStreamWaitEvent(copy_, her_done, 0));
    FH_CUDA(cudaMemcpyAsync(blk_.dev, h, blk_.bytes, cudaMemcpyHostToDevice, copy_));
    FH_CUDA(cudaEventRecord(slot_free_[s], copy_));
    FH_CUDA(cudaEventRecord(uploaded_, copy_));
    next_ = (s + 1) % kSlots;
}

}  // namespace fh::cuda

extern "C" uint64_t fh_cuda_debug_host_waits(void) { return fh::cuda::g_host_waits.load(); }
