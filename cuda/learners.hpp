// The auxiliary learners of SPEC §5.5 on the GPU, each a self-contained module that owns its
// scratch memory (allocated at construction, never during capture) and its gradient. Each
// enqueues its forward, loss and backward (enqueue_loss_grad) and, apart, its Adam step over
// that gradient (enqueue_adam): in a data-parallel step (SPEC §9) the gradient is summed across
// the ranks in between (cuda/learners.cu). The aux child calls them inside stream capture: they
// must not synchronise, allocate, or use atomics on gradient or reduction paths. Batch means
// divide by Dims::Bg (all ranks' rows) and Philox counters start at Dims::row0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "config.hpp"
#include "gemm.hpp"
#include "layout.hpp"

namespace fh::cuda {

// One stream with its own cuBLAS handle and workspace (bound to each other by the owner), the
// pipeline's math mode and, in FH_MATH_BF16, the handle's operand stage: all of it in blas.
struct Lane {
    cudaStream_t stream;
    Blas blas;
};

// lane.blas, after checking that its handle is bound to lane.stream (FH_ERR_INTERNAL naming
// `who` otherwise: a GEMM would run on another stream than the learner's kernels).
const Blas &checked_blas(const Lane &lane, const char *who);

// Device pointers valid for the whole step, written by earlier children.
struct StepInputs {
    const float *x;         // [B, D] x~ = [obs, g~] (after HER): the attention tokens are
                            // x[:, 0:O] cut into O/td chunks, the goal token x[:, O:D]
    const float *xn;        // [B, D] x~'
    const float *r;         // [B] r~
    const float *done;      // [B] d~ as 0/1
    const float *qbar_sa;   // [B] Qbar_sa from ddqn
    const uint64_t *step;   // device counter: steps completed before this one (Adam t = step+1)
    // FH_MATH_BF16: [B, D] x~ rounded to bfloat16 values (HER writes it), the operand of the
    // weight-gradient GEMMs that read x~ (then without a stage); null in the other modes.
    const float *x_bf16 = nullptr;
};

// Adam hyper-parameters shared by the learners (lr = lr_aux).
struct AdamHyper { float lr, beta1, beta2, eps; };

// IQL high and low expectile value nets (Kostrikov et al. 2021), both in one buffer
// [hi | lo] of identical layouts (layout.iql), run as one grouped/batched GEMM per layer.
// Each class may add private members (pimpl or fields); the public interface is fixed.
class IqlLearner {
public:
    IqlLearner(const Dims &d, const fh_config &c, const Layout &L, float *params, float *m,
               float *v);
    ~IqlLearner();
    // Writes v_hi, v_lo [B] (before the update), omega [B], loss[2] (hi, lo) and the gradient
    // of both nets, [hi | lo] as layout.iql (grad_device(), grad_floats() floats).
    void enqueue_loss_grad(const Lane &lane, const StepInputs &in, float *v_hi, float *v_lo,
                           float *omega, float *loss);
    void enqueue_adam(const Lane &lane, const uint64_t *step);  // Adam t = *step + 1
    float *grad_device();
    size_t grad_floats() const;
    size_t bytes() const;
    int gemm_mode() const;  // the fh_iql_gemm actually used

private:
    struct Impl;  // cuda/iql.cu
    std::unique_ptr<Impl> impl_;
};

// IQN (Dabney et al. 2018): online params/m/v and the target (already EMA-updated this step).
class IqnLearner {
public:
    IqnLearner(const Dims &d, const fh_config &c, const Layout &L, float *params, float *target,
               float *m, float *v);
    ~IqnLearner();
    // The forward passes and the loss: writes z_mean [B] = mean_n Z(x~, tau_n) before the
    // update and loss[1], and keeps what the backward reads. Then, on the same lane (other work
    // may come between, none that writes the learner's buffers), the gradient (layout.iqn,
    // grad_floats() floats at grad_device()).
    void enqueue_loss(const Lane &lane, const StepInputs &in, float *z_mean, float *loss);
    void enqueue_grad(const Lane &lane, const StepInputs &in);
    void enqueue_adam(const Lane &lane, const uint64_t *step);  // Adam t = *step + 1
    float *grad_device();
    size_t grad_floats() const;
    size_t bytes() const;

private:
    struct Impl;  // cuda/iqn.cu
    std::unique_ptr<Impl> impl_;
};

// Which kernels compute the attention learner's per-(transition, head) part (see
// cuda/attention_paths.hpp): AUTO picks tensor cores where the config allows (split TF32 in
// strict mode), else the general float32 path; the environment variable FOXHUNT_ATTN_KERNELS
// (tc, tc-split, general) overrides AUTO, for benchmarks and tests.
enum class AttnKernels { AUTO = 0, TC, TC_SPLIT, GENERAL };

// Attention reward model (SPEC §4), MSE to r~.
class AttentionLearner {
public:
    AttentionLearner(const Dims &d, const fh_config &c, const Layout &L, float *params, float *m,
                     float *v, AttnKernels kernels = AttnKernels::AUTO);
    ~AttentionLearner();
    // The loss and its gradient: the gradient, laid out as layout.attn, stays in
    // grad_device() (grad_floats() floats) until the next call.
    void enqueue_loss_grad(const Lane &lane, const StepInputs &in, float *loss);
    void enqueue_adam(const Lane &lane, const uint64_t *step);  // Adam t = *step + 1
    float *grad_device();
    size_t grad_floats() const;
    AttnKernels kernels() const;  // the kernels in use (never AUTO)
    bool head_factored() const;   // whether the head runs factored (attention_head_factored.cu)
    // Benchmarks: when on, enqueue_loss_grad() records events around the per-(transition, head)
    // forward and backward kernels; phase_ms() waits for the last call's and reads them.
    void time_phases(bool on);
    void phase_ms(float *forward, float *backward) const;
    size_t bytes() const;
    // The device-dependent sizes of the kernel path a learner for @p c (AUTO kernels) picks on
    // the current device: its backward's partial rows (of pw floats, attention_paths.hpp) and
    // its scratch bytes. For the memory plan (src/memory_plan.cpp); allocates nothing.
    static void path_sizes(const Dims &d, const fh_config &c, size_t *partial_rows,
                           size_t *scratch_bytes);

private:
    struct Impl;  // cuda/attention.cu
    std::unique_ptr<Impl> impl_;
};

}  // namespace fh::cuda
