/* Memory, measured by counting every operator new of this process (the library is linked in
 * statically, so its allocations land here): the plan (fh_memory_plan) against what a pipeline
 * really holds and peaks at, a config that does not fit refused before it allocates (L3), a
 * failed first step that gives back what it allocated (L4), a save whose extra memory does not
 * grow with the checkpoint (L2), and a load that refuses a large file from its header (M2). */
#include "memory_plan.hpp"
#include "schedule.hpp"
#include "replay_ref.hpp"  // before cmocka.h

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "test_cuda_util.h"

namespace {
std::atomic<size_t> g_live{0}, g_peak{0}, g_limit{SIZE_MAX};
constexpr size_t kHeader = 16;  // keeps the returned pointer 16-byte aligned

void *counted_new(size_t n) {
    const size_t live = g_live.fetch_add(n) + n;
    if (live > g_limit.load()) {
        g_live.fetch_sub(n);
        return nullptr;
    }
    size_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {}
    char *p = static_cast<char *>(malloc(n + kHeader));
    if (!p) {
        g_live.fetch_sub(n);
        return nullptr;
    }
    memcpy(p, &n, sizeof n);
    return p + kHeader;
}
void counted_delete(void *q) {
    if (!q) return;
    char *p = static_cast<char *>(q) - kHeader;
    size_t n;
    memcpy(&n, p, sizeof n);
    g_live.fetch_sub(n);
    free(p);
}
}  // namespace

void *operator new(size_t n) {
    if (void *p = counted_new(n)) return p;
    throw std::bad_alloc();
}
void *operator new[](size_t n) {
    if (void *p = counted_new(n)) return p;
    throw std::bad_alloc();
}
void *operator new(size_t n, const std::nothrow_t &) noexcept { return counted_new(n); }
void *operator new[](size_t n, const std::nothrow_t &) noexcept { return counted_new(n); }
void operator delete(void *p) noexcept { counted_delete(p); }
void operator delete[](void *p) noexcept { counted_delete(p); }
void operator delete(void *p, size_t) noexcept { counted_delete(p); }
void operator delete[](void *p, size_t) noexcept { counted_delete(p); }

