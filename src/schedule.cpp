#include "schedule.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "error.hpp"

namespace fh {

namespace {
Op run(Task t, int lane = 0, int arg = 0) { return Op{Op::RUN, t, lane, arg, 0}; }
Op fork(unsigned lanes) { return Op{Op::FORK, Task::HER_RELABEL, 0, 0, lanes}; }
Op join(unsigned lanes) { return Op{Op::JOIN, Task::HER_RELABEL, 0, 0, lanes}; }
Op mark(Mark m, int lane = 0) { return Op{Op::MARK, Task::HER_RELABEL, lane, (int)m, 0}; }
unsigned mask_of(int first, int count) { return ((1u << count) - 1u) << first; }
}  // namespace

// IQL runs in the forward child, on lane 2 beside the trunk backward on lane 0, not in the aux
// child before IQN and attention fork (SPEC §5.5's place). IQL reads x̃ and ddqn's Q̄sa and
// writes only its own nets, ω, V_hi, V_lo and its losses, which nothing reads before the aux
// child's fork, so the results are SPEC's. Why: the trunk backward is a chain of small kernels
// that leaves most SMs idle, and IQL was the aux child's only serial part before the fork. At
// B = 16384, TF32 multi-stream on the H200: forward child 0.406 → 0.543 ms, aux child 1.114 →
// 0.935, wall 1.894 → 1.850 ms; single-stream unchanged, 2.287 → 2.289
// (bench/results/h200-2026-12-02-iql-place-before-after.json; both rows with a trial SiLU
// kernel in the ddqn child that was not kept, docs/cuda.md "Findings"). Lane 2 has a workspace
// of its own (lane 1 shares lane 0's), so this needs at least two branch lanes; with one branch
// IQL stays in the aux child.
static bool iql_beside_trunk_backward(const Dims &d) { return d.NB >= 2; }

// A trial (FOXHUNT_TRIAL_TAIL_EARLY=1): the tail (ensemble, confidence) on lane 1 between IQN's
// loss and its gradient instead of after IQN's Adam. The tail reads z_mean, which the loss
// writes, and nothing of IQN's gradient or parameters, so the results are the same bits. Why:
// on an H100 trace (bench/results/h100-2026-12-08-thirty-second-final-timeline-multi-tf32.txt)
// the sum of the dWφ kernel's partials waited about 100 µs for SMs behind the attention
// backward, and the tail after it ended the aux child about 15 µs after the attention lane.
// With it on, AUX_IQN's span holds the tail's too.
static bool tail_between_iqn_passes() {
    const char *v = getenv("FOXHUNT_TRIAL_TAIL_EARLY");
    return v && !strcmp(v, "1");
}

std::vector<ChildDesc> build_schedule(const Dims &d, const fh_config &c) {
    std::vector<ChildDesc> s;
    // Each child starts after the one before it unless said otherwise.
    auto add = [&](ChildDesc ch) {
        if (!s.empty()) ch.after = {(int)s.size() - 1};
        s.push_back(std::move(ch));
        return (int)s.size() - 1;
    };
    if (d.K > 0) add({ChildId::SAMPLE, "sample", 1, {run(Task::SAMPLE)}, {}});
    // The divergence guard (guard.hpp) brackets everything that changes the state, in two
    // parts. HER changes no state and the spectral child only its u: the spectral child opens
    // with a copy of u (kSnapshotSpectral, a few blocks), and the HER child ends with the rest
    // (kSnapshotRest), beside the spectral child in multi-stream mode. Before, the whole copy
    // opened the spectral child, whose power iteration then started behind it and behind HER's
    // kernel, and ddqn waited for it. The cost: the next upload, which waits for the HER
    // child's end, also waits for the copy (a few µs). HER's relabel count, a metric that
    // nothing in the step reads, runs on ddqn's lane 0 beside ddqn's passes.
    const int her = add({ChildId::HER, "her", 1,
                         {run(Task::HER_RELABEL), run(Task::GUARD_SNAPSHOT, 0, kSnapshotRest)},
                         {}});
    // The spectral child reads only the Q nets' weights and its u and writes u (state, copied
    // first) and σ, σ̄, v and the normalised weights (its own scratch); HER reads only the batch
    // and writes the step's transitions, and neither uses lane scratch. So in multi-stream mode
    // the two run side by side, both short chains of small kernels: wall 1.710 → 1.692 ms at
    // B = 16384, TF32 multi-stream, the same bits
    // (bench/results/h200-2026-12-02-spectral-beside-her-before-after.json).
    const int spectral = add({ChildId::SPECTRAL, "spectral", 1,
                              {run(Task::GUARD_SNAPSHOT, 0, kSnapshotSpectral),
                               run(Task::SPECTRAL_POWER)},
                              {}});
    const bool multi = c.exec_mode == FH_EXEC_MULTI_STREAM;
    if (multi) s[spectral].after = s[her].after;

    const int ddqn = add({ChildId::DDQN, "ddqn", 3,
                          {fork(mask_of(1, 2)), run(Task::HER_METRICS),
                           run(Task::DDQN_ONLINE_NEXT, 1), run(Task::DDQN_TARGET, 2),
                           join(mask_of(1, 2)), run(Task::DDQN_JOIN)},
                          {}});
    if (multi) s[ddqn].after = {her, spectral};

    // Branches go round-robin over lanes 1..kMaxLanes-1; with more branches than lanes, a lane
    // runs several in branch order.
    const int branch_lanes = (int)d.NB < kMaxLanes - 1 ? (int)d.NB : kMaxLanes - 1;
    ChildDesc fwd{ChildId::FORWARD, "forward", 1 + branch_lanes, {}, {}};
    const unsigned bl = mask_of(1, branch_lanes);
    fwd.ops.push_back(run(Task::FWD_TRUNK));
    fwd.ops.push_back(fork(bl));
    for (uint32_t b = 0; b < d.NB; ++b) fwd.ops.push_back(run(Task::FWD_BRANCH, 1 + b % branch_lanes, b));
    fwd.ops.push_back(join(bl));
    fwd.ops.push_back(run(Task::TD_LOSS));
    // The TD loss and q_mean sums feed only the metrics: lane 0 sums them while the branch
    // backward runs on the other lanes, instead of the backward waiting for them (forward
    // child 0.446 → 0.434 ms multi-stream at B = 16384,
    // bench/results/h200-2026-12-01-td-metrics-before-after.json).
    fwd.ops.push_back(fork(bl));
    fwd.ops.push_back(run(Task::TD_METRICS));
    // EMA (SPEC §5.5 step 1) on lane 0 beside the branch backward, not first in the aux child:
    // it reads the online nets, which change only in the Adam steps after it, and writes the
    // targets, which nothing reads between ddqn and the aux child's IQN and confidence tasks;
    // so the results are SPEC's order's, and the aux child's serial prefix is shorter: aux child
    // 0.869 → 0.860 ms, wall 1.702 → 1.693 ms at B = 16384, TF32 multi-stream, the same bits
    // (bench/results/h200-2026-12-02-ema-place-before-after.json).
    fwd.ops.insert(fwd.ops.end(), {mark(Mark::AUX_EMA_BEGIN), run(Task::EMA_TARGETS),
                                   mark(Mark::AUX_EMA_END)});
    for (uint32_t b = 0; b < d.NB; ++b) fwd.ops.push_back(run(Task::BWD_BRANCH, 1 + b % branch_lanes, b));
    fwd.ops.push_back(join(bl));
    const bool iql_fwd = iql_beside_trunk_backward(d);
    if (iql_fwd)
        fwd.ops.insert(fwd.ops.end(), {fork(mask_of(2, 1)), mark(Mark::AUX_IQL_BEGIN, 2),
                                       run(Task::IQL, 2), mark(Mark::AUX_IQL_END, 2)});
    fwd.ops.push_back(run(Task::BWD_TRUNK));
    if (iql_fwd) fwd.ops.push_back(join(mask_of(2, 1)));
    add(std::move(fwd));

    // The aux child (SPEC §5.5): IQL on lane 0 where it is not in the forward child, then IQN
    // and attention fork onto lanes 1 and 2, and CQL and the regime scales onto lane 3:
    // they read IQL's ω and the forward child's TD errors, and nothing before the join reads
    // what they write, so they run beside IQN and attention instead of after the join (4.5 % of
    // the step at B = 16384, multi-stream:
    // bench/results/h200-2026-12-01-aux-schedule-before-after.json). Lane 3 is the only lane of
    // the child that issues an NCCL collective (the regime statistics' sum) between the fork and
    // the join, so no two of them run at once. Without CQL (cql_alpha = 0) and with one regime,
    // lane 3 would be empty here: it is not forked, and unless branches use it, not created.
    // The tail, the ensemble and the confidence head, needs IQN's z_mean and nothing of the
    // attention lane: it runs on lane 1 after IQN, beside the end of the attention lane. The Adam
    // steps of IQN and attention end their lanes too, except in a data-parallel step, where both
    // gradients are summed across the ranks in one collective after the join (SPEC §9). Against
    // all of it after the join: aux child 1.178 → 1.173 ms multi-stream at B = 16384, same bits
    // (bench/results/h200-2026-12-02-aux-tail-lanes-before-after.json).
    const bool lane3 = c.cql_alpha > 0 || d.R > 1;
    const int aux_forked = lane3 ? 3 : 2;
    const bool dp = d.world > 1;
    ChildDesc aux{ChildId::AUX, "aux", 1 + aux_forked, {}, {}};
    if (!iql_fwd)
        aux.ops.insert(aux.ops.end(),
                       {mark(Mark::AUX_IQL_BEGIN), run(Task::IQL), mark(Mark::AUX_IQL_END)});
    aux.ops.push_back(fork(mask_of(1, aux_forked)));
    if (c.cql_alpha > 0) aux.ops.push_back(run(Task::CQL, 3));
    if (d.R > 1) aux.ops.push_back(run(Task::REGIME_SCALE, 3));
    const bool tail_early = tail_between_iqn_passes();
    auto tail = [&] {
        aux.ops.insert(aux.ops.end(), {mark(Mark::AUX_TAIL_BEGIN, 1), run(Task::ENSEMBLE, 1),
                                       run(Task::CONFIDENCE, 1)});
        if (!dp || tail_early) aux.ops.push_back(mark(Mark::AUX_TAIL_END, 1));
    };
    aux.ops.insert(aux.ops.end(), {mark(Mark::AUX_IQN_BEGIN, 1), run(Task::IQN, 1)});
    if (tail_early) tail();
    aux.ops.push_back(run(Task::IQN_BACKWARD, 1));
    if (!dp) aux.ops.push_back(run(Task::AUX_ADAM, 1, kAdamIqn));
    aux.ops.push_back(mark(Mark::AUX_IQN_END, 1));
    if (!tail_early) tail();
    aux.ops.insert(aux.ops.end(), {mark(Mark::AUX_ATTN_BEGIN, 2), run(Task::ATTENTION, 2)});
    if (!dp) aux.ops.push_back(run(Task::AUX_ADAM, 2, kAdamAttention));
    aux.ops.insert(aux.ops.end(), {mark(Mark::AUX_ATTN_END, 2), join(mask_of(1, aux_forked))});
    if (dp) {
        aux.ops.push_back(run(Task::AUX_ADAM, 0, kAdamIqn | kAdamAttention));
        if (!tail_early) aux.ops.push_back(mark(Mark::AUX_TAIL_END));
    }
    add(std::move(aux));

    add({ChildId::ADAM, "adam", 1, {run(Task::ADAM_Q), run(Task::GUARD_CHECK)}, {}});
    return s;
}

// The parent graph's edges (ChildDesc::after) point to earlier children, each once, and every
// child ends before the last one starts: its end event is the step's end.
void check_child_order(const std::vector<ChildDesc> &sched) {
    const size_t n = sched.size();
    std::vector<bool> before_last(n, false);
    for (size_t k = n; k-- > 0;) {
        const std::vector<int> &a = sched[k].after;
        for (size_t i = 0; i < a.size(); ++i) {
            const int j = a[i];
            if (j < 0 || (size_t)j >= k || std::count(a.begin(), a.begin() + i, j))
                fail(FH_ERR_INTERNAL, "child %s starts after child %d: not an earlier child, "
                     "or listed twice", sched[k].name, j);
            if (k == n - 1 || before_last[k]) before_last[j] = true;
        }
    }
    for (size_t k = 0; k + 1 < n; ++k)
        if (!before_last[k])
            fail(FH_ERR_INTERNAL, "child %s does not end before the last child", sched[k].name);
}

// Which workspace buffer a lane's handle uses. cuBLAS kernels use the workspace as scratch
// (split-K partials and the like), so two calls that may run at the same time must not share
// one: they would race, and results would depend on timing. Calls that never overlap may:
// - children run one after another but where the parent graph (ChildDesc::after) puts two
//   side by side: the spectral child beside HER in multi-stream mode, neither making a cuBLAS
//   call (tests/test_schedule.cpp checks every pair of tasks that may run at once);
// - inside a child, lanes 1..4 run only between a FORK and its JOIN; lane 0 runs no GEMM
//   between a fork and join that include lane 1 (between the forward child's branch fork and
//   join it sums the TD metrics, between ddqn's the relabel count, each on its own reduction
//   scratch); its trunk backward runs beside IQL on lane 2 alone;
// - act()'s stream waits for the done event of the last launched step, and act() returns only
//   once its own work has finished (also when it fails); the API is single-threaded, so no
//   step is launched while act() runs.
// So lane 0, lane 1 and act() share buffer 0, and lanes 2.. get one each. With a single stream
// nothing overlaps and every lane uses buffer 0.
int workspace_slot(bool multi_stream, int lane) {
    return !multi_stream || lane <= 1 ? 0 : lane - 1;
}

// How much workspace a lane's handle gets: workspace_mib, but half of it for a lane that runs
// nothing but the step's small GEMMs: the branch layers (FWD_BRANCH, BWD_BRANCH) and CQL's
// (lanes 3 and 4 at the default config, lane 3 also running CQL in the aux child).
// The four branch lanes run side by side, so they need four buffers; halving two of them is
// what brings multi-stream to +64 MiB over single-stream at the default config (lane 2:
// 32 MiB, lanes 3 and 4: 16 each). These are the smallest GEMMs of the step (outputs of at
// most B × HB, or weight gradients of at most HB × H with K = B); the lanes that also run the
// trunk on 2B rows, IQN (K = B·N) or attention keep the full size. The fast algorithms for the
// weight gradients probed need at most 8.25 MiB, but cuBLAS's heuristics pick far slower ones
// when told of less than 32 MiB (2.7 times as long for a branch's dV), so cuda/gemm.cpp asks
// them as for 32 MiB and takes the first that fits. Single-stream mode gives each lane the
// same size, so both modes make the same GEMM calls.
size_t lane_workspace_bytes(const fh_config &c, const std::vector<ChildDesc> &sched, int lane) {
    const size_t full = (size_t)c.workspace_mib << 20;
    bool runs = false, small_only = true;
    for (const ChildDesc &ch : sched)
        for (const Op &op : ch.ops)
            if (op.kind == Op::RUN && op.lane == lane) {
                runs = true;
                small_only &= op.task == Task::FWD_BRANCH || op.task == Task::BWD_BRANCH ||
                               op.task == Task::CQL || op.task == Task::REGIME_SCALE;
            }
    return runs && small_only ? full / 2 : full;
}

void workspace_slot_bytes(const fh_config &c, const std::vector<ChildDesc> &sched,
                          size_t out[kMaxLanes]) {
    int nlanes = 1;
    for (const ChildDesc &ch : sched) nlanes = std::max(nlanes, ch.num_lanes);
    const bool multi = c.exec_mode == FH_EXEC_MULTI_STREAM;
    std::fill(out, out + kMaxLanes, size_t{0});
    for (int k = 0; k < nlanes && k < kMaxLanes; ++k) {
        size_t &b = out[workspace_slot(multi, k)];
        b = std::max(b, lane_workspace_bytes(c, sched, k));
    }
}

size_t bf16_stage_bytes(const fh_config &c) {
    return c.math_mode == FH_MATH_BF16 ? kBf16StageElems * 2 + 256 : 0;
}

}  // namespace fh
