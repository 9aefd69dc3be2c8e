#include "batch.hpp"

#include <cmath>
#include <cstring>

#include "error.hpp"

namespace fh {

void check_finite(const char *what, const float *x, size_t rows, size_t cols) {
    // An all-ones exponent is NaN or infinity. OR-ing that test over the array is integer work
    // the compiler vectorises; the element-by-element search runs only when something is bad.
    const size_t n = rows * cols;
    uint32_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) return;
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i]))
            fail(FH_ERR_NON_FINITE, "%s[%zu, %zu] = %g is not finite", what, i / cols, i % cols,
                 (double)x[i]);
}

static void need(const char *what, const void *p) {
    if (!p) fail(FH_ERR_NULL_POINTER, "batch.%s is NULL but required by this config", what);
}

template <class T>
static void copy(std::vector<T> &dst, const T *p, size_t n) {
    if (p) dst.assign(p, p + n);
    else dst.clear();
}

void copy_batch(const Dims &d, const fh_batch *b, HostBatch &h) {
    if (!b) fail(FH_ERR_NULL_POINTER, "argument 'batch' is NULL");
    if (b->struct_size != sizeof(fh_batch))
        fail(FH_ERR_STRUCT_SIZE, "batch.struct_size = %zu, expected %zu (use FH_BATCH_INIT)",
             b->struct_size, sizeof(fh_batch));
    if (b->batch_size != d.B)
        fail(FH_ERR_BUFFER_SIZE, "batch.batch_size = %u but the pipeline's batch_size is %u",
             b->batch_size, d.B);
    const size_t B = d.B;
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
    check_finite("batch.obs", b->obs, B, d.O);
    check_finite("batch.reward", b->reward, B, 1);
    check_finite("batch.next_obs", b->next_obs, B, d.O);
    if (d.G > 0) {
        check_finite("batch.goal", b->goal, B, d.G);
        check_finite("batch.next_achieved_goal", b->next_achieved_goal, B, d.G);
        check_finite("batch.her_goal", b->her_goal, B, d.G);
    }
    for (size_t i = 0; i < B * d.NB; ++i)
        if (b->action[i] < 0 || (uint32_t)b->action[i] >= d.A)
            fail(FH_ERR_OUT_OF_RANGE, "batch.action[%zu, %zu] = %d is outside [0, %u)", i / d.NB,
                 i % d.NB, b->action[i], d.A);
    for (size_t i = 0; i < B; ++i)
        if (b->done[i] > 1)
            fail(FH_ERR_OUT_OF_RANGE, "batch.done[%zu] = %u is not 0 or 1", i, b->done[i]);
    if (b->regime)
        for (size_t i = 0; i < B; ++i)
            if (b->regime[i] < 0 || (uint32_t)b->regime[i] >= d.R)
                fail(FH_ERR_OUT_OF_RANGE, "batch.regime[%zu] = %d is outside [0, %u)", i,
                     b->regime[i], d.R);

    copy(h.obs, b->obs, B * d.O);
    copy(h.next_obs, b->next_obs, B * d.O);
    copy(h.reward, b->reward, B);
    copy(h.action, b->action, B * d.NB);
    copy(h.done, b->done, B);
    copy(h.goal, d.G > 0 ? b->goal : nullptr, B * d.G);
    copy(h.next_achieved_goal, d.G > 0 ? b->next_achieved_goal : nullptr, B * d.G);
    copy(h.her_goal, d.G > 0 ? b->her_goal : nullptr, B * d.G);
    if (b->regime) copy(h.regime, b->regime, B);
    else h.regime.assign(B, 0);
}

HostBatch copy_batch(const Dims &d, const fh_batch *b) {
    HostBatch h;
    copy_batch(d, b, h);
    return h;
}

}  // namespace fh
