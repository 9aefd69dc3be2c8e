// act() (SPEC §7) on the GPU: eager, on its own stream and cuBLAS handle, after the last
// launched step. One power iteration from the stored u into a scratch u (the stored u is not
// changed), W/σ into scratch, the online forward in chunks of kChunk rows (scratch allocated
// at creation, activations in place), argmax and ε-greedy in one kernel, copies back.
#pragma once
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "config.hpp"
#include "cuda_step.hpp"

namespace fh::cuda {

class DeviceMemory;
class Lanes;

class Actor {
public:
    // Borrows lane 0's cuBLAS workspace and bfloat16 stage (src/schedule.cpp says why that
    // is safe).
    Actor(const fh_config &c, const Layout &L, DeviceMemory &mem, const Lanes &lanes);
    Actor(const Actor &) = delete;
    Actor &operator=(const Actor &) = delete;
    ~Actor() { release(); }
    void release() noexcept;

    // Acts with the parameters of `st` once the event `step_done` has happened; returns when
    // the results are in `actions` (and `q_values` when not null).
    void act(const CudaStep &st, cudaEvent_t step_done, const float *obs, const float *goal,
             uint32_t n, float epsilon, uint64_t act_call, int32_t *actions, float *q_values);

private:
    void run(const CudaStep &st, cudaEvent_t step_done, const float *obs, const float *goal,
             uint32_t n, float epsilon, uint64_t act_call, int32_t *actions, float *q_values);

    static constexpr int kChunk = 4096;  // rows per pass
    const fh_config &cfg_;
    const Layout &L_;
    Dims d_;
    cudaStream_t stream_ = nullptr;
    Blas blas_{};  // its own handle on stream_; lane 0's workspace and bfloat16 stage
    QCache c_;
    float *x_ = nullptr, *weff_[2] = {}, *u_ = nullptr, *v_ = nullptr, *sigma_ = nullptr,
          *qv_ = nullptr;
    double *row_ = nullptr;
    int32_t *actions_ = nullptr;
    float *h_x_ = nullptr, *h_qv_ = nullptr;  // pinned
    int32_t *h_actions_ = nullptr;
};

}  // namespace fh::cuda
