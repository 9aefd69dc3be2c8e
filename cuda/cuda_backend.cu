// The CUDA executor of SPEC §5: one parent graph of six child graphs (her, spectral, ddqn,
// forward, aux, adam), each captured once at creation from build_schedule()'s plain-data
// description, instantiated once and launched by every step().
//
// Lanes. A pipeline owns up to kMaxLanes streams ("lanes"), each with its own cuBLAS handle and
// workspace (fh_config.workspace_mib, cudaMalloc'd, so 256-byte aligned; cublasSetWorkspace
// right after cublasSetStream), so cuBLAS never allocates during capture and results do not
// depend on which streams run at the same time. The schedule's lane k runs on stream k; with
// FH_EXEC_SINGLE_STREAM every lane runs on lane 0's stream and handle, and FORK/JOIN vanish.
// FORK records an event on lane 0 that the forked lanes wait on; JOIN records one event per
// joined lane that lane 0 waits on. MARK ops become external event-record nodes
// (cudaEventRecordWithFlags(..., cudaEventRecordExternal)) for the aux learners' timings; the
// parent graph has an event-record node before the first child and after each child.
//
// The step counter lives on the device (uint64): HER, IQN and Adam read it, the last node of the
// adam child increments it. step(step) compares the API's count with what the device will hold
// after the work already launched and, when they differ (a checkpoint was loaded), enqueues a
// one-thread kernel that sets it before the launch.
//
// Batch upload (double-buffered, no host waits): upload() copies the validated host batch into
// one of two pinned staging slots, then, on a dedicated copy stream, waits on the event node
// that follows the HER child of the most recently launched step (HER copies every batch tensor
// it or a later child needs into the graph's private buffers, so after it the batch buffers are
// free), copies the slot into the graph's fixed device input block, and records `uploaded`;
// step() makes the launch stream wait on `uploaded`. So uploading batch t+1 overlaps step t
// (all of step t after HER). The host reuses a staging slot only when the copy out of it has
// finished (cudaEventQuery); only if it has not (the host two uploads ahead of the GPU) does
// upload() block on it, and that wait is counted (debug_hooks.h) and tested to stay zero.
//
// Only read(), write(), metrics(), timings() and act() wait for the GPU.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.hpp"
#include "common.hpp"
#include "debug_hooks.h"
#include "error.hpp"
#include "gemm.hpp"
#include "kernels.cuh"
#include "learners.hpp"
#include "schedule.hpp"


namespace fh {

namespace cuda {

void throw_cuda(cudaError_t e, const char *call, const char *file, int line) {
    const char *base = strrchr(file, '/');
    fail(e == cudaErrorMemoryAllocation ? FH_ERR_OUT_OF_MEMORY : FH_ERR_CUDA,
         "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e), cudaGetErrorString(e),
         base ? base + 1 : file, line);
}

void throw_cublas(cublasStatus_t s, const char *call, const char *file, int line) {
    const char *base = strrchr(file, '/');
    fail(s == CUBLAS_STATUS_ALLOC_FAILED ? FH_ERR_OUT_OF_MEMORY : FH_ERR_CUDA,
         "%s failed: %s (%s) at %s:%d", call, cublasGetStatusName(s), cublasGetStatusString(s),
         base ? base + 1 : file, line);
}

namespace {

std::atomic<uint64_t> g_host_waits{0};
std::mutex g_last_mu;
cudaEvent_t g_last_done = nullptr;  // guarded by g_last_mu
const void *g_last_owner = nullptr;
std::atomic<long> g_child_nodes[(int)ChildId::COUNT] = {-1, -1, -1, -1, -1, -1};
std::atomic<int> g_iql_gemm_mode{-1};  // fh_iql_gemm of the most recently created pipeline

// Metrics and small scalars the graph writes, one device struct read back by metrics().
struct DevMetrics {
    float td_loss, q_mean, cql_loss;
    float iql_loss[2];
    float iqn_loss, attn_loss, conf_loss, grad_norm;
    float sigma[2], sigma_t[2];
    float ensemble_std, relabelled;
    float sn_ip[2];  // ⟨dWsn, Wsn⟩ of the spectral backward
    kern::AdamScalars adam;
};

struct DeviceGuard {
    int prev = -1, want;
    explicit DeviceGuard(int d) : want(d) {
        FH_CUDA(cudaGetDevice(&prev));
        if (prev != want) FH_CUDA(cudaSetDevice(want));
    }
    ~DeviceGuard() {
        if (prev >= 0 && prev != want) cudaSetDevice(prev);
    }
};

// Forward caches of one Q pass on M rows (SPEC §4), device pointers.
struct QCacheDev {
    int M = 0;
    float *pre1 = nullptr, *h1 = nullptr, *pre2 = nullptr, *h2 = nullptr;
    float *preg = nullptr, *g = nullptr;  // [NB][M, HB]
    float *z = nullptr, *q = nullptr;     // [NB][M, A]
    float *pre_u = nullptr, *u = nullptr; // [M] (online pass on x~ only)
};

// The Q net's weights as a pass sees them (trunk matrices possibly spectrally normalised).
struct QW {
    const float *p, *W1, *W2;
};

enum MemCat { MEM_PARAMS = 0, MEM_ACT, MEM_WS, MEM_STAGING, MEM_CATS };

constexpr int kSlots = 2;          // pinned staging slots
constexpr int kActChunk = 4096;    // act() rows per pass

class CudaBackend final : public Backend {
public:
    CudaBackend(const fh_config &c, const Layout &L, HostBuffers init)
        : cfg_(c), L_(L), d_(L.dims), sched_(build_schedule(L.dims, c)), device_(c.device) {
        try {
            create(std::move(init));
        } catch (...) {
            release();
            throw;
        }
    }
    ~CudaBackend() override { release(); }

    void upload(const fh_batch &b) override;
    void step(uint64_t step) override;
    void act(const float *obs, const float *goal, uint32_t n, float epsilon, uint64_t act_call,
             int32_t *actions, float *q_values) override;
    void read(Buf b, size_t offset, size_t count, float *out) override;
    void write(Buf b, size_t offset, size_t count, const float *in) override;
    void metrics(fh_metrics *m) override;
    void timings(fh_timings *t) override;
    void memory(fh_memory_report *r) const override;
    void dump_graph(const char *path) override;

private:
    // ---- setup ----
    void create(HostBuffers init);
    void release() noexcept;
    void *alloc(MemCat cat, size_t bytes);
    float *allocf(MemCat cat, size_t n) { return (float *)alloc(cat, n * sizeof(float)); }
    void alloc_cache(QCacheDev &c, int M, bool head, bool keep_pre);
    void upload_state(const HostBuffers &init);
    void capture_all();
    void sync_all();

    // ---- execution of the schedule (eagerly or under capture) ----
    void run_child(const ChildDesc &c, bool capturing);
    void run_task(Task t, int lane, int arg);
    cudaStream_t stream(int lane) const { return multi_ ? streams_[lane] : streams_[0]; }
    Blas blas(int lane) const { return Blas{multi_ ? handles_[lane] : handles_[0], compute_}; }

    QW online() const;
    QW target() const;
    void q_trunk(int lane, const QW &w, const float *x, QCacheDev &c);
    void q_branch(int lane, const QW &w, QCacheDev &c, int b);
    void bwd_branch(int lane, int b);
    void bwd_trunk(int lane);
    void colsum(int lane, const float *X, int M, int N, const float *row_scale, float *out,
                bool accumulate);
    void reduce_to(int lane, const double *x, size_t n, float *out, double div,
                   double mul = 1.0);

