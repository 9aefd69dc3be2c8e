// The CUDA executor of SPEC §5: one parent graph of six child graphs (her, spectral, ddqn,
// forward, aux, adam; with a replay, sample first), each captured once at creation from
// build_schedule()'s plain-data description, joined in the parent by the edges the schedule
// lists (ChildDesc::after: a DAG), instantiated once and launched by every step().
// The math is in the task files (cuda_step.hpp); this file runs the schedule on the lanes
// (lanes.hpp), captures it, and serves the Backend interface, with the upload (upload.hpp),
// the replay (replay_lane.hpp), device input (device_input.hpp) and act() (act.hpp) beside it.
//
// FORK records an event on lane 0 that the forked lanes wait on; JOIN records one event per
// joined lane that lane 0 waits on; with FH_EXEC_SINGLE_STREAM both vanish. MARK ops become
// external event-record nodes (cudaEventRecordWithFlags(..., cudaEventRecordExternal)) for the
// aux learners' timings; the parent graph has an event-record node at the start, before the
// first children, and one after each child (the per-child timings). Every other event-record
// node is a leaf: it records when the work before it ends, and nothing waits on it inside the
// graph (graph_events.hpp).
//
// The step counter lives on the device (uint64): the sample, HER, IQN and Adam read it, the
// guard's final search block in the adam child increments it (guard.cu). train(step, k)
// compares the API's count with what the device will hold after the work already launched and,
// when they differ (a checkpoint was loaded), enqueues a one-thread kernel that sets it before
// the launches.
//
// Only read(), write(), metrics(), timings(), act(), sync() and checkpoints wait for the GPU,
// and settle() for the check of the last call's device arrays (device_input.hpp).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "act.hpp"
#include "backend.hpp"
#include "common.hpp"
#include "cuda_step.hpp"
#include "debug_hooks.hpp"
#include "device_input.hpp"
#include "device_memory.hpp"
#include "error.hpp"
#include "graph_events.hpp"
#include "guard.cuh"
#include "lanes.hpp"
#include "reduce.cuh"
#include "replay_lane.hpp"
#include "schedule.hpp"
#include "sync_points.hpp"
#include "upload.hpp"

namespace fh {

namespace cuda {

namespace {

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

    void upload(const fh_batch &b) override {
        DeviceGuard guard(device_);
        up_->upload(b, child_ev_[her_end_ev_]);
        has_batch_ = true;
    }
    void upload_device(const fh_batch &b) override {
        DeviceGuard guard(device_);
        up_->upload_device(b, child_ev_[her_end_ev_], *check_, device_,
                           [this] { has_batch_ = true; });
    }
    bool has_batch() const override { return has_batch_; }
    void step(uint64_t step) override { train(step, 1); }
    void train(uint64_t step, uint32_t k) override;
    void insert(const fh_replay_rows &rows) override;
    uint64_t replay_rows() const override { return replay_ ? replay_->rows() : 0; }
    ReplayImage replay_image() override {
        DeviceGuard guard(device_);
        sync_all();
        return replay_->image();
    }
    void restore_replay(const ReplayImage &img) override {
        DeviceGuard guard(device_);
        sync_all();
        replay_->restore(img, up_->stream());
        up_->mark_uploaded();
    }
    void settle() override {
        if (!check_ || !check_->pending()) return;
        DeviceGuard guard(device_);
        check_->settle();
    }
    void sync() override {
        DeviceGuard guard(device_);
        sync_all();
    }
    void act(const float *obs, const float *goal, uint32_t n, float epsilon, uint64_t act_call,
             int32_t *actions, float *q_values) override {
        DeviceGuard guard(device_);
        actor_->act(*st_, done_ev_, obs, goal, n, epsilon, act_call, actions, q_values);
    }
    void read(Buf b, size_t offset, size_t count, float *out) override;
    void write(Buf b, size_t offset, size_t count, const float *in) override;
    void metrics(fh_metrics *m) override;
    void timings(fh_timings *t) override;
    void memory(fh_memory_report *r) const override;
    void dump_graph(const char *path) override;
    GuardReport guard_report(bool clear) override {
        DeviceGuard g(device_);
        sync_all();
        return guard_->report(clear);
    }

private:
    void create(HostBuffers init);
    void release() noexcept;
    void capture_all();
    void sync_all();
    void run_child(const ChildDesc &c, bool capturing);
    void run_task(Task t, int lane, int arg);

