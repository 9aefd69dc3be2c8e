/* The fused IQN target pass (cuda/iqn_target.cu, TF32 mode) against the unfused one
 * (FOXHUNT_IQN_KERNELS=legacy) and against the CPU: the same batches, steps, and the IQN loss,
 * the IQN parameters and the ensemble mean (which holds mean_n Z) compared after 1 and 5 steps.
 * Both GPU paths use TF32 products, so they agree to TF32 rounding, not bitwise. Skipped
 * without a GPU. */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cstdlib>

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

double iqn_err(fh_pipeline *a, fh_pipeline *b, std::string &worst) {
    double mx = 0;
    for (const char *name : {"iqn.Wpsi", "iqn.bpsi", "iqn.Wphi", "iqn.bphi", "iqn.Wm", "iqn.bm",
                             "iqn.w_z", "iqn.b_z", "ensemble_mean"}) {
        fh_tensor_info info;
        info.struct_size = sizeof info;
        if (fh_pipeline_find_tensor(a, name, &info) != FH_OK) fail_msg("no tensor %s", name);
        const size_t n = (size_t)info.rows * info.cols;
        std::vector<float> x = read(a, name, n), y = read(b, name, n);
        const double e = fh_test_rel_err(x.data(), y.data(), n);
        if (!(e <= mx)) {
            mx = e;
            worst = name;
        }
    }
    return mx;
}

void test_fused_target_agrees(void **) {
    if (!fh_test_have_cuda()) skip();
    for (uint32_t B : {1000u, 4096u}) {  /* 1000: a last tile of rows only partly filled */
        const fh_config base = default_config(B);
        fh_config cc = base;
        cc.backend = FH_BACKEND_CPU;
        fh_pipeline *cpu = make(cc);
        setenv("FOXHUNT_IQN_KERNELS", "legacy", 1);
        fh_pipeline *old = make(cuda_config(base, FH_MATH_TF32));
        unsetenv("FOXHUNT_IQN_KERNELS");
        fh_pipeline *fused = make(cuda_config(base, FH_MATH_TF32));
        Batches bt(base, 77, 5);
        for (int k = 0; k < 5; ++k) {
            for (fh_pipeline *p : {cpu, old, fused}) step(p, bt.b[(size_t)k]);
            if (k != 0 && k != 4) continue;
            fh_metrics mc, mo, mf;
            mc.struct_size = mo.struct_size = mf.struct_size = sizeof(fh_metrics);
            fh_pipeline_metrics(cpu, &mc);
            fh_pipeline_metrics(old, &mo);
            fh_pipeline_metrics(fused, &mf);
            std::string w1, w2;
            const double e_old = iqn_err(fused, old, w1), e_cpu = iqn_err(fused, cpu, w2);
            const double l_old = std::fabs(mf.iqn_loss - mo.iqn_loss) / std::fabs(mo.iqn_loss);
            const double l_cpu = std::fabs(mf.iqn_loss - mc.iqn_loss) / std::fabs(mc.iqn_loss);
            printf("[IQN] B=%u after %d step%s: fused vs unfused %.3e (%s), loss %.3e; "
                   "fused vs CPU %.3e (%s), loss %.3e\n",
                   B, k + 1, k ? "s" : "", e_old, w1.c_str(), l_old, e_cpu, w2.c_str(), l_cpu);
            /* TF32 products (2^-11 operand rounding) in both paths: the test_cuda_vs_cpu bound. */
            if (!(e_old <= 5e-2 && e_cpu <= 5e-2 && l_old <= 5e-2 && l_cpu <= 5e-2))
                fail_msg("fused IQN target pass: B=%u step %d: %.3e (%s) / %.3e (%s), loss %.3e / %.3e",
                         B, k + 1, e_old, w1.c_str(), e_cpu, w2.c_str(), l_old, l_cpu);
        }
        fh_pipeline_destroy(cpu);
        fh_pipeline_destroy(old);
        fh_pipeline_destroy(fused);
    }
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_target_agrees)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
