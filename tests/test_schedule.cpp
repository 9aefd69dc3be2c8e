// The schedule (src/schedule.cpp) is safe to run on streams, for many configs: it is simulated as
// the CUDA executor captures it in multi-stream mode (FORK: the forked lanes wait for lane 0's
// work so far; JOIN: lane 0 waits for theirs; a lane's tasks in order), which gives for every
// pair of tasks whether one happens before the other or the two may run at the same time. Then:
//  - no two tasks that may run at the same time share a cuBLAS workspace (workspace_slot),
//    except where one of them makes no cuBLAS call; otherwise their GEMMs' split-K scratch
//    would race and results would depend on timing (and a child that runs beside the previous
//    one, multi-stream, calls no cuBLAS in either);
//  - each task of the Q learner's forward and backward runs after the tasks whose results it
//    reads (the trunk before each branch, every branch's forward before the TD loss, the TD
//    loss before each branch's backward and before the metrics' sums, every branch's backward
//    before the trunk's; EMA after the TD loss, IQL's pass before the child ends);
//  - with more than one rank, no two tasks that issue an NCCL collective (the Q net's Adam, IQL,
//    the learners' Adam steps, the regime statistics: SPEC §9) may run at the same time: on two
//    streams their collectives could be issued in different orders on different ranks, and
//    NCCL would hang;
//  - a lane other than lane 0 runs only after a fork (else its work would run outside the
//    capture) and is joined back into lane 0 after its last work or fork (a capture with an
//    unjoined stream fails);
//  - each of those tasks runs exactly once per step (per branch).
#include <vector>

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
           t == Task::GUARD_SNAPSHOT || t == Task::SPECTRAL_POWER;
}

// Tasks that sum across the ranks of a data-parallel step (cuda/: st.dp.sum).
bool collective(Task t) {
    return t == Task::ADAM_Q || t == Task::IQL || t == Task::AUX_ADAM || t == Task::REGIME_SCALE;
}

struct Sim {
    std::vector<const Op *> runs;           // the child's RUN ops, in list order
    std::vector<std::vector<bool>> before;  // before[k][j]: run j happens before run k
};

