// The CPU executor: runs the schedule's tasks in list order (fork and join are no-ops on one
// thread), times each child and mark with a steady clock, and serves act, reads and writes
// straight from the host buffers. With a replay it owns a HostReplay (src/replay.hpp) and its
// SAMPLE task draws the batch from it into the same HostBatch an upload fills. The divergence
// guard's tasks (src/guard.hpp) copy the persistent buffers aside and restore them when the
// step went non-finite; the replay is not among them (no step writes it).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "../backend.hpp"
#include "../error.hpp"
#include "../memory_plan.hpp"
#include "../philox.hpp"
#include "aux_learners.hpp"
#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

CpuStep::CpuStep(const fh_config &c, const Layout &l, HostBuffers &b)
    : cfg(c), L(l), d(l.dims), buf(b) {
    const size_t B = d.B;
    x.assign(B * d.D, 0); xn.assign(B * d.D, 0); xx.assign(2 * B * d.D, 0);
    r.assign(B, 0); done.assign(B, 0);
    a_star.assign(B * d.NB, 0); y.assign(B * d.NB, 0); qbar_sa.assign(B, 0);
    delta.assign(B * d.NB, 0);
    dz.resize(d.NB); dh2_b.resize(d.NB);
    grad.assign(L.q.total, 0);
    v_hi.assign(B, 0); v_lo.assign(B, 0); omega.assign(B, 1); z_mean.assign(B, 0);
}