    fh_config cfg_;
    const Layout &L_;
    Dims d_;
    std::vector<ChildDesc> sched_;
    int device_;

    DeviceMemory mem_;
    std::unique_ptr<Lanes> lanes_;
    std::unique_ptr<Uploader> up_;
    std::unique_ptr<DeviceCheck> check_;  // of the last call's device arrays
    std::unique_ptr<ReplayLane> replay_;  // with a replay only
    std::unique_ptr<Actor> actor_;
    std::unique_ptr<CudaStep> st_;
    std::unique_ptr<DivergenceGuard> guard_;  // GUARD_SNAPSHOT / GUARD_CHECK (guard.cuh)
    cudaStream_t launch_ = nullptr;

    cudaEvent_t fork_ev_ = nullptr;
    cudaEvent_t join_ev_[kMaxLanes] = {};
    cudaEvent_t child_ev_[(int)ChildId::COUNT + 1] = {};
    cudaEvent_t mark_ev_[(int)Mark::COUNT] = {};
    cudaEvent_t done_ev_ = nullptr;
    int her_end_ev_ = 1;     // index into child_ev_ of the event after the HER child
    int sample_end_ev_ = 0;  // ... after the sample child (with a replay)
    bool has_batch_ = false; // a host batch, or a device batch whose check passed

    cudaGraph_t child_[(int)ChildId::COUNT] = {};
    cudaGraph_t parent_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    uint64_t dev_step_ = 0;  // what the device counter holds after the launched work
};

void CudaBackend::create(HostBuffers init) {
    DeviceGuard guard(device_);
    const int maxN = (int)std::max({d_.D, d_.H, d_.HB, d_.A, 1u});
    lanes_ = std::make_unique<Lanes>(cfg_, sched_, (size_t)colsum_chunks((int)d_.B) * maxN, mem_);
    FH_CUDA(cudaStreamCreateWithFlags(&launch_, cudaStreamNonBlocking));
    up_ = std::make_unique<Uploader>(d_, mem_, d_.K == 0);
    check_ = std::make_unique<DeviceCheck>(mem_);
    if (d_.K > 0) replay_ = std::make_unique<ReplayLane>(cfg_, d_, mem_, up_->targets());
    actor_ = std::make_unique<Actor>(cfg_, L_, mem_, *lanes_);

    // Events: fork/join are dependency-only; child and mark events time the step.
    FH_CUDA(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming));
    for (cudaEvent_t &e : join_ev_) FH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (cudaEvent_t &e : child_ev_) FH_CUDA(cudaEventCreate(&e));
    for (cudaEvent_t &e : mark_ev_) FH_CUDA(cudaEventCreate(&e));
    FH_CUDA(cudaEventCreateWithFlags(&done_ev_, cudaEventDisableTiming));
    check_child_order(sched_);
    for (size_t k = 0; k < sched_.size(); ++k) {
        if (sched_[k].id == ChildId::HER) her_end_ev_ = (int)k + 1;
        if (sched_[k].id == ChildId::SAMPLE) sample_end_ev_ = (int)k + 1;
    }

    st_ = std::make_unique<CudaStep>(cfg_, L_, mem_, up_->block());
    {
        // The divergence guard over the persistent buffers and the step's scalars, in
        // guard.hpp's GuardScalar order; made before the eager run so that its kernels load then.
        DevMetrics *dm = st_->dm;
        const float *const scalars[NUM_GUARD_SCALARS] = {
            &dm->td_loss,   &dm->q_mean,   &dm->cql_loss,   &dm->iql_loss[0], &dm->iql_loss[1],
            &dm->iqn_loss,  &dm->attn_loss, &dm->conf_loss, &dm->grad_norm,   &dm->sigma[0],
            &dm->sigma[1],  &dm->sigma_t[0], &dm->sigma_t[1], &dm->ensemble_std};
        guard_ = std::make_unique<DivergenceGuard>(st_->buf, L_.buf_size, scalars, st_->step);
    }
    {
        const size_t B = d_.B, nz = (size_t)d_.NB * B * d_.A;
        const hooks::Bf16Operands ops{
            {st_->x2, st_->x_bf16, st_->dzc, st_->dz, st_->on.g, st_->dpre1},
            {B * d_.D, st_->x_bf16 ? B * d_.D : 0, nz, nz, (size_t)d_.NB * B * d_.HB, B * d_.H}};
        hooks::publish_pipeline(this, up_->targets(), ops, st_->iql->gemm_mode(),
                                st_->iql->grad_device(), st_->iql->grad_floats());
    }

