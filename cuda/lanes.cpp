#include "lanes.hpp"

#include <algorithm>

#include "common.hpp"
#include "device_memory.hpp"
#include "linear_silu.hpp"
#include "reduce.cuh"

namespace fh::cuda {

cublasHandle_t make_handle(const fh_config &c, cudaStream_t s, void *ws, size_t ws_bytes) {
    cublasHandle_t h = nullptr;
    FH_CUBLAS(cublasCreate(&h));
    // cublasSetStream resets the workspace to cuBLAS's own pool: set ours after it, so that
    // cuBLAS never allocates (not during capture either).
    const cublasStatus_t st[3] = {
        cublasSetStream(h, s), cublasSetWorkspace(h, ws, ws_bytes),
        cublasSetMathMode(h, c.math_mode == FH_MATH_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                          : CUBLAS_DEFAULT_MATH)};
    for (cublasStatus_t e : st)
        if (e != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(h);
            FH_CUBLAS(e);
        }
    return h;
}

int Lanes::slot(int lane) const { return workspace_slot(multi_, lane); }

Lanes::Lanes(const fh_config &c, const std::vector<ChildDesc> &sched, size_t col_doubles,
             DeviceMemory &mem)
    : multi_(c.exec_mode == FH_EXEC_MULTI_STREAM), nlanes_(1), compute_(compute_type(c)),
      linear_tc_(linear_tc_enabled(c)), linear_bf16_(c.math_mode == FH_MATH_BF16) {
    for (const ChildDesc &ch : sched) nlanes_ = std::max(nlanes_, ch.num_lanes);
    if (nlanes_ > kMaxLanes)
        fail(FH_ERR_INTERNAL, "schedule uses %d lanes > %d", nlanes_, kMaxLanes);
    for (int k = 0; k < nlanes_; ++k) ws_bytes_[k] = lane_workspace_bytes(c, sched, k);
    try {
        size_t slot_bytes[kMaxLanes];
        workspace_slot_bytes(c, sched, slot_bytes);
        const size_t stage = bf16_stage_bytes(c);
        for (int k = 0; k < kMaxLanes; ++k) {
            if (!slot_bytes[k]) continue;
            ws_[k] = mem.alloc(MEM_WS, slot_bytes[k] + stage);
            if (stage) stage_[k] = (char *)ws_[k] + slot_bytes[k];
        }
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
    return LaneCtx{stream(lane),
                   Blas{handles_[lane], compute_, bf16_stage(lane), linear_tc_, workspace(lane),
                        ws_bytes_[lane], linear_bf16_},
                   col_[lane], red_[lane]};
}

}  // namespace fh::cuda