void CpuStep::release_scratch() {
    next = QCache{};
    target = QCache{};
    online = QCache{};
    for (int k = 0; k < 2; ++k) {  // moved-from temporaries: a copy of an empty one keeps capacity
        w_eff[k] = Vec();
        w_eff_t[k] = Vec();
        sn_v[k] = Vec();
    }
    for (Vec &v : dz) v = Vec();
    for (Vec &v : dh2_b) v = Vec();
    aux_work.reset();
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

class CpuBackend final : public Backend {
public:
    CpuBackend(const fh_config &c, const Layout &L, HostBuffers init)
        : cfg_(c), L_(L), buf_(std::move(init)), s_(cfg_, L_, buf_),
          schedule_(build_schedule(L_.dims, cfg_)),
          shadow_(buf_.begin(), buf_.begin() + NUM_PERSISTENT) {
        guard_.available = true;
        check_child_order(schedule_);  // run_step's list order must respect ChildDesc::after
        if (L_.dims.K > 0) replay_ = std::make_unique<HostReplay>(L_.dims);
    }

    void upload(const fh_batch &b) override {
        pack_batch(L_.dims, b, host_batch_dst(L_.dims, spare_));
        std::swap(batch_, spare_);
        has_batch_ = true;
    }
    bool has_batch() const override { return has_batch_; }

    void upload_device(const fh_batch &) override { refuse_device("batch"); }

    void insert(const fh_replay_rows &rows) override {
        if (rows.memory == FH_MEMORY_DEVICE) refuse_device("rows");
        replay_->insert(rows);
    }
    uint64_t replay_rows() const override { return replay_ ? replay_->rows_inserted() : 0; }
    ReplayImage replay_image() override { return replay_->image(); }
    void restore_replay(const ReplayImage &img) override { replay_->restore(img); }

    void step(uint64_t step) override {
        try {
            run_step(step);
        } catch (...) {
            // A task threw (FH_ERR_OUT_OF_MEMORY: the first step allocates the forward caches
            // and the learners' scratch; later steps allocate nothing). The state goes back to
            // the guard's snapshot, and what a first step allocated is released rather than
            // held until destroy.
            restore();
            if (!allocated_) s_.release_scratch();
            throw;
        }
        allocated_ = true;
    }

    GuardReport guard_report(bool clear) override {
        const GuardReport r = guard_;
        if (clear) {
            guard_.pending = 0;
            guard_.first_step = 0;
            guard_.first_code = -1;
            guard_.first_value = 0;
        }
        return r;
    }

private:
    [[noreturn]] static void refuse_device(const char *what) {
        fail(FH_ERR_UNSUPPORTED, "%s.memory = FH_MEMORY_DEVICE, but the CPU backend reads host "
             "memory only", what);
    }

    // The parts of the snapshot this step has taken (a step that throws between the two parts
    // has changed nothing the second would hold).
    void restore() {
        for (int b = 0; b < NUM_PERSISTENT; ++b)
            if (snapshot_parts_ & snapshot_part(b))
                std::copy(shadow_[b].begin(), shadow_[b].end(), buf_[b].begin());
        snapshot_parts_ = 0;
    }

    // GUARD_SNAPSHOT (guard.hpp) of one part.
    void snapshot(int part) {
        check_snapshot_part(part);
        for (int b = 0; b < NUM_PERSISTENT; ++b)
            if (snapshot_part(b) == part)
                std::copy(buf_[b].begin(), buf_[b].end(), shadow_[b].begin());
        snapshot_parts_ |= part;
    }

    // GUARD_CHECK: the first non-finite quantity in guard.hpp's order; if any, the step
    // applies no update.
    void guard_check() {
        const float sc[NUM_GUARD_SCALARS] = {
            s_.td_loss, s_.q_mean, s_.cql_loss, s_.iql_loss[0], s_.iql_loss[1], s_.iqn_loss,
            s_.attn_loss, s_.conf_loss, s_.grad_norm, s_.sigma[0], s_.sigma[1], s_.sigma_t[0],
            s_.sigma_t[1], s_.ensemble_std};
        int64_t code = (int64_t)first_non_finite_index(sc, NUM_GUARD_SCALARS);
        float value = code < NUM_GUARD_SCALARS ? sc[code] : 0.0f;
        if (code == NUM_GUARD_SCALARS) {
            code = -1;
            int64_t base = NUM_GUARD_SCALARS;
            for (int b = 0; b < NUM_PERSISTENT && code < 0; ++b) {
                const size_t n = buf_[b].size(), i = first_non_finite_index(buf_[b].data(), n);
                if (i < n) {
                    code = base + (int64_t)i;
                    value = buf_[b][i];
                }
                base += (int64_t)n;
            }
        }
        guard_.last_skipped = code >= 0;
        if (code < 0) {
            snapshot_parts_ = 0;
            return;
        }
        restore();
        ++guard_.skipped;
        if (guard_.pending++ == 0) {
            guard_.first_step = s_.step + 1;
            guard_.first_code = code;
            guard_.first_value = value;
        }
    }

    void run_step(uint64_t step) {
        s_.batch = &batch_;
        s_.step = step;
        const Clock::time_point t0 = Clock::now();
        Clock::time_point marks[(int)Mark::COUNT] = {};
        for (const ChildDesc &child : schedule_) {
            const Clock::time_point c0 = Clock::now();
            for (const Op &op : child.ops) {
                if (op.kind == Op::RUN) run(op);
                else if (op.kind == Op::MARK) marks[op.arg] = Clock::now();
            }
            child_ms_[(int)child.id] = (float)ms_between(c0, Clock::now());
        }
        total_ms_ = (float)ms_between(t0, Clock::now());
        auto span = [&](Mark a, Mark b) { return (float)ms_between(marks[(int)a], marks[(int)b]); };
        aux_ms_[0] = span(Mark::AUX_EMA_BEGIN, Mark::AUX_EMA_END);
        aux_ms_[1] = span(Mark::AUX_IQL_BEGIN, Mark::AUX_IQL_END);
        aux_ms_[2] = span(Mark::AUX_IQN_BEGIN, Mark::AUX_IQN_END);
        aux_ms_[3] = span(Mark::AUX_ATTN_BEGIN, Mark::AUX_ATTN_END);
        aux_ms_[4] = span(Mark::AUX_TAIL_BEGIN, Mark::AUX_TAIL_END);
    }

public:

    void act(const float *obs, const float *goal, uint32_t n, float epsilon, uint64_t act_call,
             int32_t *actions, float *q_values) override {
        const Dims &d = L_.dims;
        // σ from one power iteration on a copy of the stored u: acting changes no state.
        Vec w_eff[2], v[2];
        const bool sn[2] = {d.sn1, d.sn2};
        const size_t off[2] = {L_.q.W1, L_.q.W2}, cols[2] = {d.D, d.H};
        for (int k = 0; k < 2; ++k) {
            const float *W = buf_[BUF_Q].data() + off[k];
            w_eff[k].assign(W, W + (size_t)d.H * cols[k]);
            if (!sn[k]) continue;
            Vec u(buf_[BUF_SN_U].begin() + (size_t)k * d.H, buf_[BUF_SN_U].begin() + (size_t)(k + 1) * d.H);
            v[k].resize(cols[k]);
            power_iteration(W, d.H, cols[k], u.data(), v[k].data());
            const float sigma = sn_sigma(W, d.H, cols[k], u.data(), v[k].data());
            for (float &w : w_eff[k]) w /= sigma;
        }
        Vec x((size_t)n * d.D);
        for (uint32_t i = 0; i < n; ++i) {
            memcpy(&x[(size_t)i * d.D], obs + (size_t)i * d.O, d.O * sizeof(float));
            if (d.G) memcpy(&x[(size_t)i * d.D + d.O], goal + (size_t)i * d.G, d.G * sizeof(float));
        }
        QCache c;
        q_forward(d, L_, QView{buf_[BUF_Q].data(), w_eff[0].data(), w_eff[1].data()}, x.data(), n,
                  c, cfg_.q_clip);
        for (uint32_t i = 0; i < n; ++i)
            for (uint32_t b = 0; b < d.NB; ++b) {
                const float *q = &c.q[b][(size_t)i * d.A];
                uint32_t best = 0;
                for (uint32_t a = 1; a < d.A; ++a)
                    if (q[a] > q[best]) best = a;
                const Words w = philox(cfg_.seed, i, b, (uint32_t)act_call, PURPOSE_ACT);
                if (uniform24(w.w[0]) < epsilon) best = uniform_index(w.w[1], d.A);
                actions[(size_t)i * d.NB + b] = (int32_t)best;
                if (q_values) memcpy(q_values + ((size_t)i * d.NB + b) * d.A, q, d.A * sizeof(float));
            }
    }

    void read(Buf b, size_t offset, size_t count, float *out) override {
        memcpy(out, buf_[b].data() + offset, count * sizeof(float));
    }
    void write(Buf b, size_t offset, size_t count, const float *in) override {
        memcpy(buf_[b].data() + offset, in, count * sizeof(float));
    }

    void metrics(fh_metrics *m) override {
        copy_step_metrics(s_, L_.dims.R, m);
        for (uint32_t k = 0; k < L_.dims.R; ++k) m->regime_scale[k] = buf_[BUF_REGIME][L_.dims.R + k];
    }

    void timings(fh_timings *t) override {
        t->her_ms = child_ms_[(int)ChildId::HER];
        t->spectral_ms = child_ms_[(int)ChildId::SPECTRAL];
        t->ddqn_ms = child_ms_[(int)ChildId::DDQN];
        t->forward_ms = child_ms_[(int)ChildId::FORWARD];
        t->aux_ms = child_ms_[(int)ChildId::AUX];
        t->adam_ms = child_ms_[(int)ChildId::ADAM];
        t->total_ms = total_ms_;
        t->aux_ema_ms = aux_ms_[0];
        t->aux_iql_ms = aux_ms_[1];
        t->aux_iqn_ms = aux_ms_[2];
        t->aux_attn_ms = aux_ms_[3];
        t->aux_tail_ms = aux_ms_[4];
        t->sample_ms = child_ms_[(int)ChildId::SAMPLE];
    }

    void memory(fh_memory_report *r) const override {
        const MemoryPlan p = plan_memory(cfg_, L_, FH_BACKEND_CPU);
        *r = fh_memory_report{};
        r->parameters = p.parameters;
        r->activations = p.activations - (allocated_ ? 0 : p.first_step);
        r->batch_staging = p.batch_staging;
        r->replay = p.replay;
        r->total = r->parameters + r->activations + r->workspaces + r->batch_staging + r->replay;
    }

private:
    void run(const Op &op) {
        switch (op.task) {
        case Task::SAMPLE:
            replay_->sample(cfg_.seed, s_.step, L_.dims.row0, host_batch_dst(L_.dims, batch_));
            break;
        case Task::HER_RELABEL: her_relabel(s_); break;
        case Task::HER_METRICS: break;  // her_relabel() counted in its pass over the rows
        case Task::SPECTRAL_POWER: spectral_power(s_); break;
        case Task::DDQN_ONLINE_NEXT: ddqn_online_next(s_); break;
        case Task::DDQN_TARGET: ddqn_target(s_); break;
        case Task::DDQN_JOIN: ddqn_join(s_); break;
        case Task::FWD_TRUNK:
            q_forward_trunk(s_.d, L_, s_.online_view(), s_.x.data(), s_.d.B, s_.online);
            break;
        case Task::FWD_BRANCH:
            q_forward_branch(s_.d, L_, s_.online_view(), s_.online, (uint32_t)op.arg, cfg_.q_clip);
            break;
        case Task::TD_LOSS: td_loss(s_); break;
        case Task::TD_METRICS: break;  // td_loss() summed them in its pass over the rows
        case Task::BWD_BRANCH: backward_branch(s_, (uint32_t)op.arg); break;
        case Task::BWD_TRUNK: backward_trunk(s_); break;
        case Task::EMA_TARGETS: ema_targets(s_); break;
        case Task::IQL: iql(s_); break;
        case Task::IQN: iqn(s_); break;
        case Task::IQN_BACKWARD: break;  // iqn() computed the gradient in its pass
        case Task::ATTENTION: attention(s_); break;
        case Task::AUX_ADAM:
            if (op.arg & kAdamIqn) iqn_adam(s_);
            if (op.arg & kAdamAttention) attention_adam(s_);
            break;
        case Task::CQL: cql(s_); break;
        case Task::ENSEMBLE: ensemble(s_); break;
        case Task::CONFIDENCE: confidence(s_); break;
        case Task::REGIME_SCALE: regime_scale(s_); break;
        case Task::ADAM_Q: adam_q(s_); break;
        case Task::GUARD_SNAPSHOT: snapshot(op.arg); break;
        case Task::GUARD_CHECK: guard_check(); break;
        }
    }

    fh_config cfg_;
    const Layout &L_;
    HostBuffers buf_;
    CpuStep s_;
    std::vector<ChildDesc> schedule_;
    HostBatch batch_, spare_;  // the batch the next step trains on; the next upload's buffer
    std::unique_ptr<HostReplay> replay_;  // with a replay: SAMPLE fills batch_ from it
    float child_ms_[(int)ChildId::COUNT] = {};
    float aux_ms_[5] = {};
    float total_ms_ = 0;
    bool allocated_ = false;  // a step has completed: every step buffer exists
    bool has_batch_ = false;  // an upload was accepted
    HostBuffers shadow_;      // the persistent buffers as the running step found them
    int snapshot_parts_ = 0;  // the parts of shadow_ this step has taken (kSnapshot* bits)
    GuardReport guard_;
};

}  // namespace

}  // namespace fh::cpu

namespace fh {
std::unique_ptr<Backend> make_cpu_backend(const fh_config &c, const Layout &L, HostBuffers init) {
    return std::make_unique<cpu::CpuBackend>(c, L, std::move(init));
}
}  // namespace fh