namespace {

/* Peak of live bytes above the level at the start of the scope. */
struct PeakScope {
    size_t start = g_live.load();
    PeakScope() { g_peak.store(start); }
    size_t peak() const { return g_peak.load() - start; }
};

fh_pipeline *make(const fh_config &c) {
    fh_pipeline *p = nullptr;
    if (fh_pipeline_create(&c, &p) != FH_OK) fail_msg("create: %s", fh_last_error_message());
    return p;
}

fh::MemoryPlan plan_of(const fh_config &c) {
    return fh::plan_memory(c, fh::make_layout(fh::make_dims(c)), FH_BACKEND_CPU);
}

void check_plan(const char *what, const fh_config &c) {
    fh_memory_report plan;
    plan.struct_size = sizeof plan;
    if (fh_memory_plan(&c, &plan) != FH_OK) fail_msg("plan: %s", fh_last_error_message());
    const fh::MemoryPlan internal = plan_of(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 1);  /* malloc'd: not counted */
    replay_ref::Rows rows;
    if (c.replay_capacity > 0) rows = replay_ref::random_rows(c, c.replay_capacity + 7, 3, 0.1);
    const size_t live0 = g_live.load();
    fh_pipeline *p = make(c);
    const size_t created = g_live.load() - live0;
    PeakScope scope;
    if (c.replay_capacity > 0) {  /* more rows than the ring keeps: it wraps */
        const fh_replay_rows v = rows.view();
        assert_int_equal(fh_pipeline_insert(p, &v), FH_OK);
    } else {
        for (int k = 0; k < 2; ++k)  /* two uploads: both batch buffers exist */
            assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    }
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    const size_t held = g_live.load() - live0, peak = scope.peak() + (scope.start - live0);
    fh_memory_report rep;
    rep.struct_size = sizeof rep;
    assert_int_equal(fh_pipeline_memory(p, &rep), FH_OK);
    /* Bookkeeping beside the buffers (measured: 17 KB): the tensor registry's names, the
     * schedule, handles. */
    const double slack = 32 * 1024 + 0.001 * (double)plan.total;
    printf("[MEMORY] %-22s plan %11llu  held %11llu (%+7lld)  at creation %11llu  peak %11llu "
           "(plan + scratch %11llu)\n", what, (unsigned long long)plan.total,
           (unsigned long long)held, (long long)held - (long long)plan.total,
           (unsigned long long)created, (unsigned long long)peak,
           (unsigned long long)(plan.total + internal.transient));
    assert_int_equal(rep.total, plan.total);
    assert_int_equal(rep.replay, plan.replay);
    if (std::abs((double)held - (double)plan.total) > slack)
        fail_msg("%s: held %zu bytes, the plan says %llu", what, held,
                 (unsigned long long)plan.total);
    if ((double)peak > (double)(plan.total + internal.transient) + slack)
        fail_msg("%s: peak %zu bytes above the plan's %llu + %llu", what, peak,
                 (unsigned long long)plan.total, (unsigned long long)internal.transient);
    /* Before the first upload (insert) and step, their parts are not held yet; the replay is. */
    const uint64_t at_creation = plan.total - internal.first_step - plan.batch_staging;
    if (std::abs((double)created - (double)at_creation) > slack)
        fail_msg("%s: %zu bytes at creation, the plan without the first step and batches %llu",
                 what, created, (unsigned long long)at_creation);
    fh_pipeline_destroy(p);
    fh_test_batch_free(&tb);
    assert_int_equal(g_live.load(), live0);
}

/* The replay's bytes as SPEC §2.1 lays it out, by hand: per transition obs and next_obs
 * (O floats each), goal and next_achieved_goal (G floats each), NB int32 actions, reward,
 * regime (4 bytes each), done and episode_end (1 byte each), and the episode table's uint32
 * slot; per environment one uint64 (the open episode's first row). */
uint64_t replay_bytes_by_hand(const fh_config &c) {
    const uint64_t per = 8 * c.obs_dim + 8 * c.goal_dim + 4 * c.num_branches + 4 + 4 + 1 + 1;
    return (uint64_t)c.replay_capacity * c.replay_envs * (per + 4) + 8ull * c.replay_envs;
}

void test_plan_matches_what_a_pipeline_holds(void **) {
    fh_config c = fh_test_small_config();
    check_plan("small", c);
    c.sn_layers = FH_SN_W1 | FH_SN_W2;
    c.goal_dim = 0;
    c.num_regimes = 1;
    c.cql_alpha = 0;
    check_plan("small, no goal, SN both", c);
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 256;
    check_plan("defaults, B = 256", c);
    c.batch_size = 1024;
    c.iqn_n = 16;
    c.iqn_n_target = 4;
    check_plan("defaults, B = 1024", c);
    c = replay_ref::config(64, 5);
    fh_memory_report r;
    r.struct_size = sizeof r;
    assert_int_equal(fh_memory_plan(&c, &r), FH_OK);
    assert_int_equal(r.replay, replay_bytes_by_hand(c));
    check_plan("small, replay 64 x 5", c);
    c.goal_dim = 0;
    assert_int_equal(fh_memory_plan(&c, &r), FH_OK);
    assert_int_equal(r.replay, replay_bytes_by_hand(c));
    check_plan("no goal, replay 64 x 5", c);
}

/* The CUDA plan, computed here without a device from the attention path's sizes (on a GPU,
 * test_cuda_memory_plan compares it with what the executor allocates): the cuBLAS workspaces
 * as docs/cuda.md describes them (lanes 0 and 1 and act share one, lane 2 has its own, lanes 3
 * and 4 run only branch layers and get half each; one with a single stream), the state twice
 * (the guard's copy) with the Q-net gradient and the step counter, the device input block plus
 * two pinned slots and the 16-byte check record twice (device and pinned), the attention's
 * partial rows and scratch as given, and with a replay the ring and two pinned insert slots
 * (and no upload slots). */
void test_cuda_plan_categories(void **) {
    fh_config c;
    fh_config_init(&c);
    c.batch_size = 1000;
    const fh::Layout L = fh::make_layout(fh::make_dims(c));
    uint64_t state = 0;
    for (int b = 0; b < fh::NUM_PERSISTENT; ++b) state += L.buf_size[b];
    const fh::AttentionSizes attn{100, 4096};
    const fh::MemoryPlan multi = fh::plan_cuda(c, L, attn);
    assert_int_equal(multi.workspaces, (32ull + 32 + 16 + 16) << 20);
    assert_int_equal(multi.parameters, (2 * state + L.q.total) * 4 + 8);
    auto r256 = [](uint64_t n) { return (n + 255) / 256 * 256; };
    const uint64_t B = c.batch_size;
    const uint64_t in = r256(B * 124 * 4) * 2 + r256(B * 4) + r256(B * 4 * 4) * 3 +
                        r256(B * 4 * 4) + r256(B * 4) + r256(B);
    assert_int_equal(multi.batch_staging, 3 * in + 2 * 16);
    assert_int_equal(multi.replay, 0);
    assert_int_equal(multi.device, multi.total() - 2 * in - 16);
    /* 64 more partial rows of T·3d + 3d·td + 3d·G = 32·192 + 192·4 + 192·4 floats (a multiple
     * of 256 bytes, so no alignment moves), and 1000 more bytes of scratch (the last part). */
    const fh::MemoryPlan more = fh::plan_cuda(c, L, fh::AttentionSizes{164, 5096});
    assert_int_equal(more.activations - multi.activations, 64ull * 7680 * 4 + 1000);
    c.exec_mode = FH_EXEC_SINGLE_STREAM;
    const fh::MemoryPlan single = fh::plan_cuda(c, L, attn);
    assert_int_equal(single.workspaces, 32ull << 20);
    assert_int_equal(single.activations, multi.activations);
    {
        /* Two branches, no CQL, one regime: nothing runs on lane 3, so it is neither forked nor
         * given a workspace (lanes 0, 1 share one, lane 2 has its own: +32 MiB multi-stream). */
        fh_config n = c;
        n.exec_mode = FH_EXEC_MULTI_STREAM;
        n.num_branches = 2;
        n.cql_alpha = 0.0f;
        n.num_regimes = 1;
        const fh::Dims dn = fh::make_dims(n);
        const fh::Layout Ln = fh::make_layout(dn);
        assert_int_equal(fh::plan_cuda(n, Ln, attn).workspaces, (32ull + 32) << 20);
        for (const fh::ChildDesc &ch : fh::build_schedule(dn, n)) {
            assert_true(ch.num_lanes <= 3);
            for (const fh::Op &op : ch.ops) assert_true(op.lane <= 2 && op.lanes < (1u << 3));
        }
        /* With CQL back, lane 3 runs it (half a workspace). */
        n.cql_alpha = 0.1f;
        assert_int_equal(fh::plan_cuda(n, Ln, attn).workspaces, (32ull + 32 + 16) << 20);
    }
    /* The ring of cuda/replay.cu: each of the nine fields, the episode table [K, E] of uint32
     * and the E uint64 starts 256-byte aligned, then 256 bytes for the row count; two insert
     * slots of all K rows (K·E transitions of 102 bytes are far below 16 MiB), fields aligned. */
    c = replay_ref::config(1000, 3);
    c.backend = FH_BACKEND_CUDA;
    const fh::Layout Lr = fh::make_layout(fh::make_dims(c));
    const uint64_t KE = 3000, O = c.obs_dim, G = c.goal_dim, NB = c.num_branches;
    const uint64_t fields = 2 * r256(KE * O * 4) + 2 * r256(KE * G * 4) + r256(KE * NB * 4) +
                            2 * r256(KE * 4) + 2 * r256(KE);
    const fh::MemoryPlan withr = fh::plan_cuda(c, Lr, attn);
    assert_int_equal(withr.replay, fields + r256(KE * 4) + r256(3 * 8) + 256 + 2 * fields);
    const uint64_t Br = c.batch_size;
    const uint64_t in_r = r256(Br * O * 4) * 2 + r256(Br * 4) + r256(Br * G * 4) * 3 +
                          r256(Br * NB * 4) + r256(Br * 4) + r256(Br);
    assert_int_equal(withr.batch_staging, in_r + 2 * 16);
    assert_int_equal(withr.device, withr.total() - 16 - 2 * fields);
}

/* L3: B = 2^20 with obs_dim = 1024 passed every per-dimension check and then spent ~80 s and
 * 12.7 GB before failing: its [x~; x~'] array alone has 2^21 x 1028 elements, more than a
 * 32-bit index reaches, so it is refused outright. With the default obs_dim the arrays fit the
 * indices but not this machine (the plan says ~0.2 TB): refused from the plan, with nothing
 * allocated. */
void test_creation_refused_before_allocating(void **) {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 1u << 20;
    c.obs_dim = 1024;
    fh_pipeline *p = reinterpret_cast<fh_pipeline *>(&c);
    assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_BAD_DIMENSION);
    assert_null(p);
    if (!strstr(fh_last_error_message(), "2^31")) fail_msg("message: %s", fh_last_error_message());
    fh_memory_report r;
    r.struct_size = sizeof r;
    assert_int_equal(fh_memory_plan(&c, &r), FH_ERR_BAD_DIMENSION);

