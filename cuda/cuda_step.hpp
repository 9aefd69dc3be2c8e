// The CUDA executor's view of one step, as src/cpu/cpu_step.hpp is the CPU's: the buffers of
// the layout and every device buffer a task writes for a later one. Each task of schedule.hpp
// is one function below, in a file named for it (her.cu, spectral.cu, ...); executor.cpp runs
// them on their lanes, once eagerly and then under stream capture. A task only enqueues: it
// never allocates, synchronises or copies between host and device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "allreduce.hpp"
#include "config.hpp"
#include "gemm.hpp"
#include "init.hpp"
#include "layout.hpp"
#include "learners.hpp"

namespace fh::cuda {

class DeviceMemory;

// Metrics and small scalars the graph writes: one device struct, read back by metrics().
struct DevMetrics {
    // This rank's share of each batch mean (its sum over the global count W·B, SPEC §9) and
    // its relabel count: the first kSummedMetrics floats, summed across the ranks.
    float td_loss, q_mean, cql_loss;
    float iql_loss[2];
    float iqn_loss, attn_loss, conf_loss;
    float ensemble_std, relabelled;
    // The same on every rank without a sum: of the all-reduced gradient, or of replicated state.
    float grad_norm;
    float sigma[2], sigma_t[2];
    float sn_ip[2];  // ⟨dWsn, Wsn⟩ of the spectral backward (linear in this rank's gradient)
};
constexpr size_t kSummedMetrics = 10;  // td_loss .. relabelled
static_assert(offsetof(DevMetrics, grad_norm) == kSummedMetrics * sizeof(float),
              "the summed metrics are the first kSummedMetrics floats of DevMetrics");

// Forward caches of one Q pass on M rows (SPEC §4), device pointers. pre1, pre2 and preg hold
// the layers' products before their biases (bias_silu; the backward adds the bias). A
// forward-only pass (ddqn's, act's) computes them in place: pre1 = h1, pre2 = h2, preg = g, z = q.
struct QCache {
    int M = 0;
    float *pre1 = nullptr, *h1 = nullptr, *pre2 = nullptr, *h2 = nullptr;
    float *preg = nullptr, *g = nullptr;  // [NB][M, HB]
    float *z = nullptr, *q = nullptr;     // [NB][M, A]
    float *pre_u = nullptr, *u = nullptr; // [M] (online pass on x~ only)
    // h2 holds rounded values, TF32 or bfloat16 (the fused SiLU layer wrote it:
    // cuda/linear_silu.hpp); set when the trunk is enqueued, read by the branch layers after it.
    bool h2_rounded = false;
    bool h1_rounded = false;  // the same for h1 (the trunk's first layer)
    uint64_t g_rounded = 0;   // bit b: the same for branch b's g (its fused layer wrote it)
};
void alloc_qcache(DeviceMemory &mem, const Dims &d, QCache &c, int M, bool head, bool keep_pre);

// The Q net's weights as one pass sees them: a flat buffer (online or target) with the trunk
// matrices replaced by their spectrally normalised copies where SN applies; where the pass has
// them, its packed branch weights (q_pack, memory_plan.hpp PackedBranches), with, when rounded,
// its trunk and branch matrices rounded to TF32 (bfloat16 in FH_MATH_BF16) for the fused SiLU
// layers (cuda/linear_silu.hpp).
struct QView {
    const float *p, *W1, *W2;
    const float *pack = nullptr;
    bool rounded = false;
};

// Where a task runs: its lane's stream and cuBLAS handle (bound to that stream and its own
// workspace), and the lane's reduction scratch (so that lanes running side by side never
// share it).
struct LaneCtx {
    cudaStream_t stream;
    Blas blas;
    double *col;  // column-sum partials: colsum_chunks(B) × max(D, H, HB, A) doubles
    double *red;  // 1-D reduction partials: kRedMaxBlocks doubles
    Lane lane() const { return Lane{stream, blas}; }
};

// The device block the upload copies a batch into (fixed addresses, captured in the graph):
// byte offsets of each field, each 256-byte aligned. Only the HER task reads it.
struct BatchBlock {
    unsigned char *dev = nullptr;
    size_t bytes = 0;
    size_t obs = 0, next_obs = 0, reward = 0, goal = 0, nag = 0, her_goal = 0, action = 0,
           regime = 0, done = 0;
    template <class T>
    const T *at(size_t off) const { return reinterpret_cast<const T *>(dev + off); }
};

struct CudaStep {
    // Allocates every buffer below from `mem` (zeroed) and creates the learners; `dp` sums
    // across the ranks of c.nccl_comm (SPEC §9; nothing without one).
    CudaStep(const fh_config &c, const Layout &l, DeviceMemory &mem, const BatchBlock &in);
    ~CudaStep();
    // The initial state (SPEC §3) and neutral values of the outputs the disabled learners own;
    // waits until it is written.
    void reset(const HostBuffers &init);
    QView online_view() const;
    QView target_view() const;
    StepInputs inputs() const;

