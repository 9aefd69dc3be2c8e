// The lanes of the schedule: up to kMaxLanes streams, each with its own cuBLAS handle (bound
// to that stream, a user workspace, the pipeline's math mode, no atomics), and each lane's
// reduction scratch. With FH_EXEC_SINGLE_STREAM every lane runs on lane 0's stream.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "config.hpp"
#include "cuda_step.hpp"
#include "schedule.hpp"

namespace fh::cuda {

class DeviceMemory;

class Lanes {
public:
    // `nlanes` logical lanes (the schedule's widest child); `col_doubles` of column-sum
    // scratch per lane.
    Lanes(const fh_config &c, int nlanes, size_t col_doubles, DeviceMemory &mem);
    Lanes(const Lanes &) = delete;
    Lanes &operator=(const Lanes &) = delete;
    ~Lanes() { release(); }
    void release() noexcept;

    bool multi() const { return multi_; }
    int count() const { return nlanes_; }
    cudaStream_t stream(int lane) const { return multi_ ? streams_[lane] : streams_[0]; }
    LaneCtx ctx(int lane) const;

private:
    bool multi_;
    int nlanes_;
    cublasComputeType_t compute_;
    cudaStream_t streams_[kMaxLanes] = {};
    cublasHandle_t handles_[kMaxLanes] = {};
    double *col_[kMaxLanes] = {}, *red_[kMaxLanes] = {};
};

// A handle for `s` with the pipeline's math mode and `ws_bytes` of workspace at `ws`.
cublasHandle_t make_handle(const fh_config &c, cudaStream_t s, void *ws, size_t ws_bytes);

}  // namespace fh::cuda