    fh_config cfg_;
    const Layout &L_;
    Dims d_;
    std::vector<ChildDesc> sched_;
    int device_;
    bool multi_ = true;
    cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F_FAST_TF32;
    int nlanes_ = 1;  // lanes the schedule uses
    size_t ws_bytes_ = 0;

    std::vector<void *> allocs_;
    std::vector<void *> host_allocs_;
    size_t mem_[MEM_CATS] = {};

    cudaStream_t streams_[kMaxLanes] = {};
    cublasHandle_t handles_[kMaxLanes] = {};
    void *ws_[kMaxLanes] = {};
    cudaStream_t launch_ = nullptr, copy_ = nullptr, act_stream_ = nullptr;
    cublasHandle_t act_blas_ = nullptr;
    void *act_ws_ = nullptr;

    cudaEvent_t fork_ev_ = nullptr;
    cudaEvent_t join_ev_[kMaxLanes] = {};
    cudaEvent_t child_ev_[(int)ChildId::COUNT + 1] = {};
    cudaEvent_t mark_ev_[(int)Mark::COUNT] = {};
    cudaEvent_t uploaded_ev_ = nullptr, done_ev_ = nullptr;
    cudaEvent_t slot_free_[kSlots] = {};
    int her_end_ev_ = 1;  // index into child_ev_ of the event after the HER child

    cudaGraph_t child_[(int)ChildId::COUNT] = {};
    size_t child_nodes_[(int)ChildId::COUNT] = {};
    cudaGraph_t parent_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;

    // persistent and output buffers of the layout
    float *buf_[NUM_BUFS] = {};
    float *grad_q_ = nullptr;
    // batch input block (device) and pinned slots
    size_t in_bytes_ = 0, off_obs_ = 0, off_next_obs_ = 0, off_reward_ = 0, off_goal_ = 0,
           off_nag_ = 0, off_her_goal_ = 0, off_action_ = 0, off_regime_ = 0, off_done_ = 0;
    unsigned char *dev_in_ = nullptr;
    unsigned char *pinned_[kSlots] = {};
    int next_slot_ = 0;

    // step state
    uint64_t *dstep_ = nullptr;
    uint64_t dev_step_ = 0;  // what *dstep_ holds after the launched work
    DevMetrics *dm_ = nullptr;

    // HER outputs
    float *x2_ = nullptr, *r_ = nullptr, *done_f_ = nullptr, *relab_ = nullptr;
    int32_t *action_ = nullptr, *regime_ = nullptr;
    // spectral
    float *weff_[2] = {}, *weff_t_[2] = {}, *sn_v_[2] = {};
    double *sn_row_ = nullptr;
    // Q passes
    QCacheDev next_, tgt_, on_;
    int32_t *a_star_ = nullptr;
    float *y_ = nullptr, *qbar_sa_ = nullptr;
    // TD and backward
    float *delta_ = nullptr, *dz_ = nullptr, *dpreg_ = nullptr, *dh2_ = nullptr,
          *dpre2_ = nullptr, *dpre1_ = nullptr, *dzc_ = nullptr, *cql_dU_ = nullptr,
          *cql_de_ = nullptr;
    double *cql_part_ = nullptr;
    double *td_elt_ = nullptr, *q_elt_ = nullptr, *cql_elt_ = nullptr, *std_elt_ = nullptr,
           *conf_elt_ = nullptr;
    // aux
    float *v_hi_ = nullptr, *v_lo_ = nullptr, *omega_ = nullptr, *z_mean_ = nullptr,
          *dpre_u_ = nullptr;
    double *regime_scr_ = nullptr;
    // per-lane reduction scratch
    double *lane_col_[kMaxLanes] = {}, *lane_red_[kMaxLanes] = {};
    // act
    QCacheDev act_;
    float *act_x_ = nullptr, *act_weff_[2] = {}, *act_u_ = nullptr, *act_v_ = nullptr,
          *act_sigma_ = nullptr, *act_qv_ = nullptr;
    double *act_row_ = nullptr;
    int32_t *act_actions_ = nullptr;
    float *h_act_x_ = nullptr, *h_act_qv_ = nullptr;
    int32_t *h_act_actions_ = nullptr;

