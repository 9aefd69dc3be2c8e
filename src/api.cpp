// The C ABI boundary: argument checks, the step and act counters, tensor names, checkpoints.
// Every entry point runs its body through guard(), which turns any exception into a status and
// the thread-local message; nothing escapes into the caller. Structs that grew in 0.2 are
// accepted at their 0.1 size too (read into, or copied out of, a struct of today's size).
#include <foxhunt.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <new>
#include <string>
#include <vector>

#include "backend.hpp"
#include "batch.hpp"
#include "checkpoint.hpp"
#include "config.hpp"
#include "error.hpp"
#include "guard.hpp"
#include "layout.hpp"
#include "memory_plan.hpp"
#include "state_ranges.hpp"

struct fh_pipeline {
    fh_config config;
    fh::Layout layout;
    std::unique_ptr<fh::Backend> backend;
    uint64_t step = 0;       // steps completed
    uint64_t act_calls = 0;  // act calls completed
    bool has_metrics = false;  // a step ran since creation or the last load
};

namespace {

template <class F>
fh_status guard(F &&body) {
    try {
        body();
        fh::clear_last_error();
        return FH_OK;
    } catch (const fh::Error &e) {
        fh::set_last_error(e.status, e.message);
        return e.status;
    } catch (const std::bad_alloc &) {
        fh::set_last_error(FH_ERR_OUT_OF_MEMORY, "host allocation failed");
        return FH_ERR_OUT_OF_MEMORY;
    } catch (const std::exception &e) {
        fh::set_last_error(FH_ERR_INTERNAL, e.what());
        return FH_ERR_INTERNAL;
    } catch (...) {
        fh::set_last_error(FH_ERR_INTERNAL, "unknown exception");
        return FH_ERR_INTERNAL;
    }
}

void need(const void *p, const char *arg) {
    if (!p) fh::fail(FH_ERR_NULL_POINTER, "argument '%s' is NULL", arg);
}

void need_size(size_t got, size_t want, const char *what, size_t want_01 = 0) {
    if (got != want && (want_01 == 0 || got != want_01))
        fh::fail(FH_ERR_STRUCT_SIZE, "%s.struct_size = %zu, expected %zu", what, got, want);
}

// Every entry point that takes a pipeline starts here: the handle, then whatever earlier calls
// left pending on the device (a device-memory check), whose refusal this call then returns.
void use(const fh_pipeline *p) {
    need(p, "pipeline");
    p->backend->settle();
}

// A call that would take a count to 2^63 (fh::kCountLimit, which fh_pipeline_load refuses) is
// refused before it runs: only a doctored checkpoint starts that close.
void check_count(uint64_t now, uint64_t add, const char *count) {
    if (now >= fh::kCountLimit || add > fh::kCountLimit - 1 - now)
        fh::fail(FH_ERR_OUT_OF_RANGE, "the %s is %llu: %llu more would reach 2^63 or pass it, a "
                 "count a checkpoint may not hold (fh_pipeline_load refuses it); nothing ran",
                 count, (unsigned long long)now, (unsigned long long)add);
}

// Copies @p full into the caller's struct, which may have an older, shorter size.
template <class T>
void copy_out(T *dst, const T &full) {
    const size_t n = dst->struct_size;
    memcpy(dst, &full, n);
    dst->struct_size = n;
}

// Steps draw from the replay, or train on the uploaded batch: either must exist (SPEC §2.1).
void need_batch(const fh_pipeline *p, const char *call) {
    if (p->layout.dims.K > 0) {
        if (p->backend->replay_rows() == 0)
            fh::fail(FH_ERR_NO_BATCH, "%s with an empty replay: insert rows first "
                     "(fh_pipeline_insert, SPEC §2.1)", call);
    } else if (!p->backend->has_batch()) {
        fh::fail(FH_ERR_NO_BATCH, "%s before any fh_pipeline_upload", call);
    }
}

const fh::TensorEntry &find(const fh_pipeline *p, const char *name) {
    need(name, "name");
    const fh::TensorEntry *t = p->layout.find(name);
    if (!t) fh::fail(FH_ERR_UNKNOWN_NAME, "no tensor is named '%s'", name);
    return *t;
}

void fill_info(const fh::TensorEntry &t, fh_tensor_info *info) {
    need_size(info->struct_size, sizeof(fh_tensor_info), "info");
    info->name = t.name.c_str();
    info->rows = t.rows;
    info->cols = t.cols;
    info->group = t.group;
    info->writable = t.writable ? 1 : 0;
}

// A validated copy of @p config with the backend resolved (AUTO: CUDA where there is a device).
fh_config resolved(const fh_config *config) {
    need(config, "config");
    fh_config c = fh::read_config(*config);
    fh::validate_config(c);
    if (c.backend == FH_BACKEND_AUTO)
        c.backend = fh::cuda_available(c.device) ? FH_BACKEND_CUDA : FH_BACKEND_CPU;
    else if (c.backend == FH_BACKEND_CUDA && !fh::cuda_available(c.device))
        fh::fail(FH_ERR_NO_CUDA, "config.backend = FH_BACKEND_CUDA but this build or machine "
                 "has no CUDA device %d", c.device);
    return c;
}

void fill_report(const fh::MemoryPlan &m, fh_memory_report *r) {
    fh_memory_report full{};
    full.struct_size = sizeof(fh_memory_report);
    full.parameters = m.parameters;
    full.activations = m.activations;
    full.workspaces = m.workspaces;
    full.batch_staging = m.batch_staging;
    full.replay = m.replay;
    full.total = m.total();
    copy_out(r, full);
}

// SPEC §9: this pipeline's rank and the world size from config.nccl_comm (0 and 1 without
// one); a communicator is refused for the CPU backend. @p c is @p asked resolved.
void comm_rank_world(const fh_config &c, const fh_config &asked, uint32_t *rank, uint32_t *world) {
    if (!c.nccl_comm) return;
    if (c.backend != FH_BACKEND_CUDA)
        fh::fail(FH_ERR_UNSUPPORTED, "config.nccl_comm is set, but the pipeline would run on the "
                 "CPU backend%s, which has no data-parallel step (SPEC §9 runs on "
                 "FH_BACKEND_CUDA)", asked.backend == FH_BACKEND_AUTO ?
                 " (FH_BACKEND_AUTO found no CUDA device)" : "");
    fh::nccl_rank_world(c.nccl_comm, c.device, rank, world);
}

}  // namespace

