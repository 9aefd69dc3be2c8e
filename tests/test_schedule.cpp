// The schedule (src/schedule.cpp) is safe to run on streams, for many configs.
// The whole step is simulated as the CUDA executor captures and launches it in multi-stream
// mode: a child starts when the children it starts after (ChildDesc::after) have ended; inside
// it, FORK makes the forked lanes wait for lane 0's work so far, JOIN makes lane 0 wait for
// theirs, and a lane's tasks run in order. That gives for every pair of tasks of the step
// whether one happens before the other or the two may run at the same time. Then:
//  - no two tasks that may run at the same time share a cuBLAS workspace (workspace_slot),
//    except where one of them makes no cuBLAS call; otherwise their GEMMs' split-K scratch
//    would race and results would depend on timing;
//  - no two tasks that may run at the same time share a lane (its handle and its reduction
//    scratch), but the HER child's tasks beside the spectral child's where neither uses lane
//    scratch;
//  - every task runs after the tasks whose results it reads, and each part of the divergence
//    guard's snapshot comes before every task that changes that part of the persistent state
//    (`kOrder` below lists what SPEC §5 requires, task by task);
//  - with more than one rank, no two tasks that issue an NCCL collective (the Q net's Adam, IQL,
//    the learners' Adam steps, the regime statistics: SPEC §9) may run at the same time: on two
//    streams their collectives could be issued in different orders on different ranks, and
//    NCCL would hang;
//  - a lane other than lane 0 runs only after a fork (else its work would run outside the
//    capture) and is joined back into lane 0 after its last work or fork (a capture with an
//    unjoined stream fails);
//  - the children's edges point to earlier children and the last child comes after all others
//    (and check_child_order, which the executors call, refuses lists where they do not);
//  - each task runs exactly once per step (per branch).
#include <cstdlib>
#include <vector>

#include "error.hpp"
#include "layout.hpp"
#include "schedule.hpp"
#include "testutil.h"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

using namespace fh;