    std::unique_ptr<IqlLearner> iql_;
    std::unique_ptr<IqnLearner> iqn_;
    std::unique_ptr<AttentionLearner> attn_;
};

// ------------------------------------------------------------------------------------------------
// Setup
// ------------------------------------------------------------------------------------------------

void *CudaBackend::alloc(MemCat cat, size_t bytes) {
    void *p = nullptr;
    if (bytes == 0) bytes = 256;
    FH_CUDA(cudaMalloc(&p, bytes));
    allocs_.push_back(p);
    FH_CUDA(cudaMemset(p, 0, bytes));
    mem_[cat] += bytes;
    return p;
}

// keep_pre = false (forward-only passes: ddqn, act): the pre-activations are computed in place
// in the activation buffers (pre1 = h1, pre2 = h2, preg = g, z = q), which saves their memory
// and a third of the elementwise traffic; the backward needs them only for the online pass.
void CudaBackend::alloc_cache(QCacheDev &c, int M, bool head, bool keep_pre) {
    const size_t MH = (size_t)M * d_.H;
    c.M = M;
    c.h1 = allocf(MEM_ACT, MH);
    c.h2 = allocf(MEM_ACT, MH);
    c.g = allocf(MEM_ACT, (size_t)d_.NB * M * d_.HB);
    c.q = allocf(MEM_ACT, (size_t)d_.NB * M * d_.A);
    if (keep_pre) {
        c.pre1 = allocf(MEM_ACT, MH);
        c.pre2 = allocf(MEM_ACT, MH);
        c.preg = allocf(MEM_ACT, (size_t)d_.NB * M * d_.HB);
        c.z = allocf(MEM_ACT, (size_t)d_.NB * M * d_.A);
    } else {
        c.pre1 = c.h1;
        c.pre2 = c.h2;
        c.preg = c.g;
        c.z = c.q;
    }
    if (head) {
        c.pre_u = allocf(MEM_ACT, M);
        c.u = allocf(MEM_ACT, M);
    }
}

void CudaBackend::create(HostBuffers init) {
    DeviceGuard guard(device_);
    multi_ = cfg_.exec_mode == FH_EXEC_MULTI_STREAM;
    compute_ = compute_type(cfg_);
    for (const ChildDesc &c : sched_) nlanes_ = std::max(nlanes_, c.num_lanes);
    if (nlanes_ > kMaxLanes) fail(FH_ERR_INTERNAL, "schedule uses %d lanes > %d", nlanes_, kMaxLanes);

    const Dims &d = d_;
    const size_t B = d.B;

    // Lanes: streams, handles, workspaces.
    ws_bytes_ = (size_t)cfg_.workspace_mib << 20;
    const int streams_needed = multi_ ? nlanes_ : 1;
    for (int k = 0; k < streams_needed; ++k) {
        FH_CUDA(cudaStreamCreateWithFlags(&streams_[k], cudaStreamNonBlocking));
        FH_CUBLAS(cublasCreate(&handles_[k]));
        ws_[k] = alloc(MEM_WS, ws_bytes_);
        FH_CUBLAS(cublasSetStream(handles_[k], streams_[k]));
        FH_CUBLAS(cublasSetWorkspace(handles_[k], ws_[k], ws_bytes_));
        FH_CUBLAS(cublasSetMathMode(handles_[k], cfg_.math_mode == FH_MATH_STRICT
                                                     ? CUBLAS_DEFAULT_MATH
                                                     : CUBLAS_TF32_TENSOR_OP_MATH));
        FH_CUBLAS(cublasSetAtomicsMode(handles_[k], CUBLAS_ATOMICS_NOT_ALLOWED));
    }
    FH_CUDA(cudaStreamCreateWithFlags(&launch_, cudaStreamNonBlocking));
    FH_CUDA(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    FH_CUDA(cudaStreamCreateWithFlags(&act_stream_, cudaStreamNonBlocking));
    FH_CUBLAS(cublasCreate(&act_blas_));
    act_ws_ = alloc(MEM_WS, ws_bytes_);
    FH_CUBLAS(cublasSetStream(act_blas_, act_stream_));
    FH_CUBLAS(cublasSetWorkspace(act_blas_, act_ws_, ws_bytes_));
    FH_CUBLAS(cublasSetMathMode(act_blas_, cfg_.math_mode == FH_MATH_STRICT
                                               ? CUBLAS_DEFAULT_MATH
                                               : CUBLAS_TF32_TENSOR_OP_MATH));

    // Events: fork/join are dependency-only; child and mark events time the step.
    FH_CUDA(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming));
    for (int k = 0; k < kMaxLanes; ++k)
        FH_CUDA(cudaEventCreateWithFlags(&join_ev_[k], cudaEventDisableTiming));
    for (cudaEvent_t &e : child_ev_) FH_CUDA(cudaEventCreate(&e));
    for (cudaEvent_t &e : mark_ev_) FH_CUDA(cudaEventCreate(&e));
    FH_CUDA(cudaEventCreateWithFlags(&uploaded_ev_, cudaEventDisableTiming));
    FH_CUDA(cudaEventCreateWithFlags(&done_ev_, cudaEventDisableTiming));
    for (cudaEvent_t &e : slot_free_) FH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (size_t k = 0; k < sched_.size(); ++k)
        if (sched_[k].id == ChildId::HER) her_end_ev_ = (int)k + 1;

    // Layout buffers.
    for (int b = 0; b < NUM_BUFS; ++b)
        buf_[b] = allocf(b < NUM_PERSISTENT ? MEM_PARAMS : MEM_ACT, L_.buf_size[b]);
    grad_q_ = allocf(MEM_PARAMS, L_.q.total);

    // Batch input block: floats, then int32, then bytes, each 256-byte aligned.
    auto place = [&](size_t bytes) {
        size_t off = in_bytes_;
        in_bytes_ += (bytes + 255) / 256 * 256;
        return off;
    };
    off_obs_ = place(B * d.O * 4);
    off_next_obs_ = place(B * d.O * 4);
    off_reward_ = place(B * 4);
    off_goal_ = place(B * d.G * 4);
    off_nag_ = place(B * d.G * 4);
    off_her_goal_ = place(B * d.G * 4);
    off_action_ = place(B * d.NB * 4);
    off_regime_ = place(B * 4);
    off_done_ = place(B);
    dev_in_ = (unsigned char *)alloc(MEM_STAGING, in_bytes_);
    for (int s = 0; s < kSlots; ++s) {
        void *h = nullptr;
        FH_CUDA(cudaHostAlloc(&h, in_bytes_, cudaHostAllocDefault));
        host_allocs_.push_back(h);
        memset(h, 0, in_bytes_);
        pinned_[s] = (unsigned char *)h;
        mem_[MEM_STAGING] += in_bytes_;
    }

    dstep_ = (uint64_t *)alloc(MEM_PARAMS, sizeof(uint64_t));
    dm_ = (DevMetrics *)alloc(MEM_ACT, sizeof(DevMetrics));

    // HER outputs.
    x2_ = allocf(MEM_ACT, 2 * B * d.D);
    r_ = allocf(MEM_ACT, B);
    done_f_ = allocf(MEM_ACT, B);
    relab_ = allocf(MEM_ACT, B);
    action_ = (int32_t *)alloc(MEM_ACT, B * d.NB * 4);
    regime_ = (int32_t *)alloc(MEM_ACT, B * 4);
    // Spectral.
    const size_t cols[2] = {d.D, d.H};
    const bool sn[2] = {d.sn1, d.sn2};
    for (int k = 0; k < 2; ++k)
        if (sn[k]) {
            weff_[k] = allocf(MEM_ACT, (size_t)d.H * cols[k]);
            weff_t_[k] = allocf(MEM_ACT, (size_t)d.H * cols[k]);
            sn_v_[k] = allocf(MEM_ACT, cols[k]);
        }
    sn_row_ = (double *)alloc(MEM_ACT, d.H * sizeof(double));
    // Q passes.
    alloc_cache(next_, (int)B, false, false);
    alloc_cache(tgt_, (int)(2 * B), false, false);
    alloc_cache(on_, (int)B, true, true);
    a_star_ = (int32_t *)alloc(MEM_ACT, B * d.NB * 4);
    y_ = allocf(MEM_ACT, B * d.NB);
    qbar_sa_ = allocf(MEM_ACT, B);
    // TD and backward.
    delta_ = allocf(MEM_ACT, B * d.NB);
    dz_ = allocf(MEM_ACT, (size_t)d.NB * B * d.A);
    dzc_ = allocf(MEM_ACT, (size_t)d.NB * B * d.A);
    cql_dU_ = allocf(MEM_ACT, (size_t)d.NB * d.A * d.HB);
    cql_de_ = allocf(MEM_ACT, (size_t)d.NB * d.A);
    cql_part_ = (double *)alloc(MEM_ACT, (size_t)d.NB * kern::colsum_chunks((int)B) * d.A * 8);
    for (uint32_t b = 1; b < d.NB; ++b)
        if (L_.q.U[b] - L_.q.U[b - 1] != L_.q.U[1] - L_.q.U[0] ||
            L_.q.e[b] - L_.q.e[b - 1] != L_.q.U[1] - L_.q.U[0])
            fail(FH_ERR_INTERNAL, "branch blocks of the Q layout are not equally spaced");
    dpreg_ = allocf(MEM_ACT, (size_t)d.NB * B * d.HB);
    dh2_ = allocf(MEM_ACT, (size_t)d.NB * B * d.H);
    dpre2_ = allocf(MEM_ACT, B * d.H);
    dpre1_ = allocf(MEM_ACT, B * d.H);
    td_elt_ = (double *)alloc(MEM_ACT, B * d.NB * 8);
    q_elt_ = (double *)alloc(MEM_ACT, B * d.NB * 8);
    cql_elt_ = (double *)alloc(MEM_ACT, B * d.NB * 8);
    std_elt_ = (double *)alloc(MEM_ACT, B * 8);
    conf_elt_ = (double *)alloc(MEM_ACT, B * 8);
    // Aux.
    v_hi_ = allocf(MEM_ACT, B);
    v_lo_ = allocf(MEM_ACT, B);
    omega_ = allocf(MEM_ACT, B);
    z_mean_ = allocf(MEM_ACT, B);
    dpre_u_ = allocf(MEM_ACT, B);
    regime_scr_ = (double *)alloc(MEM_ACT, 2 * (size_t)d.R * sizeof(double));
    // Per-lane scratch (logical lanes, also in single-stream mode).
    const int maxN = (int)std::max({d.D, d.H, d.HB, d.A, 1u});
    for (int k = 0; k < nlanes_; ++k) {
        lane_col_[k] = (double *)alloc(MEM_ACT, (size_t)kern::colsum_chunks((int)B) * maxN * 8);
        lane_red_[k] = (double *)alloc(MEM_ACT, 1024 * 8);
    }
    // Act.
    alloc_cache(act_, kActChunk, false, false);
    act_x_ = allocf(MEM_ACT, (size_t)kActChunk * d.D);
    for (int k = 0; k < 2; ++k)
        if (sn[k]) act_weff_[k] = allocf(MEM_ACT, (size_t)d.H * cols[k]);
    act_u_ = allocf(MEM_ACT, d.H);
    act_v_ = allocf(MEM_ACT, std::max(d.D, d.H));
    act_sigma_ = allocf(MEM_ACT, 2);
    act_row_ = (double *)alloc(MEM_ACT, d.H * sizeof(double));
    act_qv_ = allocf(MEM_ACT, (size_t)kActChunk * d.NB * d.A);
    act_actions_ = (int32_t *)alloc(MEM_ACT, (size_t)kActChunk * d.NB * 4);
    {
        void *h = nullptr;
        FH_CUDA(cudaHostAlloc(&h, (size_t)kActChunk * d.D * 4, cudaHostAllocDefault));
        host_allocs_.push_back(h);
        h_act_x_ = (float *)h;
        FH_CUDA(cudaHostAlloc(&h, (size_t)kActChunk * d.NB * d.A * 4, cudaHostAllocDefault));
        host_allocs_.push_back(h);
        h_act_qv_ = (float *)h;
        FH_CUDA(cudaHostAlloc(&h, (size_t)kActChunk * d.NB * 4, cudaHostAllocDefault));
        host_allocs_.push_back(h);
        h_act_actions_ = (int32_t *)h;
    }

    iql_ = std::make_unique<IqlLearner>(d, cfg_, L_, buf_[BUF_IQL], buf_[BUF_IQL_M],
                                        buf_[BUF_IQL_V]);
    iqn_ = std::make_unique<IqnLearner>(d, cfg_, L_, buf_[BUF_IQN], buf_[BUF_IQN_TARGET],
                                        buf_[BUF_IQN_M], buf_[BUF_IQN_V]);
    attn_ = std::make_unique<AttentionLearner>(d, cfg_, L_, buf_[BUF_ATTN], buf_[BUF_ATTN_M],
                                               buf_[BUF_ATTN_V]);
    g_iql_gemm_mode = iql_->gemm_mode();

    // One eager run of the whole schedule on zeroed buffers before capture: every kernel and
    // every cuBLAS kernel the step uses is loaded (lazy module loading) and cuBLAS has chosen
    // its algorithms, so capture does nothing but record. Its results are then overwritten by
    // the initial state.
    for (const ChildDesc &c : sched_) run_child(c, false);
    FH_CUDA(cudaStreamSynchronize(streams_[0]));
    FH_CUDA(cudaDeviceSynchronize());

    upload_state(init);
    capture_all();

    if (const char *p = getenv("FOXHUNT_DUMP_GRAPH"))
        if (*p) dump_graph(p);
}

// The initial state (SPEC §3) and neutral values of the outputs the disabled learners own.
void CudaBackend::upload_state(const HostBuffers &init) {
    for (int b = 0; b < NUM_BUFS; ++b)
        FH_CUDA(cudaMemcpy(buf_[b], init[b].data(), L_.buf_size[b] * sizeof(float),
                           cudaMemcpyHostToDevice));
    const size_t B = d_.B;
    FH_CUDA(cudaMemset(dm_, 0, sizeof(DevMetrics)));
    FH_CUDA(cudaMemset(dstep_, 0, sizeof(uint64_t)));
    FH_CUDA(cudaMemset(v_hi_, 0, B * 4));
    FH_CUDA(cudaMemset(v_lo_, 0, B * 4));
    FH_CUDA(cudaMemset(z_mean_, 0, B * 4));
    kern::fill(omega_, B, 1.0f, streams_[0]);
    FH_CUDA(cudaMemset(grad_q_, 0, L_.q.total * 4));
    FH_CUDA(cudaStreamSynchronize(streams_[0]));
    dev_step_ = 0;
}

void CudaBackend::capture_all() {
    for (size_t k = 0; k < sched_.size(); ++k) {
        const ChildDesc &c = sched_[k];
        cudaStream_t s0 = streams_[0];
        FH_CUDA(cudaStreamBeginCapture(s0, cudaStreamCaptureModeRelaxed));
        try {
            run_child(c, true);
        } catch (...) {
            cudaGraph_t g = nullptr;
            cudaStreamEndCapture(s0, &g);
            if (g) cudaGraphDestroy(g);
            cudaGetLastError();
            throw;
        }
        cudaGraph_t g = nullptr;
        FH_CUDA(cudaStreamEndCapture(s0, &g));
        child_[k] = g;
        FH_CUDA(cudaGraphGetNodes(g, nullptr, &child_nodes_[k]));
        g_child_nodes[k] = (long)child_nodes_[k];
    }
    FH_CUDA(cudaGraphCreate(&parent_, 0));
    cudaGraphNode_t prev = nullptr, node = nullptr;
    FH_CUDA(cudaGraphAddEventRecordNode(&prev, parent_, nullptr, 0, child_ev_[0]));
    for (size_t k = 0; k < sched_.size(); ++k) {
        FH_CUDA(cudaGraphAddChildGraphNode(&node, parent_, &prev, 1, child_[k]));
        FH_CUDA(cudaGraphAddEventRecordNode(&prev, parent_, &node, 1, child_ev_[k + 1]));
    }
    FH_CUDA(cudaGraphInstantiate(&exec_, parent_, 0));
    FH_CUDA(cudaGraphUpload(exec_, launch_));
    FH_CUDA(cudaStreamSynchronize(launch_));
}

void CudaBackend::release() noexcept {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    {
        std::lock_guard<std::mutex> lk(g_last_mu);
        if (g_last_owner == this) {
            g_last_owner = nullptr;
            g_last_done = nullptr;
        }
    }
    if (launch_) cudaStreamSynchronize(launch_);
    if (copy_) cudaStreamSynchronize(copy_);
    if (act_stream_) cudaStreamSynchronize(act_stream_);
    iql_.reset();
    iqn_.reset();
    attn_.reset();
    if (exec_) cudaGraphExecDestroy(exec_);
    if (parent_) cudaGraphDestroy(parent_);
    for (cudaGraph_t &g : child_)
        if (g) cudaGraphDestroy(g);
    for (int k = 0; k < kMaxLanes; ++k) {
        if (handles_[k]) cublasDestroy(handles_[k]);
        if (streams_[k]) cudaStreamDestroy(streams_[k]);
        if (join_ev_[k]) cudaEventDestroy(join_ev_[k]);
    }
    if (act_blas_) cublasDestroy(act_blas_);
    for (cudaStream_t s : {launch_, copy_, act_stream_})
        if (s) cudaStreamDestroy(s);
    for (cudaEvent_t e : child_ev_)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : mark_ev_)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : slot_free_)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : {fork_ev_, uploaded_ev_, done_ev_})
        if (e) cudaEventDestroy(e);
    for (void *p : allocs_) cudaFree(p);
    for (void *p : host_allocs_) cudaFreeHost(p);
    allocs_.clear();
    host_allocs_.clear();
    cudaGetLastError();
    if (prev >= 0) cudaSetDevice(prev);
}