    c.obs_dim = 124;
    PeakScope plan_scope;
    assert_int_equal(fh_memory_plan(&c, &r), FH_OK);
    assert_true(plan_scope.peak() < (1u << 20));
    std::string source;
    const uint64_t avail = fh::host_available_bytes(&source);
    printf("[MEMORY] B = 2^20, obs_dim = 124: the plan says %.1f GB; %.1f GB available (%s)\n",
           (double)r.total / 1e9, (double)avail / 1e9, source.c_str());
    if (r.total <= avail) {
        printf("[MEMORY] this machine has room for it: refusal not checked\n");
        return;
    }
    PeakScope scope;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_OUT_OF_MEMORY);
    assert_null(p);
    const char *msg = fh_last_error_message();
    if (!strstr(msg, "config needs ") || !strstr(msg, " bytes of host memory") ||
        !strstr(msg, "available"))
        fail_msg("message: %s", msg);
    printf("[MEMORY] refused with %zu bytes allocated at the peak: %s\n", scope.peak(), msg);
    assert_true(scope.peak() < (1u << 20));
    /* A replay of 2^32 transitions (K·E at SPEC §2.1's limit, ~0.4 TB): the message names the
     * replay's bytes among the parts it adds up. */
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.replay_capacity = c.replay_envs = 65536;
    assert_int_equal(fh_memory_plan(&c, &r), FH_OK);
    if (r.replay <= avail) {
        printf("[MEMORY] this machine has room for the replay: refusal not checked\n");
        return;
    }
    assert_int_equal(fh_pipeline_create(&c, &p), FH_ERR_OUT_OF_MEMORY);
    const std::string want = "replay " + std::to_string(r.replay);
    if (!strstr(fh_last_error_message(), want.c_str()))
        fail_msg("message without '%s': %s", want.c_str(), fh_last_error_message());
}

