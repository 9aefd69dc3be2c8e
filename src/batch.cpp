#include "batch.hpp"

#include <cstddef>
#include <cstring>

#include "error.hpp"

namespace fh {

namespace {

void need(const char *what, const void *p) {
    if (!p) fail(FH_ERR_NULL_POINTER, "batch.%s is NULL but required by this config", what);
}

}  // namespace

void check_finite(const char *what, const float *x, size_t rows, size_t cols) {
    const ElementCheck c = make_check(what, x, CHECK_FINITE, 0, (uint32_t)rows, (uint32_t)cols);
    check_elements(&c, 1);
}

void check_batch_header(const Dims &d, const fh_batch *b) {
    if (!b) fail(FH_ERR_NULL_POINTER, "argument 'batch' is NULL");
    if (b->batch_size != d.B)
        fail(FH_ERR_BUFFER_SIZE, "batch.batch_size = %u but the pipeline's batch_size is %u",
             b->batch_size, d.B);
    need("obs", b->obs);
    need("action", b->action);
    need("reward", b->reward);
    need("done", b->done);
    need("next_obs", b->next_obs);
    if (d.G > 0) {
        need("goal", b->goal);
        need("next_achieved_goal", b->next_achieved_goal);
        need("her_goal", b->her_goal);
    }
    if (b->memory != FH_MEMORY_HOST && b->memory != FH_MEMORY_DEVICE)
        fail(FH_ERR_BAD_VALUE, "batch.memory = %d is not an fh_memory_kind", b->memory);
}

fh_batch read_batch(const fh_batch *b) {
    constexpr size_t kSize01 = offsetof(fh_batch, memory);
    if (!b) fail(FH_ERR_NULL_POINTER, "argument 'batch' is NULL");
    if (b->struct_size != sizeof(fh_batch) && b->struct_size != kSize01)
        fail(FH_ERR_STRUCT_SIZE, "batch.struct_size = %zu, expected %zu (use FH_BATCH_INIT)",
             b->struct_size, sizeof(fh_batch));
    fh_batch out{};  // memory = FH_MEMORY_HOST for a 0.1 batch
    memcpy(&out, b, b->struct_size);
    out.struct_size = sizeof(fh_batch);
    return out;
}

std::vector<ElementCheck> batch_checks(const Dims &d, const fh_batch &b) {
    std::vector<ElementCheck> v = {
        make_check("batch.obs", b.obs, CHECK_FINITE, 0, d.B, d.O),
        make_check("batch.reward", b.reward, CHECK_FINITE, 0, d.B),
        make_check("batch.next_obs", b.next_obs, CHECK_FINITE, 0, d.B, d.O)};
    if (d.G > 0) {
        v.push_back(make_check("batch.goal", b.goal, CHECK_FINITE, 0, d.B, d.G));
        v.push_back(make_check("batch.next_achieved_goal", b.next_achieved_goal, CHECK_FINITE,
                               0, d.B, d.G));
        v.push_back(make_check("batch.her_goal", b.her_goal, CHECK_FINITE, 0, d.B, d.G));
    }
    v.push_back(make_check("batch.action", b.action, CHECK_BELOW, d.A, d.B, d.NB));
    v.push_back(make_check("batch.done", b.done, CHECK_FLAG, 0, d.B));
    if (b.regime) v.push_back(make_check("batch.regime", b.regime, CHECK_BELOW, d.R, d.B));
    return v;
}

void pack_batch(const Dims &d, const fh_batch &b, const BatchDst &o) {
    // Destinations in batch_checks()' order.
    void *dst[] = {o.obs, o.reward, o.next_obs};
    void *goal_dst[] = {o.goal, o.next_achieved_goal, o.her_goal};
    const std::vector<ElementCheck> checks = batch_checks(d, b);
    size_t k = 0;
    for (void *p : dst) copy_checked(checks[k++], p);
    if (d.G > 0)
        for (void *p : goal_dst) copy_checked(checks[k++], p);
    copy_checked(checks[k++], o.action);
    copy_checked(checks[k++], o.done);
    if (b.regime) copy_checked(checks[k++], o.regime);
    else memset(o.regime, 0, (size_t)d.B * sizeof(int32_t));
}

BatchDst host_batch_dst(const Dims &d, HostBatch &h) {
    const size_t B = d.B;
    h.obs.resize(B * d.O);
    h.next_obs.resize(B * d.O);
    h.reward.resize(B);
    h.goal.resize(B * d.G);
    h.next_achieved_goal.resize(B * d.G);
    h.her_goal.resize(B * d.G);
    h.action.resize(B * d.NB);
    h.regime.resize(B);
    h.done.resize(B);
    return BatchDst{h.obs.data(),  h.goal.data(),   h.reward.data(),
                    h.next_obs.data(), h.next_achieved_goal.data(), h.her_goal.data(),
                    h.action.data(), h.regime.data(), h.done.data()};
}

HostBatch copy_batch(const Dims &d, const fh_batch *b) {
    const fh_batch full = read_batch(b);
    check_batch_header(d, &full);
    HostBatch h;
    pack_batch(d, full, host_batch_dst(d, h));
    return h;
}

}  // namespace fh