void CudaBackend::sync_all() {
    FH_CUDA(cudaStreamSynchronize(launch_));
    FH_CUDA(cudaStreamSynchronize(copy_));
}

// ------------------------------------------------------------------------------------------------
// The schedule
// ------------------------------------------------------------------------------------------------

void CudaBackend::run_child(const ChildDesc &c, bool capturing) {
    cudaStream_t s0 = streams_[0];
    for (const Op &op : c.ops) {
        switch (op.kind) {
        case Op::RUN:
            if (op.lane >= nlanes_) fail(FH_ERR_INTERNAL, "task on lane %d >= %d", op.lane, nlanes_);
            run_task(op.task, op.lane, op.arg);
            break;
        case Op::FORK:
            if (!multi_) break;
            FH_CUDA(cudaEventRecord(fork_ev_, s0));
            for (int k = 1; k < kMaxLanes; ++k)
                if (op.lanes & (1u << k)) FH_CUDA(cudaStreamWaitEvent(streams_[k], fork_ev_, 0));
            break;
        case Op::JOIN:
            if (!multi_) break;
            for (int k = 1; k < kMaxLanes; ++k)
                if (op.lanes & (1u << k)) {
                    FH_CUDA(cudaEventRecord(join_ev_[k], streams_[k]));
                    FH_CUDA(cudaStreamWaitEvent(s0, join_ev_[k], 0));
                }
            break;
        case Op::MARK:
            if (capturing)
                FH_CUDA(cudaEventRecordWithFlags(mark_ev_[op.arg], stream(op.lane),
                                                 cudaEventRecordExternal));
            else
                FH_CUDA(cudaEventRecord(mark_ev_[op.arg], stream(op.lane)));
            break;
        }
    }
}

