/* The fused IQN target pass (cuda/iqn_target.cu, TF32 mode):
 * 1. the kernel alone against a float64 evaluation of SPEC §4's Z̄(x̃', τ') from the same ψ̄,
 *    random target weights of a size that gives Z̄ structure, and τ' drawn on the host from
 *    Philox purpose 3 — every row, so a wrong τ, row or column mapping shows;
 * 2. whole steps against the unfused pass (FOXHUNT_IQN_KERNELS=unfused) and the CPU: IQN loss,
 *    parameters and the ensemble mean after 1 and 5 steps (TF32 products in both GPU paths, so
 *    they agree to TF32 rounding, not bitwise).
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/iqn_target.hpp"
#include "config.hpp"
#include "philox.hpp"
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cmath>
#include <cstdlib>
#include <random>

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

#if FOXHUNT_HAVE_CUDA
double silu(double z) { return z / (1.0 + std::exp(-z)); }

template <class T>
T *dev(const std::vector<T> &v) {
    T *p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)) != cudaSuccess) fail_msg("cudaMalloc");
    cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    return p;
}

void test_target_kernel_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const int Hq = 128, C = 64;
    for (int Nt : {8, 5}) {  /* 5: a transition's rows straddle the 16-row warp tiles */
        const int B = 777;   /* a last tile only partly filled */
        std::mt19937 rng(3 + Nt);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        auto vec = [&](size_t n, float sc) {
            std::vector<float> v(n);
            for (float &e : v) e = sc * nd(rng);
            return v;
        };
        const std::vector<float> psi = vec((size_t)B * Hq, 0.8f), Wphi = vec((size_t)Hq * C, 0.25f),
                                 bphi = vec(Hq, 0.3f), Wm = vec((size_t)Hq * Hq, 0.12f),
                                 bm = vec(Hq, 0.3f), wz = vec(Hq, 0.3f), bz = vec(1, 0.5f);
        const uint64_t seed = 12345, step = 7;
        std::vector<float> zt((size_t)B * Nt, NAN);
        float *d_psi = dev(psi), *d_Wphi = dev(Wphi), *d_bphi = dev(bphi), *d_Wm = dev(Wm),
              *d_bm = dev(bm), *d_wz = dev(wz), *d_bz = dev(bz), *d_zt = dev(zt);
        uint64_t *d_step = dev(std::vector<uint64_t>{step});
        fh::cuda::iqn::TargetArgs a{d_psi, d_Wphi, d_bphi, d_Wm, d_bm, d_wz, d_bz, seed, d_step,
                                    B, Nt, d_zt};
        try {
            fh::cuda::iqn::target_fused_prepare();
            fh::cuda::iqn::target_fused(a, fh::cuda::iqn::target_fused_blocks((size_t)B * Nt), 0);
        } catch (...) {
            fail_msg("target_fused threw");
        }
        if (cudaDeviceSynchronize() != cudaSuccess) fail_msg("kernel failed");
        cudaMemcpy(zt.data(), d_zt, zt.size() * 4, cudaMemcpyDeviceToHost);
        double num = 0, den = 0, worst = 0;
        for (int i = 0; i < B; ++i)
            for (int m = 0; m < Nt; ++m) {
                const double tau = fh::uniform24(fh::philox(seed, (uint32_t)i, (uint32_t)m,
                                                            (uint32_t)step, fh::PURPOSE_IQN_TARGET).w[0]);
                std::vector<double> mm(Hq);
                for (int j = 0; j < Hq; ++j) {
                    double s = bphi[j];
                    for (int k = 0; k < C; ++k)
                        s += std::cos(M_PI * k * tau) * Wphi[(size_t)j * C + k];
                    mm[j] = psi[(size_t)i * Hq + j] * silu(s);
                }
                double z = bz[0];
                for (int j = 0; j < Hq; ++j) {
                    double h = bm[j];
                    for (int k = 0; k < Hq; ++k) h += mm[k] * Wm[(size_t)j * Hq + k];
                    z += silu(h) * wz[j];
                }
                const double g = zt[(size_t)i * Nt + m];
                num += (g - z) * (g - z);
                den += z * z;
                worst = std::max(worst, std::fabs(g - z));
            }
        const double rel = std::sqrt(num / den);
        printf("[IQN] fused target kernel vs float64, B=%d N'=%d: rel. error %.3e, max |diff| "
               "%.3e (|Z| rms %.3f)\n", B, Nt, rel, worst, std::sqrt(den / ((double)B * Nt)));
        /* TF32 operands (2^-11) in two chained products of K = 64 and 128, fast SiLU: ~1e-3. */
        if (!(rel <= 5e-3)) fail_msg("fused target pass: rel. error %.3e (NaN = unwritten rows)", rel);
        for (void *p : {(void *)d_psi, (void *)d_Wphi, (void *)d_bphi, (void *)d_Wm, (void *)d_bm,
                        (void *)d_wz, (void *)d_bz, (void *)d_zt, (void *)d_step})
            cudaFree(p);
    }
}
#endif

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
        setenv("FOXHUNT_IQN_KERNELS", "unfused", 1);
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
    const struct CMUnitTest tests[] = {
#if FOXHUNT_HAVE_CUDA
        cmocka_unit_test(test_target_kernel_vs_float64),
#endif
        cmocka_unit_test(test_fused_target_agrees)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
