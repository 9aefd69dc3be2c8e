#include "act.hpp"

#include <algorithm>
#include <cstring>

#include "common.hpp"
#include "device_memory.hpp"
#include "device_math.cuh"
#include "philox.hpp"
#include "lanes.hpp"
#include "memory_plan.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// Per row and branch: argmax of q (ties lowest), ε-greedy with Philox purpose 5 on
// (row0 + i, b, act_call); q_values [n, NB, A] when not null.
__global__ void k_act_select(const float *q, int n, int NB, int A, uint64_t seed, uint32_t row0,
                             uint32_t act_call, float epsilon, int32_t *actions,
                             float *q_values) {
    pdl_enter();
    const size_t total = (size_t)n * NB;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / NB, b = k % NB;
        const float *row = q + b * (size_t)n * A + i * A;
        uint32_t best = (uint32_t)dev_first_argmax(row, A);
        const Words w = philox(seed, row0 + (uint32_t)i, (uint32_t)b, act_call, PURPOSE_ACT);
        if (uniform24(w.w[0]) < epsilon) best = uniform_index(w.w[1], (uint32_t)A);
        actions[k] = (int32_t)best;
        if (q_values)
            for (int a = 0; a < A; ++a) q_values[k * A + a] = row[a];
    }
}

}  // namespace

Actor::Actor(const fh_config &c, const Layout &L, DeviceMemory &mem, const Lanes &lanes)
    : cfg_(c), L_(L), d_(L.dims) {
    const Dims &d = d_;
    try {
        FH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        blas_ = Blas{make_handle(c, stream_, lanes.workspace(0), lanes.workspace_bytes(0)),
                     compute_type(c), lanes.bf16_stage(0), false, lanes.workspace(0),
                     lanes.workspace_bytes(0)};
        alloc_qcache(mem, d, c_, kChunk, false, false);
        x_ = mem.floats(MEM_ACT, (size_t)kChunk * d.D);
        const size_t cols[2] = {d.D, d.H};
        const bool sn[2] = {d.sn1, d.sn2};
        for (int k = 0; k < 2; ++k)
            if (sn[k]) weff_[k] = mem.floats(MEM_ACT, (size_t)d.H * cols[k]);
        u_ = mem.floats(MEM_ACT, d.H);
        v_ = mem.floats(MEM_ACT, std::max(d.D, d.H));
        sigma_ = mem.floats(MEM_ACT, 2);
        row_ = mem.alloc_n<double>(MEM_ACT, power_scratch_doubles(d));
        qv_ = mem.floats(MEM_ACT, (size_t)kChunk * d.NB * d.A);
        actions_ = mem.alloc_n<int32_t>(MEM_ACT, (size_t)kChunk * d.NB);
        // Pinned host copies, not part of fh_pipeline_memory's device categories.
        h_x_ = static_cast<float *>(mem.pinned(MEM_CATS, (size_t)kChunk * d.D * 4));
        h_qv_ = static_cast<float *>(mem.pinned(MEM_CATS, (size_t)kChunk * d.NB * d.A * 4));
        h_actions_ = static_cast<int32_t *>(mem.pinned(MEM_CATS, (size_t)kChunk * d.NB * 4));
    } catch (...) {
        release();
        throw;
    }
}

void Actor::release() noexcept {
    if (stream_) cudaStreamSynchronize(stream_);
    if (blas_.handle) cublasDestroy(blas_.handle);
    if (stream_) cudaStreamDestroy(stream_);
    blas_.handle = nullptr;
    stream_ = nullptr;
}

void Actor::act(const CudaStep &st, cudaEvent_t step_done, const float *obs, const float *goal,
                uint32_t n, float epsilon, uint64_t act_call, int32_t *actions,
                float *q_values) {
    try {
        run(st, step_done, obs, goal, n, epsilon, act_call, actions, q_values);
    } catch (...) {
        // Nothing of act() may still run when it returns: its GEMMs use lane 0's workspace,
        // which the next step's do too.
        cudaStreamSynchronize(stream_);
        cudaGetLastError();
        throw;
    }
}

void Actor::run(const CudaStep &st, cudaEvent_t step_done, const float *obs, const float *goal,
                uint32_t n, float epsilon, uint64_t act_call, int32_t *actions,
                float *q_values) {
    const Dims &d = d_;
    cudaStream_t s = stream_;
    // The parameters of the last launched step: act only reads parameters, so it waits for the
    // step graph alone, not for an upload.
    FH_CUDA(cudaStreamWaitEvent(s, step_done, 0));
    const float *p = st.buf[BUF_Q];
    const size_t off[2] = {L_.q.W1, L_.q.W2};
    const int cols[2] = {(int)d.D, (int)d.H};
    const bool sn[2] = {d.sn1, d.sn2};
    const float *W[2] = {p + off[0], p + off[1]};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        // σ from one power iteration on a scratch copy of u: the stored u is not changed.
        power_iteration(W[k], nullptr, (int)d.H, cols[k], st.buf[BUF_SN_U] + (size_t)k * d.H, u_,
                        v_, row_, sigma_ + k, nullptr, s);
        sn_scale(W[k], sigma_ + k, weff_[k], nullptr, nullptr, nullptr, (size_t)d.H * cols[k], s);
        W[k] = weff_[k];
    }
    const QView w{p, W[0], W[1]};
    const LaneCtx l{s, blas_, nullptr, nullptr};
    for (uint32_t row0 = 0; row0 < n; row0 += kChunk) {
        const int m = (int)std::min<uint32_t>(kChunk, n - row0);
        for (int i = 0; i < m; ++i) {
            float *x = h_x_ + (size_t)i * d.D;
            memcpy(x, obs + (size_t)(row0 + i) * d.O, d.O * sizeof(float));
            if (d.G) memcpy(x + d.O, goal + (size_t)(row0 + i) * d.G, d.G * sizeof(float));
        }
        FH_CUDA(cudaMemcpyAsync(x_, h_x_, (size_t)m * d.D * 4, cudaMemcpyHostToDevice, s));
        QCache c = c_;
        c.M = m;
        q_forward_trunk(l, d, L_, w, x_, c);
        for (uint32_t b = 0; b < d.NB; ++b) q_forward_branch(l, d, L_, w, c, (int)b, cfg_.q_clip);
        FH_LAUNCH(k_act_select, grid_for((size_t)m * d.NB), kThreads, 0, s, c.q, m, (int)d.NB,
                  (int)d.A, cfg_.seed, row0, (uint32_t)act_call, epsilon, actions_,
                  q_values ? qv_ : nullptr);
        FH_CUDA(cudaMemcpyAsync(h_actions_, actions_, (size_t)m * d.NB * 4,
                                cudaMemcpyDeviceToHost, s));
        if (q_values)
            FH_CUDA(cudaMemcpyAsync(h_qv_, qv_, (size_t)m * d.NB * d.A * 4,
                                    cudaMemcpyDeviceToHost, s));
        FH_CUDA(cudaStreamSynchronize(s));
        memcpy(actions + (size_t)row0 * d.NB, h_actions_, (size_t)m * d.NB * 4);
        if (q_values)
            memcpy(q_values + (size_t)row0 * d.NB * d.A, h_qv_, (size_t)m * d.NB * d.A * 4);
    }
}

}  // namespace fh::cuda