QW CudaBackend::online() const {
    const float *p = buf_[BUF_Q];
    return QW{p, d_.sn1 ? weff_[0] : p + L_.q.W1, d_.sn2 ? weff_[1] : p + L_.q.W2};
}
QW CudaBackend::target() const {
    const float *p = buf_[BUF_Q_TARGET];
    return QW{p, d_.sn1 ? weff_t_[0] : p + L_.q.W1, d_.sn2 ? weff_t_[1] : p + L_.q.W2};
}

void CudaBackend::q_trunk(int lane, const QW &w, const float *x, QCacheDev &c) {
    const Blas bl = blas(lane);
    cudaStream_t s = stream(lane);
    const int M = c.M, H = (int)d_.H, D = (int)d_.D;
    gemm_nt(bl, M, H, D, x, w.W1, c.pre1, 0.0f, "trunk x W1^T");
    kern::bias_silu(c.pre1, c.h1, w.p + L_.q.b1, M, H, s);
    gemm_nt(bl, M, H, H, c.h1, w.W2, c.pre2, 0.0f, "trunk h1 W2^T");
    kern::bias_silu(c.pre2, c.h2, w.p + L_.q.b2, M, H, s);
}

void CudaBackend::q_branch(int lane, const QW &w, QCacheDev &c, int b) {
    const Blas bl = blas(lane);
    cudaStream_t s = stream(lane);
    const int M = c.M, H = (int)d_.H, HB = (int)d_.HB, A = (int)d_.A;
    float *preg = c.preg + (size_t)b * M * HB, *g = c.g + (size_t)b * M * HB;
    float *z = c.z + (size_t)b * M * A, *q = c.q + (size_t)b * M * A;
    gemm_nt(bl, M, HB, H, c.h2, w.p + L_.q.V[b], preg, 0.0f, "branch h2 V^T");
    kern::bias_silu(preg, g, w.p + L_.q.c[b], M, HB, s);
    gemm_nt(bl, M, A, HB, g, w.p + L_.q.U[b], z, 0.0f, "branch g U^T");
    kern::bias_clamp(z, q, w.p + L_.q.e[b], M, A, cfg_.q_clip, s);
}

void CudaBackend::colsum(int lane, const float *X, int M, int N, const float *row_scale,
                         float *out, bool accumulate) {
    cudaStream_t s = stream(lane);
    kern::colsum_partial(X, M, N, row_scale, lane_col_[lane], s);
    kern::colsum_final(lane_col_[lane], M, N, out, accumulate, s);
}

void CudaBackend::reduce_to(int lane, const double *x, size_t n, float *out, double div,
                            double mul) {
    cudaStream_t s = stream(lane);
    kern::reduce_f64(x, n, lane_red_[lane], s);
    kern::reduce_final(lane_red_[lane], kern::reduce_blocks(n), out, 0, div, s, mul);
}

// SPEC §5.4 backward of branch b (CPU: td.cpp backward_branch).
void CudaBackend::bwd_branch(int lane, int b) {
    const Blas bl = blas(lane);
    cudaStream_t s = stream(lane);
    const int B = (int)d_.B, H = (int)d_.H, HB = (int)d_.HB, A = (int)d_.A;
    const QOffsets &o = L_.q;
    const float *p = buf_[BUF_Q];
    float *g = grad_q_;
    const float *dz = dz_ + (size_t)b * B * A;
    const float *gb = on_.g + (size_t)b * B * HB, *preg = on_.preg + (size_t)b * B * HB;
    float *dpre = dpreg_ + (size_t)b * B * HB, *dh2 = dh2_ + (size_t)b * B * H;
    gemm_tn(bl, A, HB, B, dz, gb, g + o.U[b], 0.0f, "dU = dz^T g");
    colsum(lane, dz, B, A, nullptr, g + o.e[b], false);
    gemm_nn(bl, B, HB, A, dz, p + o.U[b], dpre, 0.0f, "dg = dz U");
    kern::PtrList in{};
    in.p[0] = dpre;
    in.n = 1;
    kern::silu_bwd_colsum_partial(in, preg, B, HB, dpre, lane_col_[lane], s);
    kern::colsum_final(lane_col_[lane], B, HB, g + o.c[b], false, s);
    gemm_tn(bl, HB, H, B, dpre, on_.h2, g + o.V[b], 0.0f, "dV = dpre^T h2");
    gemm_nn(bl, B, H, HB, dpre, p + o.V[b], dh2, 0.0f, "dh2_b = dpre V");
}

// SPEC §5.4 trunk backward (CPU: td.cpp backward_trunk).
void CudaBackend::bwd_trunk(int lane) {
    const Blas bl = blas(lane);
    cudaStream_t s = stream(lane);
    const int B = (int)d_.B, H = (int)d_.H, D = (int)d_.D;
    const QOffsets &o = L_.q;
    float *g = grad_q_;
    const QW w = online();
    kern::PtrList in{};
    for (uint32_t b = 0; b < d_.NB; ++b) in.p[b] = dh2_ + (size_t)b * B * H;
    in.n = (int)d_.NB;
    kern::silu_bwd_colsum_partial(in, on_.pre2, B, H, dpre2_, lane_col_[lane], s);
    kern::colsum_final(lane_col_[lane], B, H, g + o.b2, false, s);
    gemm_tn(bl, H, H, B, dpre2_, on_.h1, g + o.W2, 0.0f, "dW2sn = dpre2^T h1");
    gemm_nn(bl, B, H, H, dpre2_, w.W2, dpre1_, 0.0f, "dh1 = dpre2 W2sn");
    in.p[0] = dpre1_;
    in.n = 1;
    kern::silu_bwd_colsum_partial(in, on_.pre1, B, H, dpre1_, lane_col_[lane], s);
    kern::colsum_final(lane_col_[lane], B, H, g + o.b1, false, s);
    gemm_tn(bl, H, D, B, dpre1_, x2_, g + o.W1, 0.0f, "dW1sn = dpre1^T x");
    gemm_nn(bl, B, D, H, dpre1_, w.W1, buf_[BUF_D_STATES], 0.0f, "d_states = dpre1 W1sn");
    const float *u = buf_[BUF_SN_U];
    const size_t off[2] = {o.W1, o.W2};
    const int cols[2] = {D, H};
    const bool sn[2] = {d_.sn1, d_.sn2};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        const size_t n = (size_t)H * cols[k];
        kern::reduce_dot(g + off[k], weff_[k], n, lane_red_[lane], s);
        kern::reduce_final(lane_red_[lane], kern::reduce_blocks(n), &dm_->sn_ip[k], 0, 1.0, s);
        kern::sn_backward(g + off[k], &dm_->sn_ip[k], u + (size_t)k * H, sn_v_[k], &dm_->sigma[k], H,
                       cols[k], s);
    }
}

