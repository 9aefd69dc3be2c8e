#include "guard.hpp"

#include <cstdio>

#include "checkpoint.hpp"
#include "error.hpp"

namespace fh {

static const char *const kScalarNames[NUM_GUARD_SCALARS] = {
    "td_loss", "q_mean", "cql_loss", "iql_loss_hi", "iql_loss_lo", "iqn_loss", "attn_loss",
    "conf_loss", "grad_norm", "sigma[0]", "sigma[1]", "sigma_target[0]", "sigma_target[1]",
    "ensemble_std"};

std::string guard_quantity_name(const Layout &L, int64_t code) {
    if (code < 0) return "nothing";
    if (code < NUM_GUARD_SCALARS) return std::string("the metric ") + kScalarNames[code];
    uint64_t i = (uint64_t)(code - NUM_GUARD_SCALARS);
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        if (i < L.buf_size[b]) return state_element_name(L, (Buf)b, (size_t)i);
        i -= L.buf_size[b];
    }
    return "guard code " + std::to_string((long long)code);
}

void check_snapshot_part(int part) {
    if (part != kSnapshotSpectral && part != kSnapshotRest)
        fail(FH_ERR_INTERNAL, "guard snapshot of part %d", part);
}

std::string guard_message(const Layout &L, const GuardReport &r) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "step %llu applied no update: %s = %g is not finite (the divergence guard kept the "
             "state of before that step; %llu step(s) skipped since the last check, %llu since "
             "creation)",
             (unsigned long long)r.first_step, guard_quantity_name(L, r.first_code).c_str(),
             (double)r.first_value, (unsigned long long)r.pending,
             (unsigned long long)r.skipped);
    return buf;
}

}  // namespace fh
