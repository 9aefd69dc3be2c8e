/* The data-parallel step (SPEC §9) on two GPUs of one process (ncclCommInitAll over devices 0
 * and 1; the pipelines are created from two threads, since creation is collective, then driven
 * alternately from this one, as a graph launch does not block). SPEC defaults, strict FP32,
 * B = 2048 rows per rank, a new batch of 2B rows every step (rank r gets rows r·B ..):
 * - after 1 step: each rank's parameters, targets, moments and state, and every metric, equal
 *   to one pipeline's step at B' = 2B on the whole batch within the strict contract (1e-5 per
 *   tensor and metric, as tests/test_cuda_vs_cpu.cpp; attn.bk, pure rounding noise, within
 *   2·lr per step), and each rank's per-row outputs (d_states, ensemble, confidence) equal to
 *   that pipeline's rows of the rank;
 * - the graph of each rank holds NCCL kernel nodes (its dot dump names them);
 * - after 20 steps both ranks hold bitwise-equal state and metrics, still within 1e-5 of the
 *   B' = 2B pipeline;
 * - no host synchronisation in the loop: 10 more steps of both ranks never block the host
 *   (fh_cuda_debug_back_pressure_waits stays 0) and return while the GPU still runs them;
 * - a communicator on another device than config.device is refused (FH_ERR_BAD_VALUE).
 * Exits 77 (skipped) with fewer than 2 GPUs or without NCCL. */
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#if FOXHUNT_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "backend.hpp"
#include "test_cuda_util.h"

using namespace fhtest;

namespace {

#if FOXHUNT_HAVE_NCCL
constexpr uint32_t kB = 2048;
constexpr int kSteps = 20;
constexpr double kTol = 1e-5;

void check(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) fail_msg("%s: %s", what, ncclGetErrorString(r));
}

void upload_step(fh_pipeline *p, const fh_batch &b) {
    if (fh_pipeline_upload(p, &b) != FH_OK) fail_msg("upload: %s", fh_last_error_message());
    if (fh_pipeline_step(p) != FH_OK) fail_msg("step: %s", fh_last_error_message());
}

// Rank r (r = 0, 1) against the one pipeline on 2B rows: its per-row outputs against the
// reference's rows of the rank, everything else whole; attn.bk (rounding noise) within 2·lr per
// step.
void check_rank(const Snapshot &rank, const Snapshot &ref, uint32_t r, const char *when,
                int steps, float lr) {
    Snapshot rows = ref;
    for (size_t i = 0; i < ref.tensors.size(); ++i)
        if (ref.groups[i] == FH_GROUP_OUTPUT) {
            const size_t n = rank.tensors[i].size();  // [B, k] of the reference's [2B, k]
            const float *from = ref.tensors[i].data() + r * n;
            rows.tensors[i].assign(from, from + n);
        }
    const Diff d = compare(rank, rows);
    char what[96];
    snprintf(what, sizeof what, "rank %u vs one pipeline at 2B, %s", r, when);
    print_diff(what, d);
    if (!(d.max_rel <= kTol)) fail_msg("%s: %s %.3e > %.0e", what, d.worst.c_str(), d.max_rel, kTol);
    assert_true(d.bk_abs <= 2.0 * lr * steps + 1e-6);
}

// Lines of the dot dump of p that name an NCCL kernel.
int nccl_nodes(fh_pipeline *p, const char *name) {
    const char *path = fh_test_tmp_path(name);
    if (fh_pipeline_dump_graph(p, path) != FH_OK) fail_msg("dump: %s", fh_last_error_message());
    std::ifstream in(path);
    std::string line;
    int n = 0;
    while (std::getline(in, line))
        if (line.find("ncclDevKernel") != std::string::npos ||
            line.find("ncclKernel") != std::string::npos)
            ++n;
    return n;
}

