// The lanes of the schedule: up to kMaxLanes logical lanes, each with its own cuBLAS handle
// (bound to the lane's stream and workspace, the pipeline's math mode, no atomics in cuBLAS's
// own calls; cublasLt ignores that setting, and its split-K reductions are ordered: in place by
// counters, or in a separate pass) and its own reduction scratch. With FH_EXEC_MULTI_STREAM
// each lane has its own stream; with FH_EXEC_SINGLE_STREAM every lane runs on lane 0's stream
// (same handles, same workspace sizes, so the GEMMs are the same calls in both modes). Lanes
// that never run at the same time share a workspace buffer, and lanes that run only the branch
// layers get half a workspace (src/schedule.cpp says why: the memory plan counts the same
// bytes). In FH_MATH_BF16 each buffer also holds the staging of its GEMMs' bfloat16 operands.
#pragma once
#include <cstddef>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "config.hpp"
#include "cuda_step.hpp"
#include "schedule.hpp"

namespace fh::cuda {

class DeviceMemory;

class Lanes {
public:
    // The lanes `sched` uses; `col_doubles` of column-sum scratch per lane.
    Lanes(const fh_config &c, const std::vector<ChildDesc> &sched, size_t col_doubles,
          DeviceMemory &mem);
    Lanes(const Lanes &) = delete;
    Lanes &operator=(const Lanes &) = delete;
    ~Lanes() { release(); }
    void release() noexcept;

    bool multi() const { return multi_; }
    int count() const { return nlanes_; }
    cudaStream_t stream(int lane) const { return multi_ ? streams_[lane] : streams_[0]; }
    LaneCtx ctx(int lane) const;
    // Lane `lane`'s cuBLAS workspace (act() borrows lane 0's: see src/schedule.cpp).
    void *workspace(int lane) const { return ws_[slot(lane)]; }
    size_t workspace_bytes(int lane) const { return ws_bytes_[lane]; }
    // FH_MATH_BF16: where lane `lane`'s GEMMs stage their bfloat16 operands (after its slot's
    // workspace; act() borrows lane 0's); null in the other modes.
    void *bf16_stage(int lane) const { return stage_[slot(lane)]; }

private:
    int slot(int lane) const;

    bool multi_;
    int nlanes_;
    cublasComputeType_t compute_;
    bool linear_tc_;    // Blas::linear_tc of every lane
    bool linear_bf16_;  // Blas::linear_bf16 of every lane
    cudaStream_t streams_[kMaxLanes] = {};
    cublasHandle_t handles_[kMaxLanes] = {};
    void *ws_[kMaxLanes] = {};         // per slot
    void *stage_[kMaxLanes] = {};      // per slot: ws_ + the slot's workspace bytes, or null
    size_t ws_bytes_[kMaxLanes] = {};  // per lane
    double *col_[kMaxLanes] = {}, *red_[kMaxLanes] = {};
};

// A handle for `s` with the pipeline's math mode and `ws_bytes` of workspace at `ws`.
cublasHandle_t make_handle(const fh_config &c, cudaStream_t s, void *ws, size_t ws_bytes);

}  // namespace fh::cuda