    // One eager run of the whole schedule on zeroed buffers before capture: every kernel and
    // every cuBLAS kernel the step uses is loaded (lazy module loading) and cuBLAS has chosen
    // its algorithms, so capture does nothing but record. Its results are then overwritten by
    // the initial state.
    for (const ChildDesc &c : sched_) run_child(c, false);
    FH_CUDA(cudaDeviceSynchronize());
    guard_->reset_counters();  // the eager run is no step (and is non-finite on zeros)

    st_->reset(init);
    dev_step_ = 0;
    capture_all();

    if (const char *p = getenv("FOXHUNT_DUMP_GRAPH"))
        if (*p) dump_graph(p);
}

void CudaBackend::capture_all() {
    cudaStream_t s0 = lanes_->stream(0);
    for (size_t k = 0; k < sched_.size(); ++k) {
        FH_CUDA(cudaStreamBeginCapture(s0, cudaStreamCaptureModeRelaxed));
        try {
            run_child(sched_[k], true);
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
        detach_event_records(g);  // the marks beside the lanes, not on them
        size_t nodes = 0;
        FH_CUDA(cudaGraphGetNodes(g, nullptr, &nodes));
        hooks::publish_child_nodes(sched_[k].id, (long)nodes);
    }
    // The parent: event 0, then the children; a child waits for the children it starts after
    // (ChildDesc::after) or, the first ones, for event 0, and event k + 1 records when child k
    // has ended, a leaf beside the children after it rather than a node between them
    // (graph_events.hpp: the events in series cost the step their latency at every border).
    // Event 0 stays in front: as a root beside the first children it recorded up to 14 µs
    // after their first kernel had started (traces of 2026-12-07), so the first children's
    // times and the step's total came out short.
    FH_CUDA(cudaGraphCreate(&parent_, 0));
    std::vector<cudaGraphNode_t> ev(sched_.size() + 1);
    FH_CUDA(cudaGraphAddEventRecordNode(&ev[0], parent_, nullptr, 0, child_ev_[0]));
    std::vector<cudaGraphNode_t> node(sched_.size());
    for (size_t k = 0; k < sched_.size(); ++k) {
        std::vector<cudaGraphNode_t> deps;
        for (int j : sched_[k].after) deps.push_back(node[j]);
        if (deps.empty()) deps.push_back(ev[0]);
        FH_CUDA(cudaGraphAddChildGraphNode(&node[k], parent_, deps.data(), deps.size(), child_[k]));
        FH_CUDA(cudaGraphAddEventRecordNode(&ev[k + 1], parent_, &node[k], 1, child_ev_[k + 1]));
    }
    FH_CUDA(cudaGraphInstantiate(&exec_, parent_, 0));
    FH_CUDA(cudaGraphUpload(exec_, launch_));
    FH_CUDA(cudaStreamSynchronize(launch_));
}

void CudaBackend::release() noexcept {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    hooks::withdraw(this);
    if (launch_) cudaStreamSynchronize(launch_);
    if (up_) up_->release();
    replay_.reset();
    check_.reset();
    if (actor_) actor_->release();
    guard_.reset();
    st_.reset();  // the learners free their scratch
    if (exec_) cudaGraphExecDestroy(exec_);
    if (parent_) cudaGraphDestroy(parent_);
    for (cudaGraph_t &g : child_)
        if (g) cudaGraphDestroy(g);
    if (lanes_) lanes_->release();
    if (launch_) cudaStreamDestroy(launch_);
    for (cudaEvent_t e : join_ev_)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : child_ev_)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : mark_ev_)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : {fork_ev_, done_ev_})
        if (e) cudaEventDestroy(e);
    mem_.release();
    cudaGetLastError();
    if (prev >= 0) cudaSetDevice(prev);
}

void CudaBackend::sync_all() {
    FH_CUDA(cudaStreamSynchronize(launch_));
    up_->sync();
}

// ------------------------------------------------------------------------------------------------
// The schedule (eagerly or under capture)
// ------------------------------------------------------------------------------------------------

