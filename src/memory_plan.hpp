// The memory a config needs, computed from its dimensions alone, before anything is allocated:
// fh_memory_plan() reports it, fh_pipeline_create() refuses a config that needs more than the
// machine has, and the CPU backend's fh_pipeline_memory() is this same count.
//
// CPU: every buffer the CPU backend and its step hold (src/cpu), the replay included, exactly.
// CUDA: the executor's allocations buffer by buffer (cuda/cuda_step.cpp, lanes.cpp with the
// workspaces of schedule.cpp, upload.cpp, act.cu), the learners' arenas (iql.cu, iqn.cu,
// attention.cu), the divergence guard (guard.cu) and the replay's ring (replay.cu). The
// attention learner's partial rows and scratch follow the device's occupancy: the device is
// asked (cuda_attention_sizes), so the plan is what fh_pipeline_memory() reports, category by
// category (tests/test_cuda_memory_plan.cpp compares them on a GPU). Keep it in step with
// those files.
#pragma once
#include <foxhunt.h>
#include <algorithm>
#include <cstdint>
#include <string>

#include "config.hpp"
#include "layout.hpp"

namespace fh {

// The CUDA spectral power iteration (cuda/spectral.cu): the width of its one-block kernels, and
// the double scratch one iteration over an SN layer W [H, cols] needs: row and rowt [H] and the
// column groups' partial sums (G·cols <= 1024 when cols <= 1024, else cols), for every SN
// layer's cols <= max(D, H). The step and act() each hold one; the plan counts both.
constexpr int kPowerBlockThreads = 1024;
inline uint64_t power_scratch_doubles(const Dims &d) {
    return 2 * (uint64_t)d.H + std::max<uint64_t>(kPowerBlockThreads, std::max(d.D, d.H));
}

// The ddqn child's forward-only passes run the Q net's NB branches packed (cuda/qnet.cu,
// q_forward_branches_packed) when the heads' outputs fit the dead h1 buffer (NB·A <= H) and
// there is more than one branch: the branches' weights side by side, [NB·HB, H] first layers
// with their biases and the heads as one block-diagonal [NB·A, NB·HB] matrix with theirs.
// The online-next and target passes each hold one such copy; each of its four parts starts
// 256 bytes after the previous one's start, rounded up (aligned operands for cuBLAS).
inline bool ddqn_branches_packed(const Dims &d) { return d.NB > 1 && d.NB * d.A <= d.H; }
// W1t [H, D] and W2t [H, H]: the pass's trunk matrices (spectrally normalised where SN applies)
// rounded to TF32 (to bfloat16 in FH_MATH_BF16), which the fused SiLU layers read
// (cuda/linear_silu.cu); Vcat is rounded too then. W2T [H, H] and VcatT [H, NB·HB]: W2's and
// Vcat's transposes, rounded, which the fused SiLU' layers of the trunk backward read
// (cuda/td.cu). Written only where those layers run.
struct PackedBranches {
    uint64_t Vcat, ccat, Ubd, ecat, W1t, W2t, W2T, VcatT, total;  // offsets in floats, the size
};
inline PackedBranches packed_branches(const Dims &d) {
    const uint64_t nh = (uint64_t)d.NB * d.HB, na = (uint64_t)d.NB * d.A;
    auto up = [](uint64_t n) { return (n + 63) / 64 * 64; };
    PackedBranches p;
    p.Vcat = 0;
    p.ccat = up(nh * d.H);
    p.Ubd = p.ccat + up(nh);
    p.ecat = p.Ubd + up(na * nh);
    p.W1t = p.ecat + up(na);
    p.W2t = p.W1t + up((uint64_t)d.H * d.D);
    p.W2T = p.W2t + up((uint64_t)d.H * d.H);
    p.VcatT = p.W2T + up((uint64_t)d.H * d.H);
    p.total = p.VcatT + nh * d.H;
    return p;
}
inline uint64_t packed_branch_floats(const Dims &d) { return packed_branches(d).total; }
// Whether the Q net's backward (cuda/td.cu) keeps the branches' dpre side by side, [B, NB·HB],
// and sums dh2 = Σ_b dpre_b V_b in one product against ddqn's packed V_cat: then dh2 is one
// [B, H] buffer instead of one per branch. It needs the pack, so it goes with ddqn's packing.
inline bool dh2_one_product(const Dims &d) { return ddqn_branches_packed(d); }
inline uint64_t dh2_floats(const Dims &d) {
    return (dh2_one_product(d) ? 1 : (uint64_t)d.NB) * d.B * d.H;
}

// The aux tail's per-block partial sums (cuda/ensemble.cu, confidence.cu): the ensemble's
// grid (grid_for(B): 256 threads per block, at most 8192 blocks) holds one double per block;
// the confidence head's blocks of kConfidenceRows rows one row of H + 2 each (w_u's gradient,
// then b_u's and the loss).
inline uint64_t ensemble_blocks(uint64_t B) {
    return std::min<uint64_t>(std::max<uint64_t>(1, (B + 255) / 256), 8192);
}
constexpr uint64_t kConfidenceRows = 64;
inline uint64_t confidence_chunks(uint64_t B) {
    return std::max<uint64_t>(1, (B + kConfidenceRows - 1) / kConfidenceRows);
}
inline uint64_t confidence_partial_doubles(const Dims &d) { return confidence_chunks(d.B) * (d.H + 2); }

// The regime scales' scratch (cuda/regime.cu): the 2R sums [sum_k, count_k], then one such row
// per block of kRegimeRows rows.
constexpr uint64_t kRegimeRows = 256;
inline uint64_t regime_blocks(uint64_t B) {
    return std::max<uint64_t>(1, (B + kRegimeRows - 1) / kRegimeRows);
}
inline uint64_t regime_scratch_doubles(const Dims &d) { return (1 + regime_blocks(d.B)) * 2 * d.R; }

struct MemoryPlan {
    // As fh_memory_report: parameters, activations, workspaces, batch_staging, replay.
    uint64_t parameters = 0, activations = 0, workspaces = 0, batch_staging = 0, replay = 0;
    // CPU: of activations, what the first step allocates (caches, learners' scratch).
    uint64_t first_step = 0;
    // The largest scratch a task holds only while it runs (not in the total).
    uint64_t transient = 0;
    // Where the total and the transient scratch live: host memory (pinned on CUDA) and device.
    uint64_t host = 0, device = 0;
    uint64_t total() const {
        return parameters + activations + workspaces + batch_staging + replay;
    }
};

// @p backend is FH_BACKEND_CPU or FH_BACKEND_CUDA (resolved; CUDA asks the device).
MemoryPlan plan_memory(const fh_config &c, const Layout &L, int backend);

// The columns of the CUDA attention learner's [pool | ā | aug | 0] matrix, the right operand of
// its weight-gradient GEMM (cuda/attention.cu): 2·attn_d_model + td + G + 1 rounded up to a
// multiple of 4, so that its rows start 16-byte aligned.
inline uint64_t attention_rhs_cols(const Dims &d) {
    return (2 * (uint64_t)d.d + d.td + d.G + 1 + 3) / 4 * 4;
}

// The floats of the CUDA attention learner's factored head (cuda/attention_head_factored.cu):
// C1 [64, 64] | C2 [64, na] | G [64, LR − 64] (na = td + G + 1, LR = attention_rhs_cols), where
// it runs: TF32 or BF16 math at attn_d_model = attn_head_hidden = 64 with na ≤ 32; else 0.
uint64_t attention_head_factored_floats(const Dims &d, const fh_config &c);

// The columns of the attention learner's two [B, ·] matrices as it stores them: the weight
// gradients' right operand [pool | ā | aug | 0] (attention_rhs_cols) and left operand
// [dh | dpool] (hh + d); where the head is factored (attention_head_factored_floats > 0) there
// is no pool or dpool: [ā | aug | 0] (attention_rhs_cols − d) and [dh] (hh).
struct AttentionBatchCols {
    uint64_t rhs, lhs;
};
AttentionBatchCols attention_batch_cols(const Dims &d, const fh_config &c);

// The attention learner's sizes that depend on the device: the partial rows of its backward
// and its kernel path's scratch bytes (cuda/attention_paths.hpp).
struct AttentionSizes {
    uint64_t partial_rows = 0, scratch_bytes = 0;
};
// Those of the path a CUDA pipeline of @p c would use on c.device (cuda/device_queries.cpp;
// FH_ERR_NO_CUDA in a build without CUDA).
AttentionSizes cuda_attention_sizes(const fh_config &c, const Dims &d);
// The CUDA plan with those sizes given (plan_memory() asks the device for them).
MemoryPlan plan_cuda(const fh_config &c, const Layout &L, const AttentionSizes &attn);

// The largest single array of a config's step that the CUDA executor indexes with 32-bit
// integers, in elements, and its name. A config whose arrays exceed 2^31 − 1 elements is
// refused (FH_ERR_BAD_DIMENSION) on both backends, so that a checkpoint moves between them,
// even where each dimension is within its own limit. (The CPU's attention tensors, [B·T, d],
// are larger but size_t-indexed, and the CUDA executor factors them away.)
uint64_t largest_array(const Dims &d, const char **name);

// Bytes of host memory available to this process now: MemAvailable (/proc/meminfo), less
// where a cgroup v2 memory.max is lower; @p source says which. UINT64_MAX if unknown.
uint64_t host_available_bytes(std::string *source);

// Refuses (FH_ERR_OUT_OF_MEMORY) a plan that does not fit: "needs X bytes (...), Y available
// (source)". @p where: "host memory" or "device memory of CUDA device N".
void check_fits(uint64_t need, uint64_t available, const std::string &where,
                const std::string &source, const MemoryPlan &p);

}  // namespace fh