void CudaBackend::run_task(Task t, int lane, int arg) {
    const Dims &d = d_;
    const int B = (int)d.B, NB = (int)d.NB, A = (int)d.A, H = (int)d.H;
    cudaStream_t s = stream(lane);
    const QOffsets &o = L_.q;
    StepInputs in{x2_, x2_ + (size_t)B * d.D, r_, done_f_, qbar_sa_, dstep_};
    switch (t) {
    case Task::HER_RELABEL: {
        kern::HerArgs a{};
        a.B = d.B; a.O = d.O; a.G = d.G; a.D = d.D; a.NB = d.NB;
        a.seed = cfg_.seed;
        a.step = dstep_;
        a.her_ratio = cfg_.her_ratio;
        a.her_epsilon = cfg_.her_epsilon;
        a.sparse = cfg_.her_reward == FH_HER_REWARD_SPARSE;
        a.terminal_on_success = cfg_.her_terminal_on_success;
        a.obs = (const float *)(dev_in_ + off_obs_);
        a.next_obs = (const float *)(dev_in_ + off_next_obs_);
        a.reward = (const float *)(dev_in_ + off_reward_);
        a.goal = (const float *)(dev_in_ + off_goal_);
        a.nag = (const float *)(dev_in_ + off_nag_);
        a.her_goal = (const float *)(dev_in_ + off_her_goal_);
        a.action = (const int32_t *)(dev_in_ + off_action_);
        a.regime = (const int32_t *)(dev_in_ + off_regime_);
        a.done = (const uint8_t *)(dev_in_ + off_done_);
        a.x2 = x2_;
        a.r = r_;
        a.done_f = done_f_;
        a.relabelled = relab_;
        a.action_out = action_;
        a.regime_out = regime_;
        kern::her(a, s);
        kern::reduce_f32(relab_, d.B, 0, lane_red_[lane], s);
        kern::reduce_final(lane_red_[lane], kern::reduce_blocks(d.B), &dm_->relabelled, 0, 1.0, s);
        break;
    }
    case Task::SPECTRAL_POWER: {
        const size_t off[2] = {o.W1, o.W2};
        const int cols[2] = {(int)d.D, H};
        const bool sn[2] = {d.sn1, d.sn2};
        for (int k = 0; k < 2; ++k) {
            if (!sn[k]) continue;
            const float *W = buf_[BUF_Q] + off[k], *Wt = buf_[BUF_Q_TARGET] + off[k];
            float *u = buf_[BUF_SN_U] + (size_t)k * H;
            kern::power_iteration(W, Wt, H, cols[k], u, u, sn_v_[k], sn_row_, &dm_->sigma[k],
                               &dm_->sigma_t[k], s);
            kern::sn_scale(W, &dm_->sigma[k], weff_[k], Wt, &dm_->sigma_t[k], weff_t_[k],
                        (size_t)H * cols[k], s);
        }
        break;
    }
    case Task::DDQN_ONLINE_NEXT: {
        const QW w = online();
        q_trunk(lane, w, in.xn, next_);
        for (int b = 0; b < NB; ++b) q_branch(lane, w, next_, b);
        kern::argmax(next_.q, B, NB, A, a_star_, s);
        break;
    }
    case Task::DDQN_TARGET: {
        const QW w = target();
        q_trunk(lane, w, x2_, tgt_);
        for (int b = 0; b < NB; ++b) q_branch(lane, w, tgt_, b);
        break;
    }
    case Task::DDQN_JOIN:
        kern::ddqn_join(tgt_.q, a_star_, action_, r_, done_f_, B, NB, A, cfg_.gamma, y_, qbar_sa_, s);
        break;
    case Task::FWD_TRUNK: {
        const QW w = online();
        q_trunk(lane, w, x2_, on_);
        kern::conf_head(on_.h2, w.p + o.w_u, w.p + o.b_u, B, H, on_.pre_u, on_.u, s);
        break;
    }
    case Task::FWD_BRANCH:
        q_branch(lane, online(), on_, arg);
        break;
    case Task::TD_LOSS:
        kern::td_loss(on_.q, on_.z, y_, action_, regime_, buf_[BUF_REGIME] + d.R, B, NB, A,
                   cfg_.huber_kappa, cfg_.q_clip, delta_, dz_, td_elt_, q_elt_, s);
        reduce_to(lane, td_elt_, (size_t)B * NB, &dm_->td_loss, (double)B * NB);
        reduce_to(lane, q_elt_, (size_t)B * NB, &dm_->q_mean, (double)B * NB);
        break;
    case Task::BWD_BRANCH:
        bwd_branch(lane, arg);
        break;
    case Task::BWD_TRUNK:
        bwd_trunk(lane);
        break;
    case Task::EMA_TARGETS:
        kern::polyak(buf_[BUF_Q_TARGET], buf_[BUF_Q], o.total, cfg_.ema_tau, s);
        kern::polyak(buf_[BUF_IQN_TARGET], buf_[BUF_IQN], L_.iqn.total, cfg_.ema_tau, s);
        break;
    case Task::IQL:
        iql_->enqueue(Lane{s, blas(lane).handle}, in, v_hi_, v_lo_, omega_, dm_->iql_loss);
        break;
    case Task::IQN:
        iqn_->enqueue(Lane{s, blas(lane).handle}, in, z_mean_, &dm_->iqn_loss);
        break;
    case Task::ATTENTION:
        attn_->enqueue(Lane{s, blas(lane).handle}, in, &dm_->attn_loss);
        break;
    case Task::CQL: {
        // As the CPU (cql.cpp): the CQL part of dU_b, de_b is computed apart, then added to
        // the TD part elementwise (one float rounding of the sum).
        kern::cql(on_.q, on_.z, action_, omega_, B, NB, A, cfg_.cql_alpha, cfg_.q_clip, dzc_,
                  cql_elt_, s);
        reduce_to(lane, cql_elt_, (size_t)B * NB, &dm_->cql_loss, (double)B * NB,
                  (double)cfg_.cql_alpha);
        const Blas bl = blas(lane);
        const int HB = (int)d.HB;
        // The branches' blocks in the flat Q buffer are equally spaced (V, c, U, e per branch),
        // so the column sums and the adds of all branches are one launch each. The GEMMs stay
        // one per branch: as one strided-batched call cuBLAS gives up split-K and runs the
        // K = B reduction on 8 CTAs (measured on the H200: 148 us for the batch instead of
        // ~4 x 10 us).
        const size_t br = NB > 1 ? o.U[1] - o.U[0] : 0;
        for (int b = 0; b < NB; ++b)
            gemm_tn(bl, A, HB, B, dzc_ + (size_t)b * B * A, on_.g + (size_t)b * B * HB,
                    cql_dU_ + (size_t)b * A * HB, 0.0f, "dU_cql = dzc^T g");
        kern::colsum_partial(dzc_, B, A, nullptr, cql_part_, s, NB, (size_t)B * A);
        kern::colsum_final(cql_part_, B, A, cql_de_, false, s, NB, (size_t)A);
        kern::add_inplace(grad_q_ + o.U[0], cql_dU_, (size_t)A * HB, s, NB, br, (size_t)A * HB);
        kern::add_inplace(grad_q_ + o.e[0], cql_de_, (size_t)A, s, NB, br, (size_t)A);
        break;
    }
    case Task::ENSEMBLE:
        kern::ensemble(qbar_sa_, v_hi_, v_lo_, z_mean_, B, buf_[BUF_ENS_MEAN], buf_[BUF_ENS_VAR],
                    std_elt_, s);
        reduce_to(lane, std_elt_, B, &dm_->ensemble_std, (double)B);
        break;
    case Task::CONFIDENCE: {
        const float *wt = buf_[BUF_Q_TARGET];
        kern::confidence(tgt_.h2 + (size_t)B * H, wt + o.w_u, wt + o.b_u, buf_[BUF_ENS_VAR], done_f_,
                      on_.u, on_.pre_u, B, H, cfg_.gamma, dpre_u_, conf_elt_,
                      buf_[BUF_CONFIDENCE], s);
        reduce_to(lane, conf_elt_, B, &dm_->conf_loss, (double)B);
        colsum(lane, on_.h2, B, H, dpre_u_, grad_q_ + o.w_u, false);
        colsum(lane, dpre_u_, B, 1, nullptr, grad_q_ + o.b_u, false);
        break;
    }
    case Task::REGIME_SCALE:
        kern::regime_scale(delta_, regime_, B, NB, (int)d.R, cfg_.regime_beta, cfg_.regime_min,
                        cfg_.regime_max, regime_scr_, buf_[BUF_REGIME], s);
        break;
    case Task::ADAM_Q: {
        const size_t n = o.total;
        kern::reduce_f32(grad_q_, n, 1, lane_red_[lane], s);
        kern::reduce_final(lane_red_[lane], kern::reduce_blocks(n), &dm_->grad_norm, 1, 1.0, s);
        kern::adam_prep(&dm_->grad_norm, cfg_.clip_norm, dstep_, cfg_.adam_beta1, cfg_.adam_beta2,
                     &dm_->adam, s);
        kern::adam(buf_[BUF_Q], buf_[BUF_Q_M], buf_[BUF_Q_V], grad_q_, n, cfg_.lr_q, cfg_.adam_beta1,
                cfg_.adam_beta2, cfg_.adam_eps, &dm_->adam, s);
        kern::inc_u64(dstep_, s);
        break;
    }
    }
}