void CudaBackend::run_child(const ChildDesc &c, bool capturing) {
    const bool multi = lanes_->multi();
    cudaStream_t s0 = lanes_->stream(0);
    for (const Op &op : c.ops) {
        switch (op.kind) {
        case Op::RUN:
            if (op.lane >= lanes_->count())
                fail(FH_ERR_INTERNAL, "task on lane %d >= %d", op.lane, lanes_->count());
            run_task(op.task, op.lane, op.arg);
            break;
        case Op::FORK:
            if (!multi) break;
            FH_CUDA(cudaEventRecord(fork_ev_, s0));
            for (int k = 1; k < kMaxLanes; ++k)
                if (op.lanes & (1u << k))
                    FH_CUDA(cudaStreamWaitEvent(lanes_->stream(k), fork_ev_, 0));
            break;
        case Op::JOIN:
            if (!multi) break;
            for (int k = 1; k < kMaxLanes; ++k)
                if (op.lanes & (1u << k)) {
                    FH_CUDA(cudaEventRecord(join_ev_[k], lanes_->stream(k)));
                    FH_CUDA(cudaStreamWaitEvent(s0, join_ev_[k], 0));
                }
            break;
        case Op::MARK:
            if (capturing)
                FH_CUDA(cudaEventRecordWithFlags(mark_ev_[op.arg], lanes_->stream(op.lane),
                                                 cudaEventRecordExternal));
            else
                FH_CUDA(cudaEventRecord(mark_ev_[op.arg], lanes_->stream(op.lane)));
            break;
        }
    }
}

void CudaBackend::run_task(Task t, int lane, int arg) {
    CudaStep &s = *st_;
    const LaneCtx l = lanes_->ctx(lane);
    switch (t) {
    case Task::SAMPLE: replay_->sample(s.step, l.stream); break;
    case Task::HER_RELABEL: her_relabel(s, l); break;
    case Task::HER_METRICS: her_metrics(s, l); break;
    case Task::SPECTRAL_POWER: spectral_power(s, l); break;
    case Task::DDQN_ONLINE_NEXT: ddqn_online_next(s, l); break;
    case Task::DDQN_TARGET: ddqn_target(s, l); break;
    case Task::DDQN_JOIN: ddqn_join(s, l); break;
    case Task::FWD_TRUNK: forward_trunk(s, l); break;
    case Task::FWD_BRANCH: forward_branch(s, l, arg); break;
    case Task::TD_LOSS: td_loss(s, l); break;
    case Task::TD_METRICS: td_metrics(s, l); break;
    case Task::BWD_BRANCH: backward_branch(s, l, arg); break;
    case Task::BWD_TRUNK: backward_trunk(s, l); break;
    case Task::EMA_TARGETS: ema_targets(s, l); break;
    case Task::IQL: learner_iql(s, l); break;
    case Task::IQN: learner_iqn(s, l); break;
    case Task::IQN_BACKWARD: learner_iqn_backward(s, l); break;
    case Task::ATTENTION: learner_attention(s, l); break;
    case Task::AUX_ADAM: learner_adam(s, l, arg); break;
    case Task::CQL: cql(s, l); break;
    case Task::ENSEMBLE: ensemble(s, l); break;
    case Task::CONFIDENCE: confidence(s, l); break;
    case Task::REGIME_SCALE: regime_scale(s, l); break;
    case Task::ADAM_Q: adam_q(s, l); break;
    case Task::GUARD_SNAPSHOT: guard_->snapshot(l.stream, arg); break;
    case Task::GUARD_CHECK: guard_->check(l.stream); break;
    }
}

// ------------------------------------------------------------------------------------------------
// Backend interface
// ------------------------------------------------------------------------------------------------

void CudaBackend::train(uint64_t step, uint32_t k) {
    DeviceGuard guard(device_);
    if (step != dev_step_) set_step_counter(st_->step, step, launch_);
    FH_CUDA(cudaStreamWaitEvent(launch_, up_->uploaded(), 0));
    // k launches of the one step graph back to back on one stream: no host round trip between
    // the steps (each samples its own batch, reading the device step counter). A conditional
    // WHILE node around the step graph could replace this loop.
    for (uint32_t i = 0; i < k; ++i) FH_CUDA(cudaGraphLaunch(exec_, launch_));
    FH_CUDA(cudaEventRecord(done_ev_, launch_));
    planted_sync(PlantAt::STEP, launch_);
    dev_step_ = step + k;
    hooks::step_launched(this, done_ev_);
}

