// The step of SPEC §5 as plain data: six child graphs (seven with a replay: "sample" first),
// each a list of operations on lanes.
// Built once from the config; the CPU executor runs the tasks in list order (fork and join are
// no-ops there), the CUDA executor captures each child with its lanes on streams. Single-stream
// execution is the same list with every lane mapped to one stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config.hpp"

namespace fh {

// SAMPLE runs first when it exists; it is numbered last so that the others keep their numbers.
enum class ChildId : int { HER = 0, SPECTRAL, DDQN, FORWARD, AUX, ADAM, SAMPLE, COUNT };

enum class Task : int {
    SAMPLE,            // §5.0: the batch drawn from the replay (only with a replay)
    HER_RELABEL,       // §5.1: x~, x~', r~, d~
    HER_METRICS,       // §5.1: the relabel count, summed over the rows (the step's metric; the
                       // CPU's HER_RELABEL counts in its pass)
    SPECTRAL_POWER,    // §5.2: one power iteration, sigma, sigma_target, W/sigma
    DDQN_ONLINE_NEXT,  // §5.3 lane A: online forward on x~', argmax a*
    DDQN_TARGET,       // §5.3 lane B: target forward on [x~; x~']
    DDQN_JOIN,         // §5.3 join: y [B, NB], Qbar_sa [B]
    FWD_TRUNK,         // §5.4: online trunk on x~ (and the confidence head)
    FWD_BRANCH,        // §5.4: branch `arg` forward
    TD_LOSS,           // §5.4: delta, L_td, q_mean, dz for every branch
    BWD_BRANCH,        // §5.4: branch `arg` backward: dU, de, dV, dc, dh2_b
    BWD_TRUNK,         // §5.4: dh2 = sum_b dh2_b in branch order, trunk backward, d_states
    EMA_TARGETS,       // §5.5.1: Polyak update of the Q and IQN targets
    IQL,               // §5.5.2: both expectile nets, their Adam, advantage weights
    IQN,               // §5.5.3: the forward passes and the loss: z_mean, dL/dh (the CPU
                       // computes the gradient here too)
    IQN_BACKWARD,      // §5.5.3: the gradient (nothing on the CPU: IQN computed it)
    ATTENTION,         // §5.5.4: loss and gradient
    AUX_ADAM,          // §5.5.3–4: the Adam steps of the learners in `arg` (kAdamIqn,
                       // kAdamAttention), each at the end of its lane; in a data-parallel step
                       // both after the join, their gradients summed across ranks at once (§9)
    CQL,               // §5.5.5
    ENSEMBLE,          // §5.5.6
    CONFIDENCE,        // §5.5.7
    REGIME_SCALE,      // §5.5.8
    ADAM_Q,            // §5.6: clip and Adam over the flat Q-net buffer
    GUARD_SNAPSHOT,    // guard.hpp: copy the persistent buffers of part `arg` aside
    GUARD_CHECK,       // guard.hpp: first non-finite quantity; if any, restore (last in adam)
    TD_METRICS,        // §5.4: L_td and q_mean, summed over the rows (the step's metrics; the
                       // CPU's TD_LOSS computes them in its pass)
};

// Timing marks of the aux learners (fh_timings.aux_*_ms are differences of these; IQL's pair
// may sit in the forward child: schedule.cpp, iql_beside_trunk_backward).
enum class Mark : int {
    AUX_EMA_BEGIN, AUX_EMA_END, AUX_IQL_BEGIN, AUX_IQL_END,
    AUX_IQN_BEGIN, AUX_IQN_END, AUX_ATTN_BEGIN, AUX_ATTN_END,
    AUX_TAIL_BEGIN, AUX_TAIL_END, COUNT
};

// AUX_ADAM's arg: which learners' Adam steps it runs.
constexpr int kAdamIqn = 1, kAdamAttention = 2;
// GUARD_SNAPSHOT's arg: the part of the persistent buffers it copies (guard.hpp,
// snapshot_part): what the spectral child changes (its power iteration's u), or all the rest.
constexpr int kSnapshotSpectral = 1, kSnapshotRest = 2;

struct Op {
    enum Kind { RUN, FORK, JOIN, MARK } kind;
    Task task;      // RUN
    int lane;       // RUN, MARK: lane it runs on (0 = the child's origin lane)
    int arg;        // RUN: branch index for *_BRANCH tasks, learners for AUX_ADAM, the part for
                    // GUARD_SNAPSHOT; MARK: the Mark
    unsigned lanes; // FORK/JOIN: bit mask of the lanes forked from / joined into lane 0
};

struct ChildDesc {
    ChildId id;
    const char *name;
    int num_lanes;  // lanes used, the origin lane included
    std::vector<Op> ops;
    // The children this one starts after: indices into the schedule, all earlier than its own
    // (empty: it starts with the step), each once. The CUDA executor's parent graph has these
    // edges and no others, so two children neither of which comes after the other run side by
    // side; they must share no buffer, no workspace and no lane (but HER and the spectral
    // child, which use no lane scratch and no cuBLAS: tests/test_schedule.cpp checks the lanes
    // and workspaces). The CPU executor runs the children in list order, a topological order of
    // these edges. The last child comes after every other one.
    std::vector<int> after;
};

// Lanes a pipeline owns: enough for the widest child.
constexpr int kMaxLanes = 5;

std::vector<ChildDesc> build_schedule(const Dims &d, const fh_config &c);
// FH_ERR_INTERNAL unless every ChildDesc::after entry names an earlier child, once, and every
// child ends before the last one starts (the executors call it on build_schedule's list).
void check_child_order(const std::vector<ChildDesc> &sched);

// The CUDA executor's cuBLAS workspaces (cuda/lanes.cpp allocates them; plain data here so
// that the memory plan counts the same bytes): the workspace bytes lane @p lane's handle gets,
// the buffer ("slot") it uses, and each slot's bytes, the most of the lanes that use it (0 for
// a slot no lane uses; act() borrows slot 0).
size_t lane_workspace_bytes(const fh_config &c, const std::vector<ChildDesc> &sched, int lane);
int workspace_slot(bool multi_stream, int lane);
void workspace_slot_bytes(const fh_config &c, const std::vector<ChildDesc> &sched,
                          size_t out[kMaxLanes]);
// FH_MATH_BF16: the bfloat16 copies of a GEMM's operands are staged after each used slot's
// workspace (cuda/gemm_bf16.cu), so lanes that share a workspace share the staging too, for
// the same reason. kBf16StageElems elements, bytes per slot; 0 in the other modes.
constexpr size_t kBf16StageElems = size_t{1} << 22;
size_t bf16_stage_bytes(const fh_config &c);

}  // namespace fh