/* L4: a first step that runs out of memory half way restores the state and gives back what it
 * had allocated; the next step, with memory, is the step a fresh pipeline takes. */
void test_failed_first_step_frees_its_memory(void **) {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 512;
    const fh::MemoryPlan plan = plan_of(c);
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 5);
    fh_pipeline *p = make(c), *ref = make(c);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    assert_int_equal(fh_pipeline_upload(ref, &tb.batch), FH_OK);
    for (double frac : {0.1, 0.5, 0.9}) {
        const size_t before = g_live.load();
        g_limit.store(before + (size_t)(frac * (double)plan.first_step));
        const fh_status s = fh_pipeline_step(p);
        g_limit.store(SIZE_MAX);
        if (s != FH_ERR_OUT_OF_MEMORY) fail_msg("step with %.0f%% of the first step's memory: %s",
                                               100 * frac, fh_status_string(s));
        printf("[MEMORY] first step failed with %.0f%% of its %llu bytes: %zu bytes still held "
               "after it (%zu before)\n", 100 * frac, (unsigned long long)plan.first_step,
               g_live.load(), before);
        assert_int_equal(g_live.load(), before);
    }
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    assert_int_equal(fh_pipeline_step(ref), FH_OK);
    const fhtest::Diff d = fhtest::compare(p, ref);
    if (!d.bitwise) fail_msg("%s differs from a pipeline whose first step had memory",
                             d.worst.c_str());
    fh_test_batch_free(&tb);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(ref);
}