void test_two_ranks_equal_one_pipeline(void **) {
    const fh_config per_rank = cuda_config(default_config(kB), FH_MATH_STRICT);
    fh_config whole = per_rank;
    whole.batch_size = 2 * kB;
    Batches bt(whole, 51, kSteps);
    fh_batch half[kSteps][2];
    for (int k = 0; k < kSteps; ++k)
        for (uint32_t r = 0; r < 2; ++r)
            half[k][r] = fh_test_batch_rows(&bt.b[(size_t)k], &per_rank, r * kB);

    ncclComm_t comm[2] = {};
    int devs[2] = {0, 1};
    check(ncclCommInitAll(comm, 2, devs), "ncclCommInitAll");
    // Refused before any collective: rank 0's communicator lives on device 0, not 1.
    fh_config wrong = per_rank;
    wrong.device = 1;
    wrong.nccl_comm = comm[0];
    fh_pipeline *none = nullptr;
    assert_int_equal(fh_pipeline_create(&wrong, &none), FH_ERR_BAD_VALUE);
    assert_non_null(strstr(fh_last_error_message(), "device"));

    fh_pipeline *p[2] = {};
    fh_status st[2] = {FH_OK, FH_OK};
    std::string msg[2];
    std::thread t[2];
    for (int r = 0; r < 2; ++r)
        t[r] = std::thread([&, r] {
            fh_config c = per_rank;
            c.device = r;
            c.nccl_comm = comm[r];
            st[r] = fh_pipeline_create(&c, &p[r]);
            msg[r] = fh_last_error_message();  // thread-local
        });
    for (std::thread &x : t) x.join();
    for (int r = 0; r < 2; ++r)
        if (st[r] != FH_OK) fail_msg("rank %d create: %s", r, msg[r].c_str());

    fh_pipeline *one = make(whole);
    upload_step(one, bt.b[0].batch);
    for (int r = 0; r < 2; ++r) upload_step(p[r], half[0][r]);
    const Snapshot ref1 = snapshot(one);
    for (uint32_t r = 0; r < 2; ++r) check_rank(snapshot(p[r]), ref1, r, "1 step", 1, whole.lr_aux);
    for (int r = 0; r < 2; ++r) {
        const int n = nccl_nodes(p[r], r ? "nccl2_rank1.dot" : "nccl2_rank0.dot");
        printf("[NCCL2] rank %d: %d NCCL kernel nodes in the step graph\n", r, n);
        assert_true(n >= 4);
    }

    for (int k = 1; k < kSteps; ++k) {
        for (int r = 0; r < 2; ++r) upload_step(p[r], half[k][r]);
        upload_step(one, bt.b[(size_t)k].batch);
    }
    const Snapshot a = snapshot(p[0]), b = snapshot(p[1]), ref = snapshot(one);
    assert_bitwise(a, b, "rank 0 vs rank 1 after 20 steps", false);
    for (uint32_t r = 0; r < 2; ++r)
        check_rank(r ? b : a, ref, r, "20 steps", kSteps, whole.lr_aux);

    // No host synchronisation in the loop: 10 more steps of each rank, launched alternately,
    // never block, and the last one is still running when its launch returns. (Uploads are
    // left out: the upload's back-pressure, when the host runs two batches ahead of the GPU,
    // is by design, tests/test_cuda_nosync.cpp.)
    const uint64_t waits = fh_cuda_debug_back_pressure_waits();
    for (int k = 0; k < 10; ++k)
        for (int r = 0; r < 2; ++r)
            if (fh_pipeline_step(p[r]) != FH_OK) fail_msg("step: %s", fh_last_error_message());
    const int pending = fh_cuda_debug_step_pending();
    const uint64_t waited = fh_cuda_debug_back_pressure_waits() - waits;
    printf("[NCCL2] 10 more steps of both ranks: the host waited %llu times; the last step was "
           "%s when its launch returned\n", (unsigned long long)waited,
           pending == 1 ? "still running" : "done");
    assert_int_equal(waited, 0);
    assert_int_equal(pending, 1);

    fh_pipeline_destroy(one);
    for (fh_pipeline *x : p) fh_pipeline_destroy(x);  // before their communicators
    for (ncclComm_t c : comm) check(ncclCommDestroy(c), "ncclCommDestroy");
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_NCCL
    if (!fh::cuda_available(0) || !fh::cuda_available(1)) {
        printf("fewer than 2 usable CUDA devices: skipped\n");
        return FH_TEST_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_equal_one_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    printf("this build has no NCCL: skipped\n");
    return FH_TEST_SKIPPED;
#endif
}
