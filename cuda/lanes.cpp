#include "lanes.hpp"

#include <algorithm>

#include "common.hpp"
#include "device_memory.hpp"
#include "reduce.cuh"

namespace fh::cuda {

cublasHandle_t make_handle(const fh_config &c, cudaStream_t s, void *ws, size_t ws_bytes) {
    cublasHandle_t h = nullptr;
    FH_CUBLAS(cublasCreate(&h));
    // cublasSetStream resets the workspace to cuBLAS's own pool: set ours after it, so that
    // cuBLAS never allocates (not during capture either).
    const cublasStatus_t st[3] = {
        cublasSetStream(h, s), cublasSetWorkspace(h, ws, ws_bytes),
        cublasSetMathMode(h, c.math_mode == FH_MATH_STRICT ? CUBLAS_DEFAULT_MATH
                                                            : CUBLAS_TF32_TENSOR_OP_MATH)};
    for (cublasStatus_t e : st)
        if (e != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(h);
            FH_CUBLAS(e);
        }
    return h;
}

// Which workspace buffer a lane's handle uses. cuBLAS kernels use the workspace as scratch
// (split-K partials and the like), so two calls that may run at the same time must not share
// one: they would race, and results would depend on timing. Calls that never overlap may:
// - the children run one after another (the parent graph is a chain);
// - inside a child, lane 0 runs before its FORK and after its JOIN, lanes 1..4 only between
//   them: lane 0 is idle while they run, and they all run side by side;
// - act()'s stream waits for the done event of the last launched step, and act() returns only
//   once its own work has finished (also when it fails); the API is single-threaded, so no
//   step is launched while act() runs.
// So lane 0, lane 1 and act() share buffer 0, and lanes 2.. get one each. With a single stream
// nothing overlaps and every lane uses buffer 0.
int Lanes::slot(int lane) const { return !multi_ || lane <= 1 ? 0 : lane - 1; }

namespace {

// How much workspace a lane's handle gets: workspace_mib, but half of it for a lane that runs
// nothing but branch layers (FWD_BRANCH, BWD_BRANCH: lanes 3 and 4 at the default config). The
// four branch lanes run side by side, so they need four buffers; halving two of them is what
// brings multi-stream to +64 MiB over single-stream at the default config (lane 2: 32 MiB,
// lanes 3 and 4: 16 each). The branch layers are the smallest GEMMs of the step (outputs of at
// most B × HB, or HB × H for the weight gradients with K = B); the lanes that also run the
// trunk on 2B rows, IQN (K = B·N) or attention keep the full size. Half is a budget, not a
// measured need: were cuBLAS to want more for these shapes, branches 2 and 3 would get another
// (equally deterministic) algorithm than branches 0 and 1. Single-stream mode gives each lane
// the same size, so both modes make the same GEMM calls.
size_t lane_workspace(const fh_config &c, const std::vector<ChildDesc> &sched, int lane) {
    const size_t full = (size_t)c.workspace_mib << 20;
    bool runs = false, branch_only = true;
    for (const ChildDesc &ch : sched)
        for (const Op &op : ch.ops)
            if (op.kind == Op::RUN && op.lane == lane) {
                runs = true;
                branch_only &= op.task == Task::FWD_BRANCH || op.task == Task::BWD_BRANCH;
            }
    return runs && branch_only ? full / 2 : full;
}

}  // namespace

Lanes::Lanes(const fh_config &c, const std::vector<ChildDesc> &sched, size_t col_doubles,
             DeviceMemory &mem)
    : multi_(c.exec_mode == FH_EXEC_MULTI_STREAM), nlanes_(1), compute_(compute_type(c)) {
    for (const ChildDesc &ch : sched) nlanes_ = std::max(nlanes_, ch.num_lanes);
    if (nlanes_ > kMaxLanes)
        fail(FH_ERR_INTERNAL, "schedule uses %d lanes > %d", nlanes_, kMaxLanes);
    for (int k = 0; k < nlanes_; ++k) ws_bytes_[k] = lane_workspace(c, sched, k);
    try {
        size_t slot_bytes[kMaxLanes] = {};
        for (int k = 0; k < nlanes_; ++k)
            slot_bytes[slot(k)] = std::max(slot_bytes[slot(k)], ws_bytes_[k]);
        for (int k = 0; k < kMaxLanes; ++k)
            if (slot_bytes[k]) ws_[k] = mem.alloc(MEM_WS, slot_bytes[k]);
        for (int k = 0; k < (multi_ ? nlanes_ : 1); ++k)
            FH_CUDA(cudaStreamCreateWithFlags(&streams_[k], cudaStreamNonBlocking));
        for (int k = 0; k < nlanes_; ++k) {
            handles_[k] = make_handle(c, stream(k), workspace(k), ws_bytes_[k]);
            FH_CUBLAS(cublasSetAtomicsMode(handles_[k], CUBLAS_ATOMICS_NOT_ALLOWED));
            col_[k] = mem.alloc_n<double>(MEM_ACT, col_doubles);
            red_[k] = mem.alloc_n<double>(MEM_ACT, kRedMaxBlocks);
        }
    } catch (...) {
        release();
        throw;
    }
}

void Lanes::release() noexcept {
    for (int k = 0; k < kMaxLanes; ++k) {
        if (handles_[k]) cublasDestroy(handles_[k]);
        if (streams_[k]) cudaStreamDestroy(streams_[k]);
        handles_[k] = nullptr;
        streams_[k] = nullptr;
    }
}

LaneCtx Lanes::ctx(int lane) const {
    return LaneCtx{stream(lane), Blas{handles_[lane], compute_}, col_[lane], red_[lane]};
}

}  // namespace fh::cuda