extern "C" {

uint32_t fh_version(void) { return FOXHUNT_VERSION_NUMBER; }

fh_status fh_memory_plan(const fh_config *config, fh_memory_report *report) {
    return guard([&] {
        need(report, "report");
        need_size(report->struct_size, sizeof(fh_memory_report), "report",
                  offsetof(fh_memory_report, replay));
        const fh_config c = resolved(config);
        uint32_t rank = 0, world = 1;
        comm_rank_world(c, *config, &rank, &world);
        fill_report(fh::plan_memory(c, fh::make_layout(fh::make_dims(c, rank, world)), c.backend),
                    report);
    });
}

fh_status fh_pipeline_create(const fh_config *config, fh_pipeline **out) {
    if (out) *out = nullptr;
    return guard([&] {
        need(config, "config");
        need(out, "out");
        const fh_config c = resolved(config);
        const int backend = c.backend;
        uint32_t rank = 0, world = 1;
        comm_rank_world(c, *config, &rank, &world);
        auto p = std::make_unique<fh_pipeline>();
        p->config = c;
        p->layout = fh::make_layout(fh::make_dims(c, rank, world));
        // Refuse before allocating what the machine does not have (a config can need tens of
        // GiB; allocating until failure took minutes).
        const fh::MemoryPlan plan = fh::plan_memory(c, p->layout, backend);
        std::string source;
        fh::check_fits(plan.host, fh::host_available_bytes(&source), "host memory", source, plan);
        if (backend == FH_BACKEND_CUDA)
            fh::check_fits(plan.device, fh::cuda_free_bytes(c.device),
                           "device memory of CUDA device " + std::to_string(c.device),
                           "cudaMemGetInfo", plan);
        fh::HostBuffers init = fh::initial_state(p->layout, c.seed);
        p->backend = backend == FH_BACKEND_CUDA
                         ? fh::make_cuda_backend(c, p->layout, std::move(init))
                         : fh::make_cpu_backend(c, p->layout, std::move(init));
        *out = p.release();
    });
}

void fh_pipeline_destroy(fh_pipeline *p) { delete p; }

fh_status fh_pipeline_backend(const fh_pipeline *p, int32_t *backend) {
    return guard([&] {
        use(p);
        need(backend, "backend");
        *backend = p->config.backend;
    });
}

fh_status fh_pipeline_config(const fh_pipeline *p, fh_config *config) {
    return guard([&] {
        use(p);
        need(config, "config");
        need_size(config->struct_size, sizeof(fh_config), "config",
                  offsetof(fh_config, replay_capacity));
        copy_out(config, p->config);
    });
}

fh_status fh_pipeline_upload(fh_pipeline *p, const fh_batch *batch) {
    return guard([&] {
        use(p);
        const fh_batch b = fh::read_batch(batch);
        if (p->layout.dims.K > 0)
            fh::fail(FH_ERR_UNSUPPORTED, "fh_pipeline_upload on a pipeline with a replay: its "
                     "steps draw their batches from the replay (SPEC §5.0); append rows with "
                     "fh_pipeline_insert");
        fh::check_batch_header(p->layout.dims, &b);
        if (b.memory == FH_MEMORY_DEVICE) p->backend->upload_device(b);
        else p->backend->upload(b);
    });
}

fh_status fh_pipeline_step(fh_pipeline *p) {
    return guard([&] {
        use(p);
        need_batch(p, "fh_pipeline_step");
        check_count(p->step, 1, "step count");
        p->backend->step(p->step);
        ++p->step;
        p->has_metrics = true;
    });
}

fh_status fh_pipeline_train(fh_pipeline *p, uint32_t k) {
    return guard([&] {
        use(p);
        if (k == 0) fh::fail(FH_ERR_BAD_VALUE, "argument 'k' = 0: train runs at least one step");
        need_batch(p, "fh_pipeline_train");
        check_count(p->step, k, "step count");
        p->backend->train(p->step, k);
        p->step += k;
        p->has_metrics = true;
    });
}

fh_status fh_pipeline_insert(fh_pipeline *p, const fh_replay_rows *rows) {
    return guard([&] {
        use(p);
        const fh_replay_rows r = fh::read_rows(rows);
        if (p->layout.dims.K == 0)
            fh::fail(FH_ERR_UNSUPPORTED, "fh_pipeline_insert on a pipeline without a replay "
                     "(config.replay_capacity = 0)");
        fh::check_rows_header(p->layout.dims, r);
        check_count(p->backend->replay_rows(), r.num_rows, "rows-inserted count");
        p->backend->insert(r);
    });
}

fh_status fh_pipeline_sync(fh_pipeline *p) {
    return guard([&] {
        use(p);
        p->backend->sync();
    });
}

fh_status fh_pipeline_act(fh_pipeline *p, const float *obs, const float *goal, uint32_t n,
                          float epsilon, int32_t *actions, float *q_values) {
    return guard([&] {
        use(p);
        need(obs, "obs");
        need(actions, "actions");
        const fh::Dims &d = p->layout.dims;
        if (d.G > 0) need(goal, "goal");
        if (n == 0) fh::fail(FH_ERR_BUFFER_SIZE, "argument 'n' = 0: act needs at least one row");
        if (!(epsilon >= 0.0f && epsilon <= 1.0f))
            fh::fail(FH_ERR_BAD_VALUE, "argument 'epsilon' = %.9g is outside [0, 1]",
                     (double)epsilon);
        fh::check_finite("obs", obs, n, d.O);
        if (d.G > 0) fh::check_finite("goal", goal, n, d.G);
        check_count(p->act_calls, 1, "act-call count");
        const size_t nq = (size_t)n * d.NB * d.A;
        // The q values are checked even when the caller wants none: then in scratch of this
        // call's own, which the pipeline does not keep.
        std::vector<float> scratch(q_values ? 0 : nq);
        float *q = q_values ? q_values : scratch.data();
        p->backend->act(obs, d.G > 0 ? goal : nullptr, n, epsilon, p->act_calls, actions, q);
        // An argmax over NaN picks an arbitrary action: refuse rather than act on it.
        const size_t bad = fh::first_non_finite_index(q, nq);
        if (bad < nq)
            fh::fail(FH_ERR_NON_FINITE, "the q-value of row %zu, branch %zu, action %zu is %g: "
                     "the Q net gives no finite value for this input (its parameters may be "
                     "too large); no action was chosen", bad / ((size_t)d.NB * d.A),
                     bad / d.A % d.NB, bad % d.A, (double)q[bad]);
        ++p->act_calls;
    });
}

fh_status fh_pipeline_metrics(fh_pipeline *p, fh_metrics *m) {
    return guard([&] {
        use(p);
        need(m, "metrics");
        need_size(m->struct_size, sizeof(fh_metrics), "metrics",
                  offsetof(fh_metrics, steps_skipped));
        fh_metrics full{};
        if (!p->has_metrics) {  // before the first step, and after a load until the next step
            full.num_regimes = p->layout.dims.R;
            const fh::TensorEntry &rho = *p->layout.find("regime.scale");
            p->backend->read(rho.buf, rho.offset, rho.count(), full.regime_scale);
        } else {
            p->backend->metrics(&full);
        }
        full.struct_size = sizeof(fh_metrics);
        full.step = p->step;
        const fh::GuardReport g = p->backend->guard_report(false);
        full.steps_skipped = g.skipped;
        full.last_step_skipped = p->has_metrics && g.last_skipped ? 1 : 0;
        copy_out(m, full);
    });
}

fh_status fh_pipeline_check(fh_pipeline *p) {
    return guard([&] {
        use(p);
        const fh::GuardReport g = p->backend->guard_report(true);
        if (!g.available)
            fh::fail(FH_ERR_INTERNAL, "this build's %s executor does not run the divergence "
                     "guard", p->config.backend == FH_BACKEND_CUDA ? "CUDA" : "CPU");
        if (g.pending > 0) fh::fail(FH_ERR_NON_FINITE, "%s", fh::guard_message(p->layout, g).c_str());
    });
}

fh_status fh_pipeline_timings(fh_pipeline *p, fh_timings *t) {
    return guard([&] {
        use(p);
        need(t, "timings");
        need_size(t->struct_size, sizeof(fh_timings), "timings", offsetof(fh_timings, sample_ms));
        fh_timings full{};
        full.struct_size = sizeof(fh_timings);
        if (p->has_metrics) p->backend->timings(&full);
        copy_out(t, full);
    });
}

fh_status fh_pipeline_num_tensors(const fh_pipeline *p, uint32_t *count) {
    return guard([&] {
        use(p);
        need(count, "count");
        *count = (uint32_t)p->layout.tensors.size();
    });
}

fh_status fh_pipeline_tensor_info(const fh_pipeline *p, uint32_t index, fh_tensor_info *info) {
    return guard([&] {
        use(p);
        need(info, "info");
        if (index >= p->layout.tensors.size())
            fh::fail(FH_ERR_OUT_OF_RANGE, "argument 'index' = %u is outside [0, %zu)", index,
                     p->layout.tensors.size());
        fill_info(p->layout.tensors[index], info);
    });
}

fh_status fh_pipeline_find_tensor(const fh_pipeline *p, const char *name, fh_tensor_info *info) {
    return guard([&] {
        use(p);
        need(info, "info");
        fill_info(find(p, name), info);
    });
}

fh_status fh_pipeline_read_tensor(fh_pipeline *p, const char *name, float *out, size_t count) {
    return guard([&] {
        use(p);
        const fh::TensorEntry &t = find(p, name);
        need(out, "out");
        if (count != t.count())
            fh::fail(FH_ERR_BUFFER_SIZE, "argument 'count' = %zu but tensor '%s' [%u, %u] has %zu",
                     count, name, t.rows, t.cols, t.count());
        p->backend->read(t.buf, t.offset, count, out);
    });
}

fh_status fh_pipeline_write_tensor(fh_pipeline *p, const char *name, const float *in,
                                   size_t count) {
    return guard([&] {
        use(p);
        const fh::TensorEntry &t = find(p, name);
        if (!t.writable)
            fh::fail(FH_ERR_UNKNOWN_NAME, "tensor '%s' is read-only (a step output, or regime "
                     "state with num_regimes = 1)", name);
        need(in, "in");
        if (count != t.count())
            fh::fail(FH_ERR_BUFFER_SIZE, "argument 'count' = %zu but tensor '%s' [%u, %u] has %zu",
                     count, name, t.rows, t.cols, t.count());
        fh::check_finite(name, in, t.rows, t.cols);
        // The range checks see `in` for this tensor and the current values of the others.
        std::deque<std::vector<float>> current;  // deque: earlier pointers stay valid
        fh::check_state_range(p->config, p->layout, t, [&](const fh::TensorEntry &o) {
            if (o.name == t.name) return in;
            current.emplace_back(o.count());
            p->backend->read(o.buf, o.offset, o.count(), current.back().data());
            return (const float *)current.back().data();
        });
        p->backend->write(t.buf, t.offset, count, in);
    });
}

fh_status fh_pipeline_save_ex(fh_pipeline *p, const char *path, uint32_t flags) {
    return guard([&] {
        use(p);
        need(path, "path");
        if (flags & ~FH_SAVE_REPLAY)
            fh::fail(FH_ERR_BAD_VALUE, "argument 'flags' = 0x%x has bits other than "
                     "FH_SAVE_REPLAY", flags);
        if ((flags & FH_SAVE_REPLAY) && p->layout.dims.K == 0)
            fh::fail(FH_ERR_UNSUPPORTED, "FH_SAVE_REPLAY on a pipeline without a replay "
                     "(config.replay_capacity = 0)");
        fh::ReplayImage replay;
        if (flags & FH_SAVE_REPLAY) replay = p->backend->replay_image();
        fh::save_checkpoint(path, p->config, p->layout, p->step, p->act_calls,
                            [&](fh::Buf b, size_t offset, size_t count, float *out) {
                                p->backend->read(b, offset, count, out);
                            },
                            (flags & FH_SAVE_REPLAY) ? &replay : nullptr);
    });
}

fh_status fh_pipeline_save(fh_pipeline *p, const char *path) {
    return fh_pipeline_save_ex(p, path, 0);
}

fh_status fh_pipeline_load(fh_pipeline *p, const char *path) {
    return guard([&] {
        use(p);
        need(path, "path");
        fh::Checkpoint ck = fh::load_checkpoint(path, p->config, p->layout);
        if (ck.has_replay) p->backend->restore_replay(ck.replay);
        for (int b = 0; b < fh::NUM_PERSISTENT; ++b)
            p->backend->write((fh::Buf)b, 0, ck.bufs[b].size(), ck.bufs[b].data());
        p->step = ck.step;
        p->act_calls = ck.act_calls;
        p->has_metrics = false;
        p->backend->guard_report(true);  // a skip before the load says nothing about this state
    });
}

fh_status fh_pipeline_memory(const fh_pipeline *p, fh_memory_report *r) {
    return guard([&] {
        use(p);
        need(r, "report");
        need_size(r->struct_size, sizeof(fh_memory_report), "report",
                  offsetof(fh_memory_report, replay));
        fh_memory_report full{};
        p->backend->memory(&full);
        full.struct_size = sizeof(fh_memory_report);
        copy_out(r, full);
    });
}

fh_status fh_pipeline_dump_graph(fh_pipeline *p, const char *path) {
    return guard([&] {
        use(p);
        need(path, "path");
        p->backend->dump_graph(path);
    });
}

}  // extern "C"

namespace fh {

GuardReport Backend::guard_report(bool) { return GuardReport{}; }

void Backend::dump_graph(const char *) {
    fail(FH_ERR_NO_CUDA, "this pipeline runs on the CPU backend: there is no CUDA graph to dump");
}

void Backend::train(uint64_t step0, uint32_t k) {
    for (uint32_t i = 0; i < k; ++i) step(step0 + i);
}

}  // namespace fh