/* L2: save used about 3x the checkpoint in extra memory; it now streams through 512 KiB. */
void test_save_memory_does_not_grow_with_the_checkpoint(void **) {
    fh_config c = fh_test_small_config();
    c.trunk_hidden = 1024;
    c.branch_hidden = 512;
    c.iqn_hidden = 512;
    fh_pipeline *p = make(c);
    const char *path = fh_test_tmp_path("memory_save.ckpt");
    PeakScope scope;
    assert_int_equal(fh_pipeline_save(p, path), FH_OK);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fclose(f);
    printf("[MEMORY] save of a %.1f MB checkpoint peaked at %.2f MB of extra memory\n",
           size / 1e6, scope.peak() / 1e6);
    assert_true(size > 40l << 20);
    assert_true(scope.peak() < (1u << 20));
    remove(path);
    fh_pipeline_destroy(p);
}

/* L2 with the replay: a save holds one copy of the replay's rows (the image it writes from)
 * besides its 512 KiB, and a load holds the checkpoint's contents once (it used to read the
 * whole file and then copy it into the state: twice the file). */
void test_checkpoint_with_replay_holds_it_once(void **) {
    const fh_config c = replay_ref::config(50000, 8);
    fh_pipeline *p = make(c);
    {
        const replay_ref::Rows rows = replay_ref::random_rows(c, 50000, 5, 0.05);
        const fh_replay_rows v = rows.view();
        assert_int_equal(fh_pipeline_insert(p, &v), FH_OK);
    }
    const uint64_t image = 50000ull * 8 * (8 * 8 + 8 * 2 + 4 * 3 + 4 + 4 + 1 + 1);
    const char *path = fh_test_tmp_path("memory_replay.ckpt");
    PeakScope save_scope;
    assert_int_equal(fh_pipeline_save_ex(p, path, FH_SAVE_REPLAY), FH_OK);
    const size_t save_peak = save_scope.peak();
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fclose(f);
    PeakScope load_scope;
    assert_int_equal(fh_pipeline_load(p, path), FH_OK);
    const size_t load_peak = load_scope.peak();
    printf("[MEMORY] a %.1f MB checkpoint with %.1f MB of replay rows: save peaked at %.2f MB, "
           "load at %.2f MB of extra memory\n", size / 1e6, image / 1e6, save_peak / 1e6,
           load_peak / 1e6);
    assert_true((uint64_t)size > image);
    assert_true(save_peak >= image && save_peak < image + (1u << 20));
    assert_true(load_peak >= (size_t)size - (1u << 20) && load_peak < (size_t)size + (1u << 20));
    remove(path);
    fh_pipeline_destroy(p);
}

/* M2: loading a 4 GiB sparse file that starts with this config's header allocates nothing of
 * its size (before the fix: 4.1 GB and 37-50 s). */
void test_load_of_a_large_file_reads_its_header_only(void **) {
    const fh_config c = fh_test_small_config();
    fh_pipeline *p = make(c);
    const std::string good = fh_test_tmp_path("memory_good.ckpt");
    const std::string big = fh_test_tmp_path("memory_big.ckpt");
    assert_int_equal(fh_pipeline_save(p, good.c_str()), FH_OK);
    FILE *f = fopen(good.c_str(), "rb");
    char head[512];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    f = fopen(big.c_str(), "wb");
    fwrite(head, 1, sizeof head, f);
    fclose(f);
    assert_int_equal(truncate(big.c_str(), (off_t)4 << 30), 0);
    PeakScope scope;
    assert_int_equal(fh_pipeline_load(p, big.c_str()), FH_ERR_CHECKPOINT_CORRUPT);
    assert_true(scope.peak() < (64u << 10));
    remove(big.c_str());
    remove(good.c_str());
    fh_pipeline_destroy(p);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_matches_what_a_pipeline_holds),
        cmocka_unit_test(test_cuda_plan_categories),
        cmocka_unit_test(test_creation_refused_before_allocating),
        cmocka_unit_test(test_failed_first_step_frees_its_memory),
        cmocka_unit_test(test_save_memory_does_not_grow_with_the_checkpoint),
        cmocka_unit_test(test_checkpoint_with_replay_holds_it_once),
        cmocka_unit_test(test_load_of_a_large_file_reads_its_header_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