Sim simulate(const ChildDesc &ch) {
    Sim s;
    // known[l][j]: run j has completed before lane l's next task starts.
    std::vector<std::vector<bool>> known(kMaxLanes);
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
    auto grow = [&](size_t n) {
        for (auto &k : known) k.resize(n, false);
    };
    for (const Op &op : ch.ops) {
        switch (op.kind) {
        case Op::RUN: {
            assert_true(op.lane >= 0 && op.lane < ch.num_lanes);
            const size_t k = s.runs.size();
            s.runs.push_back(&op);
            grow(k + 1);
            s.before.push_back(known[op.lane]);
            known[op.lane][k] = true;
            last[op.lane] = (int)k;
            on_lane(op.lane);
            break;
        }
        case Op::FORK:
            assert_int_equal(op.lanes & 1u, 0u);
            for (int l = 1; l < kMaxLanes; ++l)
                if (op.lanes >> l & 1u) {
                    forked[l] = open[l] = true;
                    for (size_t j = 0; j < known[0].size(); ++j)
                        if (known[0][j]) known[l][j] = true;
                }
            break;
        case Op::JOIN:
            for (int l = 1; l < kMaxLanes; ++l)
                if (op.lanes >> l & 1u) {
                    open[l] = false;
                    for (size_t j = 0; j < known[l].size(); ++j)
                        if (known[l][j]) known[0][j] = true;
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
    grow(s.runs.size());
    for (auto &b : s.before) b.resize(s.runs.size(), false);
    // Every lane's last task is known to lane 0 at the end: the child's work is joined.
    for (int l = 1; l < kMaxLanes; ++l)
        if (last[l] >= 0 && !known[0][last[l]]) {
            print_error("%s: lane %d is not joined back\n", ch.name, l);
            fail();
        }
    return s;
}

int find(const Sim &s, Task t, int arg = -1) {
    int at = -1;
    for (int k = 0; k < (int)s.runs.size(); ++k)
        if (s.runs[k]->task == t && (arg < 0 || s.runs[k]->arg == arg)) {
            assert_int_equal(at, -1);  // once
            at = k;
        }
    return at;
}

void expect_before(const Sim &s, const char *child, int a, int b) {
    assert_true(a >= 0 && b >= 0);
    if (!s.before[b][a]) {
        print_error("%s: task %d (task id %d) does not happen before task %d (task id %d)\n",
                    child, a, (int)s.runs[a]->task, b, (int)s.runs[b]->task);
        fail();
    }
}

void check(const fh_config &c, uint32_t world) {
    const Dims d = make_dims(c, 0, world);
    const std::vector<ChildDesc> sched = build_schedule(d, c);
    for (size_t ci = 0; ci < sched.size(); ++ci) {
        const ChildDesc &ch = sched[ci];
        // A child beside the previous one runs at the same time on the same lane-0 handle and
        // workspace: neither may call cuBLAS.
        if (ch.beside_previous) {
            assert_true(ci > 0 && !sched[ci - 1].beside_previous);
            for (const ChildDesc *c2 : {&ch, &sched[ci - 1]})
                for (const Op &op : c2->ops)
                    if (op.kind == Op::RUN && !no_blas(op.task)) {
                        print_error("%s beside %s: task id %d calls cuBLAS\n", ch.name,
                                    sched[ci - 1].name, (int)op.task);
                        fail();
                    }
        }
        const Sim s = simulate(ch);
        const int n = (int)s.runs.size();
        for (int b = 0; b < n; ++b)
            for (int a = 0; a < b; ++a) {
                const Op &x = *s.runs[a], &y = *s.runs[b];
                if (s.before[b][a]) continue;
                if (world > 1 && collective(x.task) && collective(y.task)) {
                    print_error("%s (NB = %u): collectives of tasks %d and %d may run at once\n",
                                ch.name, d.NB, a, b);
                    fail();
                }
                if (no_blas(x.task) || no_blas(y.task)) continue;
                if (workspace_slot(true, x.lane) == workspace_slot(true, y.lane)) {
                    print_error("%s (NB = %u, world %u): tasks %d and %d (lanes %d, %d) may run "
                                "at once on one workspace\n",
                                ch.name, d.NB, world, a, b, x.lane, y.lane);
                    fail();
                }
            }
        if (ch.id != ChildId::FORWARD) continue;
        const int trunk = find(s, Task::FWD_TRUNK), td = find(s, Task::TD_LOSS);
        const int tm = find(s, Task::TD_METRICS), bt = find(s, Task::BWD_TRUNK);
        for (uint32_t br = 0; br < d.NB; ++br) {
            const int fb = find(s, Task::FWD_BRANCH, (int)br);
            const int bb = find(s, Task::BWD_BRANCH, (int)br);
            expect_before(s, ch.name, trunk, fb);
            expect_before(s, ch.name, fb, td);
            expect_before(s, ch.name, td, bb);
            expect_before(s, ch.name, bb, bt);
        }
        expect_before(s, ch.name, td, tm);
        expect_before(s, ch.name, td, find(s, Task::EMA_TARGETS));
    }
}

}  // namespace

static void test_schedule_safe_on_streams(void **) {
    for (uint32_t nb = 1; nb <= 7; ++nb)
        for (int variant = 0; variant < 8; ++variant)
            for (uint32_t world = 1; world <= 2; ++world) {
                fh_config c;
                fh_config_init(&c);
                c.exec_mode = variant & 4 ? FH_EXEC_SINGLE_STREAM : FH_EXEC_MULTI_STREAM;
                c.num_branches = nb;
                c.cql_alpha = variant & 1 ? 0.0f : 0.1f;
                c.num_regimes = variant & 2 ? 1 : 4;
                check(c, world);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_safe_on_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
