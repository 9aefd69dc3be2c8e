// The divergence guard, shared by both executors (docs/design.md, "Divergence guard").
//
// A step whose losses, gradient norm or resulting state hold a NaN or infinity applies no
// update: the task GUARD_SNAPSHOT copies the persistent buffers aside before anything changes
// them, in two parts (snapshot_part: first in the spectral child the u its power iteration
// changes, last in the HER child all the rest), and GUARD_CHECK (last in the adam child) finds the
// first non-finite quantity, in the fixed order below, and if there is one copies the snapshot
// back. The CPU executor does this on the host (src/cpu/cpu_backend.cpp); the CUDA executor in
// device kernels with no host synchronisation (cuda/guard.cu). The step counter still advances.
#pragma once
#include <cstdint>
#include <string>

#include "layout.hpp"
#include "schedule.hpp"

namespace fh {

// The step's scalars the guard checks, in order, named as in fh_metrics.
enum GuardScalar : int {
    GS_TD_LOSS, GS_Q_MEAN, GS_CQL_LOSS, GS_IQL_LOSS_HI, GS_IQL_LOSS_LO, GS_IQN_LOSS,
    GS_ATTN_LOSS, GS_CONF_LOSS, GS_GRAD_NORM, GS_SIGMA_W1, GS_SIGMA_W2, GS_SIGMA_TARGET_W1,
    GS_SIGMA_TARGET_W2, GS_ENSEMBLE_STD, NUM_GUARD_SCALARS
};

// The part of the snapshot (GUARD_SNAPSHOT's arg) persistent buffer b belongs to: the spectral
// child's u (kSnapshotSpectral) or the rest (kSnapshotRest).
inline int snapshot_part(int b) { return b == BUF_SN_U ? kSnapshotSpectral : kSnapshotRest; }

// GUARD_SNAPSHOT's arg checked by both executors: FH_ERR_INTERNAL where it names no part.
void check_snapshot_part(int part);

// The quantity a guard code denotes: code c < NUM_GUARD_SCALARS is that scalar; otherwise
// element c − NUM_GUARD_SCALARS of the persistent buffers laid end to end in Buf order
// ("adam_v of attn.w_r2[0, 6]").
std::string guard_quantity_name(const Layout &L, int64_t code);

// What an executor's guard has counted.
struct GuardReport {
    bool available = false;     // the executor runs the guard
    uint64_t skipped = 0;       // steps skipped since the pipeline was created
    bool last_skipped = false;  // the last step was skipped
    // Since the last report that was cleared (fh_pipeline_check, a load): how many steps were
    // skipped, and for the first of them its step number (1-based, as fh_metrics.step after
    // it), the code of its first non-finite quantity and that quantity's value.
    uint64_t pending = 0;
    uint64_t first_step = 0;
    int64_t first_code = -1;
    float first_value = 0;
};

// "step 7 applied no update: adam_v of attn.w_r2[0, 6] = inf is not finite (...)".
std::string guard_message(const Layout &L, const GuardReport &r);

}  // namespace fh