namespace {

// Tasks that make no cuBLAS call (their reductions use their lane's own scratch; HER's, the
// guard's snapshot and the power iteration's are kernels of their own: cuda/her.cu, guard.cu,
// spectral.cu).
bool no_blas(Task t) {
    return t == Task::TD_METRICS || t == Task::EMA_TARGETS || t == Task::HER_RELABEL ||
           t == Task::HER_METRICS || t == Task::GUARD_SNAPSHOT || t == Task::SPECTRAL_POWER;
}

// Tasks that sum across the ranks of a data-parallel step (cuda/: st.dp.sum).
bool collective(Task t) {
    return t == Task::ADAM_Q || t == Task::IQL || t == Task::AUX_ADAM || t == Task::REGIME_SCALE;
}

struct Run {
    const ChildDesc *child;
    const Op *op;
};

struct Sim {
    std::vector<Run> runs;                  // the step's RUN ops, child by child in list order
    std::vector<std::vector<bool>> before;  // before[k][j]: run j happens before run k
};

using Known = std::vector<bool>;

void merge_into(Known &dst, const Known &src) {
    if (dst.size() < src.size()) dst.resize(src.size(), false);
    for (size_t j = 0; j < src.size(); ++j)
        if (src[j]) dst[j] = true;
}

// One child's RUN ops appended to s, lane 0 starting with `start` known; returns what is known
// at its end (its lanes joined).
Known simulate_child(const ChildDesc &ch, const Known &start, Sim &s) {
    // known[l]: runs completed before lane l's next task starts.
    std::vector<Known> known(kMaxLanes);
    known[0] = start;
    std::vector<int> last(kMaxLanes, -1);
    // forked[l]: lane l entered the capture (a FORK); open[l]: it has work or a fork since its
    // last JOIN, which the capture needs joined before it ends.
    bool forked[kMaxLanes] = {}, open[kMaxLanes] = {};
    auto on_lane = [&](int l) {
        if (l == 0) return;
        if (!forked[l]) {
            print_error("%s: lane %d runs without a fork (outside the capture)\n", ch.name, l);
            fail();
        }
        open[l] = true;
    };
    for (const Op &op : ch.ops) {
        switch (op.kind) {
        case Op::RUN: {
            assert_true(op.lane >= 0 && op.lane < ch.num_lanes);
            const size_t k = s.runs.size();
            s.runs.push_back({&ch, &op});
            s.before.push_back(known[op.lane]);
            known[op.lane].resize(k + 1, false);
            known[op.lane][k] = true;
            last[op.lane] = (int)k;
            on_lane(op.lane);
            break;
        }
        case Op::FORK:
            assert_int_equal(op.lanes & 1u, 0u);
            assert_true(op.lanes < (1u << ch.num_lanes));
            for (int l = 1; l < kMaxLanes; ++l)
                if (op.lanes >> l & 1u) {
                    forked[l] = open[l] = true;
                    merge_into(known[l], known[0]);
                }
            break;
        case Op::JOIN:
            for (int l = 1; l < kMaxLanes; ++l)
                if (op.lanes >> l & 1u) {
                    open[l] = false;
                    merge_into(known[0], known[l]);
                }
            break;
        case Op::MARK: on_lane(op.lane); break;
        }
    }
    for (int l = 1; l < kMaxLanes; ++l)
        if (open[l]) {
            print_error("%s: lane %d has work or a fork after its last join\n", ch.name, l);
            fail();
        }
    // Every lane's last task is known to lane 0 at the end: the child's work is joined.
    for (int l = 1; l < kMaxLanes; ++l)
        if (last[l] >= 0 && ((size_t)last[l] >= known[0].size() || !known[0][last[l]])) {
            print_error("%s: lane %d is not joined back\n", ch.name, l);
            fail();
        }
    return known[0];
}

Sim simulate(const std::vector<ChildDesc> &sched) {
    Sim s;
    std::vector<Known> end(sched.size());
    for (size_t k = 0; k < sched.size(); ++k) {
        Known start;
        for (int j : sched[k].after) {
            assert_true(j >= 0 && (size_t)j < k);
            merge_into(start, end[j]);
        }
        end[k] = simulate_child(sched[k], start, s);
    }
    for (auto &b : s.before) b.resize(s.runs.size(), false);
    // The last child comes after every other one: its end is the step's end.
    const Known &fin = end.back();
    for (size_t j = 0; j < s.runs.size(); ++j)
        if (s.runs[j].child != &sched.back() && (j >= fin.size() || !fin[j])) {
            print_error("task id %d of %s may still run when the last child ends\n",
                        (int)s.runs[j].op->task, s.runs[j].child->name);
            fail();
        }
    return s;
}

// Runs of task t (with arg `arg` where given: branch index, AUX_ADAM's learners as bits).
std::vector<int> find_all(const Sim &s, Task t, int arg = -1, bool bits = false) {
    std::vector<int> at;
    for (int k = 0; k < (int)s.runs.size(); ++k) {
        const Op &op = *s.runs[k].op;
        if (op.task != t) continue;
        if (arg >= 0 && (bits ? (op.arg & arg) == 0 : op.arg != arg)) continue;
        at.push_back(k);
    }
    return at;
}

int find_once(const Sim &s, Task t, int arg = -1, bool bits = false) {
    const std::vector<int> at = find_all(s, t, arg, bits);
    if (at.size() != 1) {
        print_error("task id %d (arg %d) runs %zu times\n", (int)t, arg, at.size());
        fail();
    }
    return at[0];
}

void expect_before(const Sim &s, int a, int b) {
    if (a == b || s.before[b][a]) return;
    print_error("%s's task id %d (arg %d) does not happen before %s's task id %d (arg %d)\n",
                s.runs[a].child->name, (int)s.runs[a].op->task, s.runs[a].op->arg,
                s.runs[b].child->name, (int)s.runs[b].op->task, s.runs[b].op->arg);
    fail();
}

// Every run of task a (arg sel) before every run of task b (arg sel).
struct Order {
    Task a;
    int a_arg;
    Task b;
    int b_arg;
};
constexpr int kAny = -1;
// What SPEC §5 requires: each task after the tasks whose results it reads, the Adam steps
// after the readers of the parameters they change, and the guard's snapshot before every task
// that changes the persistent state. AUX_ADAM's args select by bits.
const Order kOrder[] = {
    {Task::SAMPLE, kAny, Task::HER_RELABEL, kAny},
    {Task::HER_RELABEL, kAny, Task::HER_METRICS, kAny},
    {Task::HER_RELABEL, kAny, Task::DDQN_ONLINE_NEXT, kAny},
    {Task::HER_RELABEL, kAny, Task::DDQN_TARGET, kAny},
    {Task::HER_RELABEL, kAny, Task::FWD_TRUNK, kAny},
    {Task::HER_RELABEL, kAny, Task::IQL, kAny},
    {Task::HER_RELABEL, kAny, Task::IQN, kAny},
    {Task::HER_RELABEL, kAny, Task::ATTENTION, kAny},
    {Task::SPECTRAL_POWER, kAny, Task::DDQN_ONLINE_NEXT, kAny},
    {Task::SPECTRAL_POWER, kAny, Task::DDQN_TARGET, kAny},
    {Task::SPECTRAL_POWER, kAny, Task::FWD_TRUNK, kAny},
    {Task::DDQN_ONLINE_NEXT, kAny, Task::DDQN_JOIN, kAny},
    {Task::DDQN_TARGET, kAny, Task::DDQN_JOIN, kAny},
    {Task::DDQN_JOIN, kAny, Task::TD_LOSS, kAny},
    {Task::DDQN_JOIN, kAny, Task::IQL, kAny},
    {Task::DDQN_JOIN, kAny, Task::ENSEMBLE, kAny},
    {Task::DDQN_TARGET, kAny, Task::EMA_TARGETS, kAny},  // ddqn's Q̄ before this step's EMA
    {Task::DDQN_TARGET, kAny, Task::CONFIDENCE, kAny},   // h̄2(x̃')
    {Task::FWD_TRUNK, kAny, Task::FWD_BRANCH, kAny},
    {Task::FWD_BRANCH, kAny, Task::TD_LOSS, kAny},
    {Task::TD_LOSS, kAny, Task::TD_METRICS, kAny},
    {Task::TD_LOSS, kAny, Task::BWD_BRANCH, kAny},
    {Task::TD_LOSS, kAny, Task::REGIME_SCALE, kAny},
    {Task::BWD_BRANCH, kAny, Task::BWD_TRUNK, kAny},
    {Task::BWD_BRANCH, kAny, Task::CQL, kAny},  // CQL adds into dU, de
    {Task::IQL, kAny, Task::CQL, kAny},         // ω
    {Task::IQL, kAny, Task::ENSEMBLE, kAny},    // V_hi, V_lo
    {Task::EMA_TARGETS, kAny, Task::IQN, kAny},
    {Task::IQN, kAny, Task::ENSEMBLE, kAny},    // z_mean
    {Task::IQN, kAny, Task::IQN_BACKWARD, kAny},
    {Task::IQN_BACKWARD, kAny, Task::AUX_ADAM, kAdamIqn},
    {Task::EMA_TARGETS, kAny, Task::AUX_ADAM, kAdamIqn},
    {Task::ATTENTION, kAny, Task::AUX_ADAM, kAdamAttention},
    {Task::FWD_TRUNK, kAny, Task::CONFIDENCE, kAny},  // u(x̃)
    {Task::EMA_TARGETS, kAny, Task::CONFIDENCE, kAny},
    {Task::ENSEMBLE, kAny, Task::CONFIDENCE, kAny},
    // The power iteration changes u (the spectral part); EMA the targets, IQL, the Adam
    // steps and the regime scale the rest (ADAM_Q comes after every task, below).
    {Task::GUARD_SNAPSHOT, kSnapshotSpectral, Task::SPECTRAL_POWER, kAny},
    {Task::GUARD_SNAPSHOT, kSnapshotRest, Task::EMA_TARGETS, kAny},
    {Task::GUARD_SNAPSHOT, kSnapshotRest, Task::IQL, kAny},
    {Task::GUARD_SNAPSHOT, kSnapshotRest, Task::AUX_ADAM, kAny},
    {Task::GUARD_SNAPSHOT, kSnapshotRest, Task::REGIME_SCALE, kAny},
};

bool arg_bits(Task t) { return t == Task::AUX_ADAM; }

void check_order(const Sim &s, const Dims &d) {
    for (const Order &o : kOrder)
        for (int a : find_all(s, o.a, o.a_arg, arg_bits(o.a)))
            for (int b : find_all(s, o.b, o.b_arg, arg_bits(o.b))) expect_before(s, a, b);
    // The Q net's Adam after every other task but the guard's check, which ends the step.
    const int adam = find_once(s, Task::ADAM_Q), check = find_once(s, Task::GUARD_CHECK);
    for (int k = 0; k < (int)s.runs.size(); ++k) {
        if (k != check) expect_before(s, k, check);
        if (k != check && k != adam) expect_before(s, k, adam);
    }
    // Once per step (per branch).
    for (Task t : {Task::HER_RELABEL, Task::HER_METRICS, Task::SPECTRAL_POWER,
                   Task::DDQN_ONLINE_NEXT, Task::DDQN_TARGET, Task::DDQN_JOIN, Task::FWD_TRUNK,
                   Task::TD_LOSS, Task::TD_METRICS, Task::BWD_TRUNK, Task::EMA_TARGETS,
                   Task::IQL, Task::IQN, Task::IQN_BACKWARD, Task::ATTENTION, Task::ENSEMBLE,
                   Task::CONFIDENCE})
        find_once(s, t);
    for (uint32_t b = 0; b < d.NB; ++b) {
        find_once(s, Task::FWD_BRANCH, (int)b);
        find_once(s, Task::BWD_BRANCH, (int)b);
    }
    if (d.K > 0) find_once(s, Task::SAMPLE);
    find_once(s, Task::GUARD_SNAPSHOT, kSnapshotSpectral);
    find_once(s, Task::GUARD_SNAPSHOT, kSnapshotRest);
    assert_int_equal(find_all(s, Task::GUARD_SNAPSHOT).size(), 2);
    find_once(s, Task::AUX_ADAM, kAdamIqn, true);
    find_once(s, Task::AUX_ADAM, kAdamAttention, true);
}

// Tasks that use no lane scratch (no reduction scratch, no cuBLAS handle): HER's relabelling,
// the guard's snapshot and the power iteration (on scratch of its own).
bool no_lane_scratch(Task t) {
    return t == Task::HER_RELABEL || t == Task::GUARD_SNAPSHOT || t == Task::SPECTRAL_POWER;
}

// The HER child's tasks beside the spectral child's, which share lane 0's stream index but no
// scratch.
bool her_beside_spectral(const Run &x, const Run &y) {
    const ChildId a = x.child->id, b = y.child->id;
    const bool pair = (a == ChildId::HER && b == ChildId::SPECTRAL) ||
                      (a == ChildId::SPECTRAL && b == ChildId::HER);
    return pair && no_lane_scratch(x.op->task) && no_lane_scratch(y.op->task);
}

// check_child_order refuses the list: FH_ERR_INTERNAL.
void expect_refused(const std::vector<ChildDesc> &sched, const char *why) {
    try {
        check_child_order(sched);
    } catch (const Error &e) {
        assert_int_equal(e.status, FH_ERR_INTERNAL);
        return;
    }
    print_error("check_child_order accepted a schedule with %s\n", why);
    fail();
}

void check(const fh_config &c, uint32_t world) {
    const Dims d = make_dims(c, 0, world);
    const std::vector<ChildDesc> sched = build_schedule(d, c);
    check_child_order(sched);
    {
        std::vector<ChildDesc> bad = sched;
        bad.back().after.push_back(bad.back().after[0]);
        expect_refused(bad, "an edge listed twice");
        bad = sched;
        bad[1].after = {1};
        expect_refused(bad, "a child after itself");
        bad = sched;
        bad.back().after = {(int)bad.size() - 2};
        bad[bad.size() - 2].after = {};
        expect_refused(bad, "a child that may end after the last one");
    }
    const Sim s = simulate(sched);
    const int n = (int)s.runs.size();
    for (int b = 0; b < n; ++b)
        for (int a = 0; a < b; ++a) {
            const Op &x = *s.runs[a].op, &y = *s.runs[b].op;
            if (s.before[b][a]) continue;
            if (world > 1 && collective(x.task) && collective(y.task)) {
                print_error("NB = %u: collectives of tasks %d and %d may run at once\n", d.NB,
                            a, b);
                fail();
            }
            if (x.lane == y.lane && !her_beside_spectral(s.runs[a], s.runs[b])) {
                print_error("NB = %u, world %u: tasks %d and %d (%s, %s) may run at once on "
                            "lane %d\n", d.NB, world, a, b, s.runs[a].child->name,
                            s.runs[b].child->name, x.lane);
                fail();
            }
            if (no_blas(x.task) || no_blas(y.task)) continue;
            if (workspace_slot(true, x.lane) == workspace_slot(true, y.lane)) {
                print_error("NB = %u, world %u: tasks %d and %d (lanes %d, %d) may run at once "
                            "on one workspace\n", d.NB, world, a, b, x.lane, y.lane);
                fail();
            }
        }
    check_order(s, d);
}

}  // namespace

// Every config: one to seven branches, both exec modes, with and without CQL, regimes and a
// replay, one and two ranks; with the trial FOXHUNT_TRIAL_TAIL_EARLY off and on.
static void test_schedule_safe_on_streams(void **) {
    for (const char *tail_early : {"0", "1"}) {
        setenv("FOXHUNT_TRIAL_TAIL_EARLY", tail_early, 1);
        for (uint32_t nb = 1; nb <= 7; ++nb)
            for (int variant = 0; variant < 16; ++variant)
                for (uint32_t world = 1; world <= 2; ++world) {
                    fh_config c;
                    fh_config_init(&c);
                    c.exec_mode = variant & 4 ? FH_EXEC_SINGLE_STREAM : FH_EXEC_MULTI_STREAM;
                    c.num_branches = nb;
                    c.cql_alpha = variant & 1 ? 0.0f : 0.1f;
                    c.num_regimes = variant & 2 ? 1 : 4;
                    if (variant & 8) {  // a replay: the sample child first
                        c.replay_capacity = 64;
                        c.replay_envs = 4;
                    }
                    check(c, world);
                }
    }
    unsetenv("FOXHUNT_TRIAL_TAIL_EARLY");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_safe_on_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