// ------------------------------------------------------------------------------------------------
// Backend interface
// ------------------------------------------------------------------------------------------------

void CudaBackend::upload(const fh_batch &b) {
    DeviceGuard guard(device_);
    const int s = next_slot_;
    cudaError_t q = cudaEventQuery(slot_free_[s]);
    if (q == cudaErrorNotReady) {
        // The copy out of this slot (two uploads ago) has not run yet: the host is ahead of the
        // GPU by more than the double buffer. Back-pressure, counted for the no-sync test.
        g_host_waits.fetch_add(1);
        FH_CUDA(cudaEventSynchronize(slot_free_[s]));
    } else if (q != cudaSuccess) {
        FH_CUDA(q);
    }
    // Checked and copied from the caller's arrays into the free pinned slot in one host pass; a
    // refused batch leaves only this slot written, and next_slot_ and the events unchanged.
    unsigned char *h = pinned_[s];
    pack_batch(d_, b,
               BatchDst{(float *)(h + off_obs_), (float *)(h + off_goal_),
                        (float *)(h + off_reward_), (float *)(h + off_next_obs_),
                        (float *)(h + off_nag_), (float *)(h + off_her_goal_),
                        (int32_t *)(h + off_action_), (int32_t *)(h + off_regime_),
                        (uint8_t *)(h + off_done_)});
    FH_CUDA(cudaStreamWaitEvent(copy_, child_ev_[her_end_ev_], 0));
    FH_CUDA(cudaMemcpyAsync(dev_in_, h, in_bytes_, cudaMemcpyHostToDevice, copy_));
    FH_CUDA(cudaEventRecord(slot_free_[s], copy_));
    FH_CUDA(cudaEventRecord(uploaded_ev_, copy_));
    next_slot_ = (s + 1) % kSlots;
}

void CudaBackend::step(uint64_t step) {
    DeviceGuard guard(device_);
    if (step != dev_step_) kern::set_u64(dstep_, step, launch_);
    FH_CUDA(cudaStreamWaitEvent(launch_, uploaded_ev_, 0));
    FH_CUDA(cudaGraphLaunch(exec_, launch_));
    FH_CUDA(cudaEventRecord(done_ev_, launch_));
    dev_step_ = step + 1;
    std::lock_guard<std::mutex> lk(g_last_mu);
    g_last_done = done_ev_;
    g_last_owner = this;
}

void CudaBackend::act(const float *obs, const float *goal, uint32_t n, float epsilon,
                      uint64_t act_call, int32_t *actions, float *q_values) {
    DeviceGuard guard(device_);
    const Dims &d = d_;
    cudaStream_t s = act_stream_;
    // The parameters of the last launched step, and no upload in the way of nothing: act only
    // reads parameters, so it waits for the step graph alone.
    FH_CUDA(cudaStreamWaitEvent(s, done_ev_, 0));
    const float *p = buf_[BUF_Q];
    const size_t off[2] = {L_.q.W1, L_.q.W2};
    const int cols[2] = {(int)d.D, (int)d.H};
    const bool sn[2] = {d.sn1, d.sn2};
    const float *W[2] = {p + off[0], p + off[1]};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        // σ from one power iteration on a scratch copy of u: the stored u is not changed.
        kern::power_iteration(W[k], nullptr, (int)d.H, cols[k], buf_[BUF_SN_U] + (size_t)k * d.H,
                           act_u_, act_v_, act_row_, act_sigma_ + k, nullptr, s);
        kern::sn_scale(W[k], act_sigma_ + k, act_weff_[k], nullptr, nullptr, nullptr,
                    (size_t)d.H * cols[k], s);
        W[k] = act_weff_[k];
    }
    const QW w{p, W[0], W[1]};
    const Blas bl{act_blas_, compute_};
    for (uint32_t row0 = 0; row0 < n; row0 += kActChunk) {
        const int m = (int)std::min<uint32_t>(kActChunk, n - row0);
        for (int i = 0; i < m; ++i) {
            float *x = h_act_x_ + (size_t)i * d.D;
            memcpy(x, obs + (size_t)(row0 + i) * d.O, d.O * sizeof(float));
            if (d.G) memcpy(x + d.O, goal + (size_t)(row0 + i) * d.G, d.G * sizeof(float));
        }
        FH_CUDA(cudaMemcpyAsync(act_x_, h_act_x_, (size_t)m * d.D * 4, cudaMemcpyHostToDevice, s));
        QCacheDev c = act_;
        c.M = m;
        gemm_nt(bl, m, (int)d.H, (int)d.D, act_x_, w.W1, c.pre1, 0.0f, "act trunk x W1^T");
        kern::bias_silu(c.pre1, c.h1, p + L_.q.b1, m, (int)d.H, s);
        gemm_nt(bl, m, (int)d.H, (int)d.H, c.h1, w.W2, c.pre2, 0.0f, "act trunk h1 W2^T");
        kern::bias_silu(c.pre2, c.h2, p + L_.q.b2, m, (int)d.H, s);
        for (uint32_t b = 0; b < d.NB; ++b) {
            float *preg = c.preg + (size_t)b * m * d.HB, *g = c.g + (size_t)b * m * d.HB;
            float *z = c.z + (size_t)b * m * d.A, *q = c.q + (size_t)b * m * d.A;
            gemm_nt(bl, m, (int)d.HB, (int)d.H, c.h2, p + L_.q.V[b], preg, 0.0f, "act branch V");
            kern::bias_silu(preg, g, p + L_.q.c[b], m, (int)d.HB, s);
            gemm_nt(bl, m, (int)d.A, (int)d.HB, g, p + L_.q.U[b], z, 0.0f, "act branch U");
            kern::bias_clamp(z, q, p + L_.q.e[b], m, (int)d.A, cfg_.q_clip, s);
        }
        kern::act_select(c.q, m, (int)d.NB, (int)d.A, cfg_.seed, row0, (uint32_t)act_call, epsilon,
                      act_actions_, q_values ? act_qv_ : nullptr, s);
        FH_CUDA(cudaMemcpyAsync(h_act_actions_, act_actions_, (size_t)m * d.NB * 4,
                                cudaMemcpyDeviceToHost, s));
        if (q_values)
            FH_CUDA(cudaMemcpyAsync(h_act_qv_, act_qv_, (size_t)m * d.NB * d.A * 4,
                                    cudaMemcpyDeviceToHost, s));
        FH_CUDA(cudaStreamSynchronize(s));
        memcpy(actions + (size_t)row0 * d.NB, h_act_actions_, (size_t)m * d.NB * 4);
        if (q_values)
            memcpy(q_values + (size_t)row0 * d.NB * d.A, h_act_qv_, (size_t)m * d.NB * d.A * 4);
    }
}

