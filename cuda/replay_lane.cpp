#include "replay_lane.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common.hpp"
#include "device_input.hpp"
#include "device_memory.hpp"
#include "error.hpp"

namespace fh::cuda {

namespace {
// Bytes of one pinned staging slot (two are allocated): large enough that an insert's fixed
// costs (a copy per field, two small kernels) are small beside its bytes, small enough to pin
// without a thought. A row larger than this gets a slot of one row.
constexpr size_t kSlotBytes = 16u << 20;
size_t up256(size_t n) { return (n + 255) / 256 * 256; }
}  // namespace

ReplayLane::ReplayLane(const fh_config &c, const Dims &d, DeviceMemory &mem,
                       const replay::BatchBlock &out)
    : cfg_(c), d_(d), out_(out) {
    ring_ = replay::ring_at(d, mem.alloc(MEM_REPLAY, replay::ring_bytes(d)));
    // alloc() zeroed the ring on the legacy stream; the reset follows it there.
    replay::ring_reset(ring_, 0);
    FH_CUDA(cudaStreamSynchronize(0));
    size_t row = 0;
    for (int f = 0; f < RF_COUNT; ++f) row += (size_t)d.E * row_field_bytes(d, f);
    slot_rows_ = std::clamp<uint64_t>(kSlotBytes / row, 1, d.K);
    size_t bytes = 0;
    for (int f = 0; f < RF_COUNT; ++f) {
        slot_off_[f] = bytes;
        bytes += up256(slot_rows_ * d.E * row_field_bytes(d, f));
    }
    slots_.create(mem, MEM_REPLAY, bytes);
}

void ReplayLane::sample(const uint64_t *step, cudaStream_t s) const {
    // row0 = 0: SPEC §9's rank offset of a pipeline that is not one of several ranks.
    replay::enqueue_sample(ring_, cfg_.seed, step, 0, d_.B, out_, nullptr, s);
}

void ReplayLane::stage(const fh_replay_rows &r, uint64_t first, uint64_t n,
                       unsigned char *dst) const {
    for (int f = 0; f < RF_COUNT; ++f) {
        const size_t rb = (size_t)d_.E * row_field_bytes(d_, f);
        const void *src = row_field(r, f);
        if (rb && src) memcpy(dst + slot_off_[f], (const uint8_t *)src + first * rb, n * rb);
    }
}

fh_replay_rows ReplayLane::staged(const unsigned char *slot, uint64_t n, bool regime) const {
    const void *at[RF_COUNT];
    for (int f = 0; f < RF_COUNT; ++f)
        at[f] = row_field_bytes(d_, f) ? slot + slot_off_[f] : nullptr;
    fh_replay_rows v = FH_REPLAY_ROWS_INIT;
    v.num_rows = (uint32_t)n;
    v.num_envs = d_.E;
    v.obs = (const float *)at[RF_OBS];
    v.goal = (const float *)at[RF_GOAL];
    v.action = (const int32_t *)at[RF_ACTION];
    v.reward = (const float *)at[RF_REWARD];
    v.done = (const uint8_t *)at[RF_DONE];
    v.next_obs = (const float *)at[RF_NEXT_OBS];
    v.next_achieved_goal = (const float *)at[RF_NAG];
    v.regime = regime ? (const int32_t *)at[RF_REGIME] : nullptr;  // absent: zeros
    v.episode_end = (const uint8_t *)at[RF_EPISODE_END];
    return v;
}

void ReplayLane::insert_host(const fh_replay_rows &r, cudaStream_t copy, cudaEvent_t ring_free) {
    const std::vector<ElementCheck> checks = rows_checks(d_, r);
    const uint64_t R = r.num_rows;
    if (R > slot_rows_) {
        check_elements(checks);
        FH_CUDA(cudaStreamWaitEvent(copy, ring_free, 0));
        append_host(r, copy);
        return;
    }
    // R <= slot_rows_ <= K: every row stays, in one slot. rows_checks() lists one check per
    // field present, in the fields' order, then done => episode_end: each field is checked
    // while it is copied into the slot. A refusal leaves only this free slot written.
    unsigned char *slot = slots_.acquire();
    size_t k = 0;
    for (int f = 0; f < RF_COUNT; ++f)
        if (row_field_bytes(d_, f) && row_field(r, f)) copy_checked(checks[k++], slot + slot_off_[f]);
    if (k + 1 != checks.size())
        fail(FH_ERR_INTERNAL, "rows_checks() has %zu checks for %zu fields", checks.size(), k);
    check_elements(&checks[k], 1);
    FH_CUDA(cudaStreamWaitEvent(copy, ring_free, 0));
    replay::enqueue_append_host(ring_, staged(slot, R, r.regime != nullptr), n_ins_, copy);
    slots_.copied_on(copy);
    n_ins_ += R;
}

void ReplayLane::append_host(const fh_replay_rows &r, cudaStream_t copy) {
    const uint64_t R = r.num_rows, keep = std::min<uint64_t>(R, d_.K);
    // The oldest R - keep rows of the insert would be overwritten by it: counted, never copied
    // (as on the CPU). Appending the rest in chunks leaves the ring as one append would: the
    // episode kernel clamps every episode's start to the oldest valid row, and whatever an
    // intermediate chunk writes about rows outside the final window is rewritten later.
    uint64_t n = n_ins_ + (R - keep);
    for (uint64_t first = R - keep; first < R;) {
        const uint64_t rows = std::min(R - first, slot_rows_);
        unsigned char *slot = slots_.acquire();
        stage(r, first, rows, slot);
        replay::enqueue_append_host(ring_, staged(slot, rows, r.regime != nullptr), n, copy);
        slots_.copied_on(copy);
        first += rows;
        n += rows;
    }
    n_ins_ += R;
}

void ReplayLane::insert_device(const fh_replay_rows &r, cudaStream_t copy, cudaEvent_t ring_free,
                               DeviceCheck &check, int device) {
    std::vector<ElementCheck> checks = rows_checks(d_, r);
    for (const ElementCheck &c : checks) require_device_array(c.data, c.name, device);
    FH_CUDA(cudaStreamWaitEvent(copy, ring_free, 0));
    check.begin(std::move(checks), copy);
    replay::enqueue_append_device(ring_, r, n_ins_, check.status(), copy);
    const uint64_t R = r.num_rows;
    check.finish(copy, [this, R] { n_ins_ += R; });
}

ReplayImage ReplayLane::image() const {
    ReplayImage img;
    img.n_ins = n_ins_;
    const uint64_t K = d_.K, N = replay_valid_rows(n_ins_, K), first = (n_ins_ - N) % K;
    img.rows.resize(d_, N);
    if (N == 0) return img;
    // Oldest first: slots first .. K - 1, then from slot 0 where the ring wraps.
    const uint64_t run = std::min(N, K - first);
    for (int f = 0; f < RF_COUNT; ++f) {
        const size_t rb = ring_.row_bytes[f];
        if (!rb) continue;
        uint8_t *dst = img.rows.field[f].data();
        FH_CUDA(cudaMemcpy(dst, ring_.field[f] + first * rb, run * rb, cudaMemcpyDeviceToHost));
        if (N > run)
            FH_CUDA(cudaMemcpy(dst + run * rb, ring_.field[f], (N - run) * rb,
                               cudaMemcpyDeviceToHost));
    }
    return img;
}

void ReplayLane::restore(const ReplayImage &img, cudaStream_t copy) {
    replay::ring_reset(ring_, copy);
    n_ins_ = img.n_ins - img.rows.R;  // the rows before the oldest valid one are gone
    if (img.rows.R > 0) append_host(img.rows.view(), copy);
}

}  // namespace fh::cuda