void CudaBackend::insert(const fh_replay_rows &r) {
    DeviceGuard guard(device_);
    // After the sample child of the last launched step: the last reader of the ring.
    const cudaEvent_t ring_free = child_ev_[sample_end_ev_];
    if (r.memory == FH_MEMORY_DEVICE)
        replay_->insert_device(r, up_->stream(), ring_free, *check_, device_);
    else
        replay_->insert_host(r, up_->stream(), ring_free);
    up_->mark_uploaded();
    planted_sync(PlantAt::UPLOAD, up_->stream());
}

void CudaBackend::read(Buf b, size_t offset, size_t count, float *out) {
    DeviceGuard guard(device_);
    sync_all();
    FH_CUDA(cudaMemcpy(out, st_->buf[b] + offset, count * sizeof(float), cudaMemcpyDeviceToHost));
}

void CudaBackend::write(Buf b, size_t offset, size_t count, const float *in) {
    DeviceGuard guard(device_);
    sync_all();
    FH_CUDA(cudaMemcpy(st_->buf[b] + offset, in, count * sizeof(float), cudaMemcpyHostToDevice));
}

void CudaBackend::metrics(fh_metrics *m) {
    DeviceGuard guard(device_);
    sync_all();
    DevMetrics h{};
    FH_CUDA(cudaMemcpy(&h, st_->dm, sizeof h, cudaMemcpyDeviceToHost));
    copy_step_metrics(h, d_.R, m);
    FH_CUDA(cudaMemcpy(m->regime_scale, st_->buf[BUF_REGIME] + d_.R, d_.R * sizeof(float),
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
    // A child starts when the last of the children it starts after has ended.
    std::vector<float> end(sched_.size());
    for (size_t k = 0; k < sched_.size(); ++k) end[k] = ms(child_ev_[0], child_ev_[k + 1]);
    for (size_t k = 0; k < sched_.size(); ++k) {
        float start = 0.0f;
        for (int j : sched_[k].after) start = std::max(start, end[j]);
        const float v = end[k] - start;
        switch (sched_[k].id) {
        case ChildId::HER: t->her_ms = v; break;
        case ChildId::SPECTRAL: t->spectral_ms = v; break;
        case ChildId::DDQN: t->ddqn_ms = v; break;
        case ChildId::FORWARD: t->forward_ms = v; break;
        case ChildId::AUX: t->aux_ms = v; break;
        case ChildId::ADAM: t->adam_ms = v; break;
        case ChildId::SAMPLE: t->sample_ms = v; break;
        default: break;
        }
    }
    t->total_ms = ms(child_ev_[0], child_ev_[sched_.size()]);
    auto span = [&](Mark a, Mark b) { return ms(mark_ev_[(int)a], mark_ev_[(int)b]); };
    t->aux_ema_ms = span(Mark::AUX_EMA_BEGIN, Mark::AUX_EMA_END);
    t->aux_iql_ms = span(Mark::AUX_IQL_BEGIN, Mark::AUX_IQL_END);
    t->aux_iqn_ms = span(Mark::AUX_IQN_BEGIN, Mark::AUX_IQN_END);
    t->aux_attn_ms = span(Mark::AUX_ATTN_BEGIN, Mark::AUX_ATTN_END);
    t->aux_tail_ms = span(Mark::AUX_TAIL_BEGIN, Mark::AUX_TAIL_END);
}

void CudaBackend::memory(fh_memory_report *r) const {
    *r = fh_memory_report{};
    r->parameters = mem_.bytes(MEM_PARAMS);
    r->activations = mem_.bytes(MEM_ACT) + st_->iql->bytes() + st_->iqn->bytes() +
                     st_->attn->bytes();
    r->workspaces = mem_.bytes(MEM_WS);
    r->batch_staging = mem_.bytes(MEM_STAGING);
    r->replay = mem_.bytes(MEM_REPLAY);
    // The guard's shadow copy of the persistent state counts as parameters, its reduction
    // scratch as activations (as src/memory_plan.cpp plans them).
    r->parameters += guard_->bytes() - DivergenceGuard::kScratchBytes;
    r->activations += DivergenceGuard::kScratchBytes;
    r->total = r->parameters + r->activations + r->workspaces + r->batch_staging + r->replay;
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

std::unique_ptr<Backend> make_cuda_backend(const fh_config &c, const Layout &L, HostBuffers init) {
    if (!cuda_available(c.device))
        fail(FH_ERR_NO_CUDA, "no usable CUDA device %d (compute capability 9.0 or newer needed)",
             c.device);
    return std::make_unique<cuda::CudaBackend>(c, L, std::move(init));
}

}  // namespace fh