void CudaBackend::read(Buf b, size_t offset, size_t count, float *out) {
    DeviceGuard guard(device_);
    sync_all();
    FH_CUDA(cudaMemcpy(out, buf_[b] + offset, count * sizeof(float), cudaMemcpyDeviceToHost));
}

void CudaBackend::write(Buf b, size_t offset, size_t count, const float *in) {
    DeviceGuard guard(device_);
    sync_all();
    FH_CUDA(cudaMemcpy(buf_[b] + offset, in, count * sizeof(float), cudaMemcpyHostToDevice));
}

void CudaBackend::metrics(fh_metrics *m) {
    DeviceGuard guard(device_);
    sync_all();
    DevMetrics h{};
    FH_CUDA(cudaMemcpy(&h, dm_, sizeof h, cudaMemcpyDeviceToHost));
    *m = fh_metrics{};
    m->td_loss = h.td_loss;
    m->q_mean = h.q_mean;
    m->cql_loss = h.cql_loss;
    m->iql_loss_hi = h.iql_loss[0];
    m->iql_loss_lo = h.iql_loss[1];
    m->iqn_loss = h.iqn_loss;
    m->attn_loss = h.attn_loss;
    m->conf_loss = h.conf_loss;
    m->grad_norm = h.grad_norm;
    for (int k = 0; k < 2; ++k) {
        m->sigma[k] = h.sigma[k];
        m->sigma_target[k] = h.sigma_t[k];
    }
    m->ensemble_std = h.ensemble_std;
    m->num_relabelled = (uint32_t)h.relabelled;
    m->num_regimes = d_.R;
    FH_CUDA(cudaMemcpy(m->regime_scale, buf_[BUF_REGIME] + d_.R, d_.R * sizeof(float),
                       cudaMemcpyDeviceToHost));
}

void CudaBackend::timings(fh_timings *t) {
    DeviceGuard guard(device_);
    sync_all();
    auto ms = [](cudaEvent_t a, cudaEvent_t b) {
        float v = 0;
        FH_CUDA(cudaEventElapsedTime(&v, a, b));
        return v;
    };
    for (size_t k = 0; k < sched_.size(); ++k) {
        const float v = ms(child_ev_[k], child_ev_[k + 1]);
        switch (sched_[k].id) {
        case ChildId::HER: t->her_ms = v; break;
        case ChildId::SPECTRAL: t->spectral_ms = v; break;
        case ChildId::DDQN: t->ddqn_ms = v; break;
        case ChildId::FORWARD: t->forward_ms = v; break;
        case ChildId::AUX: t->aux_ms = v; break;
        case ChildId::ADAM: t->adam_ms = v; break;
        default: break;
        }
    }
    t->total_ms = ms(child_ev_[0], child_ev_[sched_.size()]);
    auto span = [&](Mark a, Mark b) { return ms(mark_ev_[(int)a], mark_ev_[(int)b]); };
    t->aux_ema_ms = span(Mark::AUX_EMA_BEGIN, Mark::AUX_EMA_END);
    t->aux_iql_ms = span(Mark::AUX_EMA_END, Mark::AUX_IQL_END);
    t->aux_iqn_ms = span(Mark::AUX_IQN_BEGIN, Mark::AUX_IQN_END);
    t->aux_attn_ms = span(Mark::AUX_ATTN_BEGIN, Mark::AUX_ATTN_END);
    t->aux_tail_ms = span(Mark::AUX_TAIL_BEGIN, Mark::AUX_TAIL_END);
}

void CudaBackend::memory(fh_memory_report *r) const {
    *r = fh_memory_report{};
    r->parameters = mem_[MEM_PARAMS];
    r->activations = mem_[MEM_ACT];
    r->workspaces = mem_[MEM_WS];
    r->batch_staging = mem_[MEM_STAGING];
    r->activations += iql_->bytes() + iqn_->bytes() + attn_->bytes();
    r->total = r->parameters + r->activations + r->workspaces + r->batch_staging;
}

void CudaBackend::dump_graph(const char *path) {
    DeviceGuard guard(device_);
    // cudaGraphDebugDotPrint reports an unwritable path as a generic error: check it first.
    FILE *f = fopen(path, "w");
    if (!f) fail(FH_ERR_IO, "cannot write the graph dump '%s': %s", path, strerror(errno));
    fclose(f);
    FH_CUDA(cudaGraphDebugDotPrint(parent_, path, 0));
}

}  // namespace

}  // namespace cuda

bool cuda_available(int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    if (device < 0 || device >= n) return false;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    // The library carries sm_90 code and compute_90 PTX: Hopper or newer.
    return prop.major >= 9;
}

std::unique_ptr<Backend> make_cuda_backend(const fh_config &c, const Layout &L, HostBuffers init) {
    if (!cuda_available(c.device))
        fail(FH_ERR_NO_CUDA, "no usable CUDA device %d (compute capability 9.0 or newer needed)",
             c.device);
    return std::make_unique<cuda::CudaBackend>(c, L, std::move(init));
}

}  // namespace fh

extern "C" uint64_t fh_cuda_debug_host_waits(void) { return fh::cuda::g_host_waits.load(); }

extern "C" long fh_cuda_debug_child_nodes(int child) {
    if (child < 0 || child >= (int)fh::ChildId::COUNT) return -1;
    return fh::cuda::g_child_nodes[child].load();
}

extern "C" int fh_cuda_debug_iql_gemm_mode(void) { return fh::cuda::g_iql_gemm_mode; }

extern "C" int fh_cuda_debug_step_pending(void) {
    std::lock_guard<std::mutex> lk(fh::cuda::g_last_mu);
    if (!fh::cuda::g_last_done) return -1;
    const cudaError_t e = cudaEventQuery(fh::cuda::g_last_done);
    if (e == cudaErrorNotReady) return 1;
    cudaGetLastError();
    return e == cudaSuccess ? 0 : -2;
}
