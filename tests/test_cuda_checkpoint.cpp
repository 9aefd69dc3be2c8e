/* Checkpoints across backends:
 * - saved on the GPU, loaded on the CPU: the CPU state equals the GPU's bitwise, and both then
 *   continue with the same steps to within the strict-FP32 bounds;
 * - saved on the GPU, loaded into a fresh GPU pipeline: it continues bit-for-bit like the
 *   original (the device step counter is set from the loaded step);
 * - saved on the CPU, loaded on the GPU: the same state, and one more step agrees to 1e-5.
 * Skipped without a CUDA device. */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

void save(fh_pipeline *p, const char *path) {
    if (fh_pipeline_save(p, path) != FH_OK) fail_msg("save: %s", fh_last_error_message());
}
void load(fh_pipeline *p, const char *path) {
    if (fh_pipeline_load(p, path) != FH_OK) fail_msg("load: %s", fh_last_error_message());
}

void test_gpu_to_cpu_and_gpu(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config cc = fh_test_small_config();
    const fh_config gc = cuda_config(cc, FH_MATH_STRICT);
    Batches bt(cc, 500, 8);
    fh_pipeline *g = make(gc);
    for (int k = 0; k < 5; ++k) step(g, bt.b[(size_t)k]);
    const std::string path = fh_test_tmp_path("cuda_gpu.ckpt");
    save(g, path.c_str());

    fh_pipeline *c = make(cc);
    load(c, path.c_str());
    Diff d0 = compare(c, g, false);
    assert_true(d0.bitwise);

    fh_pipeline *g2 = make(gc);
    load(g2, path.c_str());
    for (int k = 5; k < 8; ++k) {
        step(g, bt.b[(size_t)k]);
        step(c, bt.b[(size_t)k]);
        step(g2, bt.b[(size_t)k]);
    }
    Diff dg = compare(g2, g);
    if (!dg.bitwise) fail_msg("GPU->GPU continuation not bitwise (%s)", dg.worst.c_str());
    Diff dc = compare(g, c);
    print_diff("GPU ckpt at 5 -> CPU, 3 more steps", dc);
    if (!(dc.max_rel <= 1e-3)) fail_msg("GPU->CPU continuation: %s %.3e", dc.worst.c_str(), dc.max_rel);
    fh_metrics m;
    m.struct_size = sizeof m;
    fh_pipeline_metrics(g2, &m);
    assert_int_equal(m.step, 8);
    fh_pipeline_destroy(g);
    fh_pipeline_destroy(g2);
    fh_pipeline_destroy(c);
}

void test_cpu_to_gpu(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config cc = fh_test_small_config();
    Batches bt(cc, 600, 4);
    fh_pipeline *c = make(cc);
    for (int k = 0; k < 3; ++k) step(c, bt.b[(size_t)k]);
    const std::string path = fh_test_tmp_path("cuda_cpu.ckpt");
    save(c, path.c_str());
    fh_pipeline *g = make(cuda_config(cc, FH_MATH_STRICT));
    load(g, path.c_str());
    Diff d0 = compare(g, c, false);
    assert_true(d0.bitwise);
    step(c, bt.b[3]);
    step(g, bt.b[3]);
    Diff d = compare(g, c);
    print_diff("CPU ckpt at 3 -> GPU, 1 more step", d);
    if (!(d.max_rel <= 1e-5)) fail_msg("CPU->GPU: %s %.3e", d.worst.c_str(), d.max_rel);
    fh_pipeline_destroy(g);
    fh_pipeline_destroy(c);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_to_cpu_and_gpu),
        cmocka_unit_test(test_cpu_to_gpu),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
