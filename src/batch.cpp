#include "batch.hpp"

#include <cmath>
#include <cstring>

#include "error.hpp"

namespace fh {

namespace {

// An all-ones exponent is NaN or infinity. OR-ing that test over the array is integer work the
// compiler vectorises (alongside the copy, if any); the element-by-element search for the
// message runs only when something is bad.
inline uint32_t non_finite_bit(const float *x, size_t i) {
    uint32_t bits;
    memcpy(&bits, &x[i], sizeof bits);
    return (bits & 0x7f800000u) == 0x7f800000u;
}

bool copy_all_finite(float *dst, const float *src, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        dst[i] = src[i];
        bad |= non_finite_bit(src, i);
    }
    return !bad;
}

void copy_finite(const char *what, float *dst, const float *src, size_t rows, size_t cols) {
    if (!copy_all_finite(dst, src, rows * cols)) check_finite(what, src, rows, cols);
}

// A [B] vector: its culprit is named by one index.
void copy_finite(const char *what, float *dst, const float *src, size_t n) {
    if (copy_all_finite(dst, src, n)) return;
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(src[i]))
            fail(FH_ERR_NON_FINITE, "%s[%zu] = %g is not finite", what, i, (double)src[i]);
}

void need(const char *what, const void *p) {
    if (!p) fail(FH_ERR_NULL_POINTER, "batch.%s is NULL but required by this config", what);
}

}  // namespace

size_t first_non_finite_index(const float *x, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad |= non_finite_bit(x, i);
    if (!bad) return n;
    size_t i = 0;
    while (std::isfinite(x[i])) ++i;
    return i;
}

void check_finite(const char *what, const float *x, size_t rows, size_t cols) {
    const size_t i = first_non_finite_index(x, rows * cols);
    if (i < rows * cols)
        fail(FH_ERR_NON_FINITE, "%s[%zu, %zu] = %g is not finite", what, i / cols, i % cols,
             (double)x[i]);
}

void check_batch_header(const Dims &d, const fh_batch *b) {
    if (!b) fail(FH_ERR_NULL_POINTER, "argument 'batch' is NULL");
    if (b->struct_size != sizeof(fh_batch))
        fail(FH_ERR_STRUCT_SIZE, "batch.struct_size = %zu, expected %zu (use FH_BATCH_INIT)",
             b->struct_size, sizeof(fh_batch));
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
}

void pack_batch(const Dims &d, const fh_batch &b, const BatchDst &o) {
    const size_t B = d.B;
    copy_finite("batch.obs", o.obs, b.obs, B, d.O);
    copy_finite("batch.reward", o.reward, b.reward, B);
    copy_finite("batch.next_obs", o.next_obs, b.next_obs, B, d.O);
    if (d.G > 0) {
        copy_finite("batch.goal", o.goal, b.goal, B, d.G);
        copy_finite("batch.next_achieved_goal", o.next_achieved_goal, b.next_achieved_goal, B,
                    d.G);
        copy_finite("batch.her_goal", o.her_goal, b.her_goal, B, d.G);
    }
    for (size_t i = 0; i < B * d.NB; ++i) {
        const int32_t a = b.action[i];
        if (a < 0 || (uint32_t)a >= d.A)
            fail(FH_ERR_OUT_OF_RANGE, "batch.action[%zu, %zu] = %d is outside [0, %u)", i / d.NB,
                 i % d.NB, a, d.A);
        o.action[i] = a;
    }
    for (size_t i = 0; i < B; ++i) {
        if (b.done[i] > 1)
            fail(FH_ERR_OUT_OF_RANGE, "batch.done[%zu] = %u is not 0 or 1", i, b.done[i]);
        o.done[i] = b.done[i];
    }
    if (b.regime) {
        for (size_t i = 0; i < B; ++i) {
            const int32_t z = b.regime[i];
            if (z < 0 || (uint32_t)z >= d.R)
                fail(FH_ERR_OUT_OF_RANGE, "batch.regime[%zu] = %d is outside [0, %u)", i, z, d.R);
            o.regime[i] = z;
        }
    } else {
        memset(o.regime, 0, B * sizeof(int32_t));
    }
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
    check_batch_header(d, b);
    HostBatch h;
    pack_batch(d, *b, host_batch_dst(d, h));
    return h;
}

}  // namespace fh
