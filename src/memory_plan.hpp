// The memory a config needs, computed from its dimensions alone, before anything is allocated:
// fh_memory_plan() reports it, fh_pipeline_create() refuses a config that needs more than the
// machine has, and the CPU backend's fh_pipeline_memory() is this same count.
//
// CPU: every buffer the CPU backend and its step hold (src/cpu), exactly.
// CUDA: cuda_backend.cu's create(), the learners' arenas (iql.cu, iqn.cu, attention.cu) and
// the divergence guard (guard.cu), buffer by buffer. Two small scratch terms depend on the
// device (the attention backward's per-block partials, sized by occupancy) and are bounded from
// above, so the plan is an upper bound of fh_pipeline_memory() within a few MiB
// (tests/test_cuda_memory_plan.cpp compares them on a GPU). Keep it in step with those files.
#pragma once
#include <foxhunt.h>
#include <cstdint>
#include <string>

#include "config.hpp"
#include "layout.hpp"

namespace fh {

struct MemoryPlan {
    // As fh_memory_report: parameters, activations, workspaces, batch_staging.
    uint64_t parameters = 0, activations = 0, workspaces = 0, batch_staging = 0;
    // CPU: of activations, what the first step allocates (caches, learners' scratch).
    uint64_t first_step = 0;
    // The largest scratch a task holds only while it runs (not in the total).
    uint64_t transient = 0;
    // Where the total and the transient scratch live: host memory (pinned on CUDA) and device.
    uint64_t host = 0, device = 0;
    uint64_t total() const { return parameters + activations + workspaces + batch_staging; }
};

// @p backend is FH_BACKEND_CPU or FH_BACKEND_CUDA (resolved).
MemoryPlan plan_memory(const fh_config &c, const Layout &L, int backend);

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
