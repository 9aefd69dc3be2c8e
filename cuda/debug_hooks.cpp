// The test hooks of debug_hooks.h over what the executor publishes (debug_hooks.hpp).
#include "debug_hooks.hpp"

#include <atomic>
#include <mutex>

#include "debug_hooks.h"

namespace fh::cuda::hooks {

namespace {

std::mutex g_mu;
cudaEvent_t g_last_done = nullptr;  // guarded by g_mu
const void *g_last_owner = nullptr;
replay::BatchBlock g_block{};       // of the most recently created pipeline, g_mu
const void *g_block_owner = nullptr;
Bf16Operands g_bf16;                // g_block_owner's, g_mu
std::atomic<long> g_child_nodes[(int)ChildId::COUNT] = {-1, -1, -1, -1, -1, -1, -1};
std::atomic<int> g_iql_gemm_mode{-1};  // fh_iql_gemm of the most recently created pipeline
// The IQL learner's gradient [hi | lo] of the most recently created pipeline.
std::atomic<const float *> g_iql_grad{nullptr};
std::atomic<size_t> g_iql_grad_n{0};

}  // namespace

void publish_pipeline(const void *owner, const replay::BatchBlock &block, const Bf16Operands &ops,
                      int iql_gemm_mode, const float *iql_grad, size_t iql_grad_floats) {
    g_iql_gemm_mode = iql_gemm_mode;
    g_iql_grad = iql_grad;
    g_iql_grad_n = iql_grad_floats;
    std::lock_guard<std::mutex> lk(g_mu);
    g_block = block;
    g_block_owner = owner;
    g_bf16 = ops;
}

void publish_child_nodes(ChildId id, long nodes) { g_child_nodes[(int)id] = nodes; }

void step_launched(const void *owner, cudaEvent_t done) {
    std::lock_guard<std::mutex> lk(g_mu);
    g_last_done = done;
    g_last_owner = owner;
}

void withdraw(const void *owner) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_last_owner == owner) {
        g_last_owner = nullptr;
        g_last_done = nullptr;
    }
    if (g_block_owner == owner) {
        g_block_owner = nullptr;
        g_block = replay::BatchBlock{};
        g_bf16 = Bf16Operands{};
    }
}

}  // namespace fh::cuda::hooks

namespace hk = fh::cuda::hooks;

extern "C" long fh_cuda_debug_child_nodes(int child) {
    if (child < 0 || child >= (int)fh::ChildId::COUNT) return -1;
    return hk::g_child_nodes[child].load();
}

extern "C" int fh_cuda_debug_iql_gemm_mode(void) { return hk::g_iql_gemm_mode; }

extern "C" const float *fh_cuda_debug_iql_grad(size_t *n) {
    if (n) *n = hk::g_iql_grad_n;
    return hk::g_iql_grad;
}

extern "C" int fh_cuda_debug_step_pending(void) {
    std::lock_guard<std::mutex> lk(hk::g_mu);
    if (!hk::g_last_done) return -1;
    const cudaError_t e = cudaEventQuery(hk::g_last_done);
    if (e == cudaErrorNotReady) return 1;
    cudaGetLastError();
    return e == cudaSuccess ? 0 : -2;
}

extern "C" void fh_cuda_debug_bf16_operands(const float *ptrs[6], size_t counts[6]) {
    std::lock_guard<std::mutex> lk(hk::g_mu);
    for (int k = 0; k < 6; ++k) {
        ptrs[k] = hk::g_bf16.ptr[k];
        counts[k] = hk::g_bf16.count[k];
    }
}

extern "C" void fh_cuda_debug_batch_block(void *fields[9]) {
    std::lock_guard<std::mutex> lk(hk::g_mu);
    const fh::cuda::replay::BatchBlock &b = hk::g_block;
    void *v[9] = {b.obs, b.next_obs, b.reward, b.goal, b.nag, b.her_goal, b.action, b.regime,
                  b.done};
    for (int k = 0; k < 9; ++k) fields[k] = v[k];
}
