/* upload() and step() of the CUDA backend never synchronise the host with the GPU.
 *
 * How this is shown: CUPTI calls back on every CUDA runtime and driver API call of this process;
 * while the test is inside fh_pipeline_upload() or fh_pipeline_step() every call that blocks the
 * host (a synchronize of any kind, a memcpy or memset that is not Async, an allocation or free)
 * is counted. One made inside the executor's back_pressure_wait() (cuda/sync_points.hpp: the
 * host more than two uploads ahead of the GPU waits for a staging slot) counts as back-pressure,
 * any other as a host synchronisation. Nothing is timed, so a loaded GPU (ctest -j with other
 * GPU tests) cannot make it flake:
 * 1. Free-running, 10 x (upload + step) back to back: zero synchronisations; back-pressure
 *    waits are reported, not asserted (they depend on how fast the GPU is).
 * 2. Paced (the GPU given time: metrics(), which waits, before each upload, outside the
 *    counted calls): zero synchronisations and zero back-pressure waits.
 * 3. A planted sync (fh_cuda_debug_plant_sync: one cudaStreamSynchronize in step(), then in
 *    upload()) is caught every time: the test would catch a real one.
 * 4. The overlapped uploads did not disturb the steps in flight: the result is bitwise equal to
 *    a pipeline that waits after every step.
 * Skipped without a CUDA device, or when CUPTI cannot subscribe (e.g. under compute-sanitizer,
 * which holds the callback API itself). */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <atomic>
#include <mutex>
#include <string>

#include "test_cuda_util.h"

#ifdef FOXHUNT_HAVE_CUPTI
#include <cupti.h>
#endif

extern "C" int fh_cuda_debug_in_back_pressure(void) __attribute__((weak));
extern "C" void fh_cuda_debug_plant_sync(int where) __attribute__((weak));

using namespace fhtest;

namespace {

std::atomic<int> g_counting{0};
std::atomic<uint64_t> g_syncs{0}, g_back_pressure{0};
std::mutex g_mu;
std::string g_first_sync;  // name of the first synchronising call counted

bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Whether a CUDA runtime or driver function blocks the host. By name, so every API version
 * (_v2, _ptds, ...) is covered. */
bool blocking(const char *f) {
    if (strstr(f, "Synchronize")) return true;              // device, stream, event, context
    if (strstr(f, "Async")) return false;                   // stream-ordered copies and allocs
    if (starts(f, "cudaMemcpy") || starts(f, "cuMemcpy")) return true;
    if (starts(f, "cudaMemset") || starts(f, "cuMemset")) return true;
    if (starts(f, "cudaMalloc") || starts(f, "cudaFree") || starts(f, "cudaHostAlloc") ||
        starts(f, "cuMemAlloc") || starts(f, "cuMemFree") || starts(f, "cuMemHostAlloc"))
        return true;
    return false;
}

#ifdef FOXHUNT_HAVE_CUPTI
void CUPTIAPI on_api(void *, CUpti_CallbackDomain, CUpti_CallbackId, const void *data) {
    const CUpti_CallbackData *d = static_cast<const CUpti_CallbackData *>(data);
    if (d->callbackSite != CUPTI_API_ENTER || !g_counting.load() || !d->functionName) return;
    if (!blocking(d->functionName)) return;
    if (fh_cuda_debug_in_back_pressure && fh_cuda_debug_in_back_pressure()) {
        g_back_pressure.fetch_add(1);
        return;
    }
    if (g_syncs.fetch_add(1) == 0) {
        std::lock_guard<std::mutex> lk(g_mu);
        g_first_sync = d->functionName;
    }
}

CUpti_SubscriberHandle g_sub = nullptr;

bool subscribe() {
    if (g_sub) return true;
    if (cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)on_api, nullptr) != CUPTI_SUCCESS) {
        g_sub = nullptr;
        return false;
    }
    return cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS &&
           cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS;
}
#else
bool subscribe() { return false; }
#endif

void sync(fh_pipeline *p) {
    fh_metrics m;
    m.struct_size = sizeof m;
    assert_int_equal(fh_pipeline_metrics(p, &m), FH_OK);
}

struct Counts {
    uint64_t syncs, back_pressure;
    std::string first;
};

