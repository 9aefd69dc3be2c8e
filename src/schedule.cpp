#include "schedule.hpp"

namespace fh {

namespace {
Op run(Task t, int lane = 0, int arg = 0) { return Op{Op::RUN, t, lane, arg, 0}; }
Op fork(unsigned lanes) { return Op{Op::FORK, Task::HER_RELABEL, 0, 0, lanes}; }
Op join(unsigned lanes) { return Op{Op::JOIN, Task::HER_RELABEL, 0, 0, lanes}; }
Op mark(Mark m, int lane = 0) { return Op{Op::MARK, Task::HER_RELABEL, lane, (int)m, 0}; }
unsigned mask_of(int first, int count) { return ((1u << count) - 1u) << first; }
}  // namespace

std::vector<ChildDesc> build_schedule(const Dims &d, const fh_config &c) {
    std::vector<ChildDesc> s;
    s.push_back({ChildId::HER, "her", 1, {run(Task::HER_RELABEL)}});
    // The divergence guard (guard.hpp) brackets everything that changes the state: HER does
    // not, so the snapshot opens the spectral child and the upload's wait on HER stays short.
    s.push_back({ChildId::SPECTRAL, "spectral", 1,
                 {run(Task::GUARD_SNAPSHOT), run(Task::SPECTRAL_POWER)}});
    s.push_back({ChildId::DDQN, "ddqn", 3,
                 {fork(mask_of(1, 2)), run(Task::DDQN_ONLINE_NEXT, 1), run(Task::DDQN_TARGET, 2),
                  join(mask_of(1, 2)), run(Task::DDQN_JOIN)}});

    // Branches go round-robin over lanes 1..kMaxLanes-1; with more branches than lanes, a lane
    // runs several in branch order.
    const int branch_lanes = (int)d.NB < kMaxLanes - 1 ? (int)d.NB : kMaxLanes - 1;
    ChildDesc fwd{ChildId::FORWARD, "forward", 1 + branch_lanes, {}};
    const unsigned bl = mask_of(1, branch_lanes);
    fwd.ops.push_back(run(Task::FWD_TRUNK));
    fwd.ops.push_back(fork(bl));
    for (uint32_t b = 0; b < d.NB; ++b) fwd.ops.push_back(run(Task::FWD_BRANCH, 1 + b % branch_lanes, b));
    fwd.ops.push_back(join(bl));
    fwd.ops.push_back(run(Task::TD_LOSS));
    fwd.ops.push_back(fork(bl));
    for (uint32_t b = 0; b < d.NB; ++b) fwd.ops.push_back(run(Task::BWD_BRANCH, 1 + b % branch_lanes, b));
    fwd.ops.push_back(join(bl));
    fwd.ops.push_back(run(Task::BWD_TRUNK));
    s.push_back(fwd);

    ChildDesc aux{ChildId::AUX, "aux", 3, {}};
    aux.ops = {mark(Mark::AUX_EMA_BEGIN), run(Task::EMA_TARGETS), mark(Mark::AUX_EMA_END),
               run(Task::IQL), mark(Mark::AUX_IQL_END),
               fork(mask_of(1, 2)),
               mark(Mark::AUX_IQN_BEGIN, 1), run(Task::IQN, 1), mark(Mark::AUX_IQN_END, 1),
               mark(Mark::AUX_ATTN_BEGIN, 2), run(Task::ATTENTION, 2), mark(Mark::AUX_ATTN_END, 2),
               join(mask_of(1, 2)),
               mark(Mark::AUX_TAIL_BEGIN)};
    if (c.cql_alpha > 0) aux.ops.push_back(run(Task::CQL));
    aux.ops.push_back(run(Task::ENSEMBLE));
    aux.ops.push_back(run(Task::CONFIDENCE));
    if (d.R > 1) aux.ops.push_back(run(Task::REGIME_SCALE));
    aux.ops.push_back(mark(Mark::AUX_TAIL_END));
    s.push_back(aux);

    s.push_back({ChildId::ADAM, "adam", 1, {run(Task::ADAM_Q), run(Task::GUARD_CHECK)}});
    return s;
}

}  // namespace fh