    const fh_config &cfg;
    const Layout &L;
    const Dims d;
    const Allreduce dp;
    float *buf[NUM_BUFS] = {};  // the layout's buffers
    float *grad_q = nullptr;    // [layout.q.total]: TD, then + CQL, + confidence
    BatchBlock in;
    uint64_t *step = nullptr;   // device counter: steps completed before this one
    DevMetrics *dm = nullptr;

    // §5.1 her
    float *x2 = nullptr;                  // [2B, D]: x~ rows 0..B-1, x~' rows B..2B-1
    float *x_bf16 = nullptr;              // FH_MATH_BF16: [B, D] x~ rounded to bfloat16 values
    float *r = nullptr, *done_f = nullptr, *relab = nullptr;  // [B]
    int32_t *action = nullptr;            // [B, NB] private copies: the upload may overwrite
    int32_t *regime = nullptr;            // [B]      the batch block during the step
    // §5.2 spectral: effective trunk weights (online, target) and v of each SN layer
    float *weff[2] = {}, *weff_t[2] = {}, *sn_v[2] = {};
    double *sn_row = nullptr;             // power-iteration scratch (power_scratch_doubles)
    // §5.3 ddqn
    QCache next;                          // online on x~' (in place)
    QCache tgt;                           // target on [x~; x~'] (2B rows, in place)
    // The branches' weights packed for next's and tgt's passes (memory_plan.hpp,
    // packed_branch_floats; null when ddqn_branches_packed is false).
    float *pack_next = nullptr, *pack_tgt = nullptr;
    int32_t *a_star = nullptr;            // [B, NB]
    float *y = nullptr;                   // [B, NB]
    float *qbar_sa = nullptr;             // [B]
    // §5.4 forward
    QCache on;                            // online on x~, with pre-activations and the head
    float *delta = nullptr;               // [B, NB]
    float *dz = nullptr;                  // [NB][B, A]; BF16: then CQL's rounded dzc (cql.cu)
    float *dpreg = nullptr;               // [B, NB·HB] side by side (dh2_one_product), else [NB][B, HB]
    float *dh2 = nullptr;                 // [B, H] dh2 (dh2_one_product), else [NB][B, H] per branch
    float *dpre2 = nullptr, *dpre1 = nullptr;  // [B, H]
    double *td_elt = nullptr, *q_elt = nullptr;  // [B·NB] per-element terms of the sums
    // §5.5 aux
    float *v_hi = nullptr, *v_lo = nullptr, *omega = nullptr, *z_mean = nullptr;  // [B]
    float *dzc = nullptr;                 // [NB][B, A] CQL part of dz
    float *cql_dU = nullptr, *cql_de = nullptr;  // [NB][A, HB], [NB][A]
    double *cql_part = nullptr;           // [NB][colsum chunks][A]
    double *cql_elt = nullptr;            // [B·NB]
    // The aux tail's block sums: [ensemble_blocks(B)], [confidence_partial_doubles(d)]
    // (memory_plan.hpp).
    double *ens_part = nullptr, *conf_part = nullptr;
    double *regime_scr = nullptr;         // [2R], then the blocks' [regime_blocks(B)][2R]
    std::unique_ptr<IqlLearner> iql;
    std::unique_ptr<IqnLearner> iqn;
    std::unique_ptr<AttentionLearner> attn;
};

// ---- the tasks (schedule.hpp), one file each -------------------------------------------------
void her_relabel(CudaStep &s, const LaneCtx &l);       // her.cu
void her_metrics(CudaStep &s, const LaneCtx &l);       // her.cu: the relabel count
void spectral_power(CudaStep &s, const LaneCtx &l);    // spectral.cu
void ddqn_online_next(CudaStep &s, const LaneCtx &l);  // ddqn.cu
void ddqn_target(CudaStep &s, const LaneCtx &l);
void ddqn_join(CudaStep &s, const LaneCtx &l);
void forward_trunk(CudaStep &s, const LaneCtx &l);     // qnet.cu
void forward_branch(CudaStep &s, const LaneCtx &l, int b);
void td_loss(CudaStep &s, const LaneCtx &l);           // td.cu: delta, dz, per-row loss terms
void td_metrics(CudaStep &s, const LaneCtx &l);        // td.cu: their sums, L_td and q_mean
void backward_branch(CudaStep &s, const LaneCtx &l, int b);
void backward_trunk(CudaStep &s, const LaneCtx &l);
void ema_targets(CudaStep &s, const LaneCtx &l);       // ema.cu
void cql(CudaStep &s, const LaneCtx &l);               // cql.cu
void ensemble(CudaStep &s, const LaneCtx &l);          // ensemble.cu
void confidence(CudaStep &s, const LaneCtx &l);        // confidence.cu
void regime_scale(CudaStep &s, const LaneCtx &l);      // regime.cu
void adam_q(CudaStep &s, const LaneCtx &l);            // adam_q.cu
// learner_tasks.cpp: the aux learners (learners.hpp) as tasks; IQL's Adam follows its
// all-reduce; IQN's and attention's (learner_adam, `learners` = kAdamIqn | kAdamAttention of
// schedule.hpp) end their lanes, or in a data-parallel step follow their all-reduce after the
// join.
void learner_iql(CudaStep &s, const LaneCtx &l);
void learner_iqn(CudaStep &s, const LaneCtx &l);
void learner_iqn_backward(CudaStep &s, const LaneCtx &l);
void learner_attention(CudaStep &s, const LaneCtx &l);
void learner_adam(CudaStep &s, const LaneCtx &l, int learners);

// ---- pieces used by more than one file -----------------------------------------------------
// qnet.cu: SPEC §4 trunk on c.M rows of x (pre1, h1, pre2, h2), and branch b (preg, g, z, q).
void q_forward_trunk(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                     const float *x, QCache &c);
void q_forward_branch(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                      QCache &c, int b, float q_clip);
// The pass's packed weights into `pack` (packed_branch_floats(d) floats; the config must have
// ddqn_branches_packed(d)): the branches side by side and, in a lane with Blas::linear_tc, the
// SiLU layers' matrices rounded for the fused kernel (TF32, or bfloat16 with Blas::linear_bf16).
// Returns w with pack (and rounded) set.
QView q_pack(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w, float *pack);
// All NB branches of a forward-only pass (an in-place cache: q only, h1 dead after the trunk)
// from w.pack (q_pack).
void q_forward_branches_packed(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                               QCache &c, float q_clip);
// spectral.cu: one power iteration on W [rows, cols] from u_in (u_out may alias it):
// v = normalize(Wᵀu), u = normalize(W v), sigma = uᵀ W v, sigma_t = uᵀ Wt v (Wt may be null).
// `scratch` holds power_scratch_doubles(d) doubles (src/memory_plan.hpp; rows = H, cols <=
// max(D, H)). Writes v [cols], u_out, sigma[0], and sigma_t[0] when Wt is given.
void power_iteration(const float *W, const float *Wt, int rows, int cols, const float *u_in,
                     float *u_out, float *v, double *scratch, float *sigma, float *sigma_t,
                     cudaStream_t s);
// out = W / *sigma (and out_t = Wt / *sigma_t when Wt is given), n elements.
void sn_scale(const float *W, const float *sigma, float *out, const float *Wt,
              const float *sigma_t, float *out_t, size_t n, cudaStream_t s);
// dW = (dW − ip·u vᵀ) / sigma in place (SPEC §5.2 backward; ip = ⟨dWsn, Wsn⟩ on the device).
void sn_backward(float *dW, const float *ip, const float *u, const float *v, const float *sigma,
                 int rows, int cols, cudaStream_t s);
// *counter = v, one thread (step() sets the counter after a checkpoint load).
void set_step_counter(uint64_t *counter, uint64_t v, cudaStream_t s);

}  // namespace fh::cuda