/* n x (upload + step), counting only inside those calls; paced: wait for the GPU before each
 * upload (outside the count). */
Counts run(fh_pipeline *p, Batches &bt, int n, bool paced) {
    g_syncs = 0;
    g_back_pressure = 0;
    g_first_sync.clear();
    for (int k = 0; k < n; ++k) {
        if (paced) sync(p);
        g_counting = 1;
        const fh_status u = fh_pipeline_upload(p, &bt.b[(size_t)(k + 1) % bt.b.size()].batch);
        const fh_status s = fh_pipeline_step(p);
        g_counting = 0;
        if (u != FH_OK || s != FH_OK) fail_msg("upload/step: %s", fh_last_error_message());
    }
    std::lock_guard<std::mutex> lk(g_mu);
    return Counts{g_syncs.load(), g_back_pressure.load(), g_first_sync};
}

void test_upload_and_step_never_synchronise(void **) {
    if (!fh_test_have_cuda()) skip();
    if (!subscribe()) {
        printf("[NOSYNC] CUPTI cannot subscribe here (another tool holds it): skipped\n");
        skip();
    }
    assert_non_null(fh_cuda_debug_plant_sync);
    const fh_config base = default_config(16384);
    const fh_config c = cuda_config(base, FH_MATH_TF32);
    Batches bt(base, 40, 3);
    fh_pipeline *p = make(c);
    step(p, bt.b[0]);  // warm up
    sync(p);
    const int n = 10;

    const Counts free_run = run(p, bt, n, false);
    printf("[NOSYNC] free-running %d x (upload + step): %llu host synchronisations%s%s, %llu "
           "back-pressure waits\n", n, (unsigned long long)free_run.syncs,
           free_run.syncs ? ", first: " : "", free_run.first.c_str(),
           (unsigned long long)free_run.back_pressure);
    assert_int_equal(free_run.syncs, 0);

    const Counts paced = run(p, bt, n, true);
    printf("[NOSYNC] paced %d x (upload + step): %llu host synchronisations, %llu back-pressure "
           "waits\n", n, (unsigned long long)paced.syncs, (unsigned long long)paced.back_pressure);
    assert_int_equal(paced.syncs, 0);
    assert_int_equal(paced.back_pressure, 0);

    for (int where = 2; where >= 1; --where) {  // PlantAt::STEP, then UPLOAD
        fh_cuda_debug_plant_sync(where);
        const Counts planted = run(p, bt, 3, false);
        fh_cuda_debug_plant_sync(0);
        printf("[NOSYNC] planted in %s: %llu host synchronisations caught (%s)\n",
               where == 2 ? "step()" : "upload()", (unsigned long long)planted.syncs,
               planted.first.c_str());
        if (planted.syncs < 3)
            fail_msg("a cudaStreamSynchronize planted in %s was not caught (does the executor "
                     "call fh::cuda::planted_sync there? docs/cuda.md)",
                     where == 2 ? "step()" : "upload()");
    }
    sync(p);

    /* The same sequence, waiting after every step: bitwise the same result. */
    fh_pipeline *r = make(c);
    step(r, bt.b[0]);
    sync(r);
    for (int count : {n, n, 3, 3})
        for (int k = 0; k < count; ++k) {
            step(r, bt.b[(size_t)(k + 1) % 3]);
            sync(r);
        }
    Diff d = compare(p, r);
    if (!d.bitwise) fail_msg("overlapped uploads changed the result (%s %.3e)", d.worst.c_str(),
                             d.max_rel);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(r);
}

/* Two uploads before a step: the step trains on the later one; a step without an upload trains
 * on the current batch again. */
void test_upload_semantics(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = cuda_config(fh_test_small_config(), FH_MATH_STRICT);
    Batches bt(c, 77, 2);
    fh_pipeline *p = make(c), *r = make(c);
    assert_int_equal(fh_pipeline_upload(p, &bt.b[0].batch), FH_OK);
    assert_int_equal(fh_pipeline_upload(p, &bt.b[1].batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    step(r, bt.b[1]);
    assert_int_equal(fh_pipeline_step(r), FH_OK);
    Diff d = compare(p, r);
    assert_true(d.bitwise);
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(r);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_and_step_never_synchronise),
        cmocka_unit_test(test_upload_semantics),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
