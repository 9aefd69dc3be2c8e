#include "upload.hpp"

#include <utility>

#include "batch.hpp"
#include "common.hpp"
#include "device_input.hpp"
#include "sync_points.hpp"

namespace fh::cuda {

void StagingSlots::create(DeviceMemory &mem, MemCat cat, size_t bytes) {
    bytes_ = bytes;
    for (cudaEvent_t &e : free_) FH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (unsigned char *&p : slot_) p = static_cast<unsigned char *>(mem.pinned(cat, bytes));
}

void StagingSlots::release() noexcept {
    for (cudaEvent_t &e : free_) {
        if (e) cudaEventDestroy(e);
        e = nullptr;
    }
}

unsigned char *StagingSlots::acquire() {
    const int s = next_;
    // Blocks (and counts) only when the copy out of this slot, two uses ago, has not run yet:
    // the host ahead of the GPU by more than the double buffer (sync_points.hpp).
    back_pressure_wait(free_[s]);
    last_ = s;
    return slot_[s];
}

void StagingSlots::copied_on(cudaStream_t s) {
    FH_CUDA(cudaEventRecord(free_[last_], s));
    next_ = (last_ + 1) % kSlots;
}

Uploader::Uploader(const Dims &d, DeviceMemory &mem, bool host_slots) : d_(d) {
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
        FH_CUDA(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
        blk_.dev = static_cast<unsigned char *>(mem.alloc(MEM_STAGING, blk_.bytes));
        if (host_slots) slots_.create(mem, MEM_STAGING, blk_.bytes);
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
    slots_.release();
    if (uploaded_) cudaEventDestroy(uploaded_);
    uploaded_ = nullptr;
}

replay::BatchBlock Uploader::targets() const {
    unsigned char *p = blk_.dev;
    return replay::BatchBlock{(float *)(p + blk_.obs),      (float *)(p + blk_.next_obs),
                              (float *)(p + blk_.reward),   (float *)(p + blk_.goal),
                              (float *)(p + blk_.nag),      (float *)(p + blk_.her_goal),
                              (int32_t *)(p + blk_.action), (int32_t *)(p + blk_.regime),
                              (uint8_t *)(p + blk_.done)};
}

void Uploader::upload(const fh_batch &b, cudaEvent_t her_done) {
    if (slots_.empty()) fail(FH_ERR_INTERNAL, "host upload to a pipeline with a replay");
    // Checked and copied from the caller's arrays into the free pinned slot in one host pass.
    unsigned char *h = slots_.acquire();
    pack_batch(d_, b,
               BatchDst{(float *)(h + blk_.obs), (float *)(h + blk_.goal),
                        (float *)(h + blk_.reward), (float *)(h + blk_.next_obs),
                        (float *)(h + blk_.nag), (float *)(h + blk_.her_goal),
                        (int32_t *)(h + blk_.action), (int32_t *)(h + blk_.regime),
                        (uint8_t *)(h + blk_.done)});
    FH_CUDA(cudaStreamWaitEvent(copy_, her_done, 0));
    FH_CUDA(cudaMemcpyAsync(blk_.dev, h, blk_.bytes, cudaMemcpyHostToDevice, copy_));
    slots_.copied_on(copy_);
    mark_uploaded();
    planted_sync(PlantAt::UPLOAD, copy_);
}

void Uploader::upload_device(const fh_batch &b, cudaEvent_t her_done, DeviceCheck &check,
                             int device, std::function<void()> on_pass) {
    const std::vector<ElementCheck> checks = batch_checks(d_, b);
    for (const ElementCheck &c : checks) require_device_array(c.data, c.name, device);
    FH_CUDA(cudaStreamWaitEvent(copy_, her_done, 0));
    check.begin(checks, copy_);
    replay::enqueue_batch_copy(d_, b, check.status(), targets(), copy_);
    check.finish(copy_, std::move(on_pass));
    mark_uploaded();
    planted_sync(PlantAt::UPLOAD, copy_);
}

}  // namespace fh::cuda
