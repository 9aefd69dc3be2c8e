/* The fused SiLU layer (cuda/linear_silu.cu): pre = x Wᵀ + b, act = SiLU(pre) in one TF32
 * tensor-core kernel.
 * - pre against float64 sums of the TF32-rounded operands (round to nearest, ties away, as
 *   cvt.rna does), per element over Σ_k |x_k W_k| + |b|, on the step's shapes and on edge
 *   shapes: rows and columns that are not whole tiles, K not a multiple of the 32-wide k-step,
 *   an odd N, a handful of rows; and against the unrounded operands, which it must miss by the
 *   rounding (so the operands really are TF32);
 * - act against SiLU(pre) in float64 (the fused kernel's fast exponential and division: within
 *   2e-6, relative above 1 and absolute below);
 * - pre = null and pre = act (in place) write the same act, bit for bit; two runs are bitwise
 *   equal;
 * - FOXHUNT_LINEAR=cublas, strict FP32 and unaligned K take cuBLAS + bias_silu instead, which
 *   agrees within TF32's error (strict: within float32's of the unrounded sums); an unknown
 *   FOXHUNT_LINEAR value is FH_ERR_BAD_VALUE.
 * Skipped without a CUDA device. */
/* The library's internal headers come before cmocka.h, whose fail() macro clashes with
 * fh::fail. */
#if FOXHUNT_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../cuda/linear_silu.hpp"
#include "error.hpp"
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"
#if FOXHUNT_HAVE_CUDA
#include "cuda_dev.hpp"
#endif

namespace {

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;
using cuda_test::dev_of;

/* float -> TF32 -> float: round to nearest, ties away from zero (finite values). */
float tf32_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x1000u) & 0xFFFFE000u;
    memcpy(&f, &u, 4);
    return f;
}

double silu64(double z) { return z / (1.0 + std::exp(-z)); }

struct Layer {
    int M, N, K;
    std::vector<float> x, w, b;
    Layer(int m, int n, int k, unsigned seed) : M(m), N(n), K(k), x((size_t)m * k), w((size_t)n * k), b(n) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float &v : x) v = u(rng);
        const float s = 1.0f / std::sqrt((float)k);
        for (float &v : w) v = s * u(rng);
        for (float &v : b) v = 0.5f * u(rng);
    }
};

struct Out {
    std::vector<float> pre, act;
};

struct Blas {
    cublasHandle_t h = nullptr;
    Blas() {
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail_msg("cublasCreate");
    }
    ~Blas() { cublasDestroy(h); }
};

/* pre: its own buffer (Pre::Own), null, or act's buffer (in place, as the forward-only passes). */
enum class Pre { Own, Null, InPlace };

Out run(const Layer &L, cublasComputeType_t compute, Pre mode = Pre::Own) {
    const bool with_pre = mode == Pre::Own;
    Blas bl;
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32)
        cublasSetMathMode(bl.h, CUBLAS_TF32_TENSOR_OP_MATH);
    const Dev dx = dev_of(L.x), dw = dev_of(L.w), db = dev_of(L.b);
    const size_t n = (size_t)L.M * L.N * sizeof(float);
    const Dev dpre(n), dact(n);
    try {
        fh::cuda::linear_silu(fh::cuda::Blas{bl.h, compute, nullptr}, L.M, L.N, L.K,
                              (const float *)dx.p, (const float *)dw.p, (const float *)db.p,
                              with_pre ? (float *)dpre.p
                                       : mode == Pre::InPlace ? (float *)dact.p : nullptr,
                              (float *)dact.p, "test layer");
    } catch (const fh::Error &e) {
        fail_msg("linear_silu: %s", e.message.c_str());
    }
    cuda_test::cuda_ok(cudaDeviceSynchronize(), "linear_silu");
    Out o;
    if (with_pre) o.pre = dpre.get<float>();
    o.act = dact.get<float>();
    return o;
}

struct Err {
    double rounded = 0, exact = 0, act = 0;
};

/* Worst errors of pre against the float64 sums of the rounded (`round`) and of the unrounded
 * operands, per element over Σ|x w| + |b|; act against SiLU(pre) in float64 (relative, with
 * magnitudes below 1 counted as 1). */
Err errors(const Layer &L, const Out &o, bool round) {
    Err e;
    for (int i = 0; i < L.M; ++i)
        for (int j = 0; j < L.N; ++j) {
            double sr = L.b[j], se = L.b[j], mag = std::fabs((double)L.b[j]);
            for (int k = 0; k < L.K; ++k) {
                const float a = L.x[(size_t)i * L.K + k], w = L.w[(size_t)j * L.K + k];
                sr += round ? (double)tf32_round(a) * tf32_round(w) : (double)a * w;
                se += (double)a * w;
                mag += std::fabs((double)a * w);
            }
            const size_t at = (size_t)i * L.N + j;
            const double p = o.pre[at];
            e.rounded = std::max(e.rounded, std::fabs(p - sr) / mag);
            e.exact = std::max(e.exact, std::fabs(p - se) / mag);
            const double s = silu64(p);
            e.act = std::max(e.act, std::fabs(o.act[at] - s) / std::max(1.0, std::fabs(s)));
        }
    return e;
}

bool bitwise_equal(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && !memcmp(a.data(), b.data(), a.size() * sizeof(float));
}

void test_fused_against_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    unsetenv("FOXHUNT_LINEAR");
    struct Shape {
        const char *name;
        int M, N, K;
    } shapes[] = {
        {"trunk W2 (4096 x 256 x 256, whole tiles)", 4096, 256, 256},
        {"trunk W1 (5000 x 256 x 128, a partial row tile)", 5000, 256, 128},
        {"branch V (777 x 128 x 256)", 777, 128, 256},
        {"K not a multiple of 32 (300 x 100 x 36)", 300, 100, 36},
        {"odd N (65 x 129 x 60)", 65, 129, 60},
        {"3 rows, K = 4 (3 x 130 x 4)", 3, 130, 4},
    };
    unsigned seed = 11;
    for (const Shape &s : shapes) {
        const Layer L(s.M, s.N, s.K, seed++);
        {
            Blas bl;
            const Dev dx = dev_of(L.x), dw = dev_of(L.w);
            if (!fh::cuda::linear_silu_fused(fh::cuda::Blas{bl.h, CUBLAS_COMPUTE_32F_FAST_TF32, nullptr},
                                             L.K, (const float *)dx.p, (const float *)dw.p))
                fail_msg("%s: the fused kernel does not apply", s.name);
        }
        const Out o = run(L, CUBLAS_COMPUTE_32F_FAST_TF32);
        const Err e = errors(L, o, true);
        printf("[LINEAR] %-50s vs tf32 operands %.2e, vs float32 operands %.2e, act %.2e\n",
               s.name, e.rounded, e.exact, e.act);
        /* float32 sums of K ≤ 256 products: a few float32 roundings of the magnitude. */
        if (!(e.rounded <= 2e-6 * std::sqrt((double)s.K) + 1e-6))
            fail_msg("%s: %.3e from the TF32 reference", s.name, e.rounded);
        if (!(e.exact >= 5 * e.rounded && e.exact >= 1e-5))
            fail_msg("%s: %.3e from the float32 operands: not rounded to TF32?", s.name, e.exact);
        if (!(e.act <= 2e-6)) fail_msg("%s: act %.3e from SiLU(pre)", s.name, e.act);

        const Out again = run(L, CUBLAS_COMPUTE_32F_FAST_TF32);
        if (!bitwise_equal(o.pre, again.pre) || !bitwise_equal(o.act, again.act))
            fail_msg("%s: two runs differ", s.name);
        const Out act_only = run(L, CUBLAS_COMPUTE_32F_FAST_TF32, Pre::Null);
        if (!bitwise_equal(o.act, act_only.act))
            fail_msg("%s: act without pre differs from act with pre", s.name);
        const Out in_place = run(L, CUBLAS_COMPUTE_32F_FAST_TF32, Pre::InPlace);
        if (!bitwise_equal(o.act, in_place.act))
            fail_msg("%s: act computed in place (pre = act) differs", s.name);
    }
}

void test_cublas_paths(void **) {
    if (!fh_test_have_cuda()) skip();
    const Layer L(1000, 256, 128, 5);
    unsetenv("FOXHUNT_LINEAR");
    const Out fused = run(L, CUBLAS_COMPUTE_32F_FAST_TF32);

    /* The cuBLAS path in TF32 mode: a TF32 GEMM too (its own rounding and order). */
    setenv("FOXHUNT_LINEAR", "cublas", 1);
    {
        Blas bl;
        const Dev dx = dev_of(L.x), dw = dev_of(L.w);
        if (fh::cuda::linear_silu_fused(fh::cuda::Blas{bl.h, CUBLAS_COMPUTE_32F_FAST_TF32, nullptr},
                                        L.K, (const float *)dx.p, (const float *)dw.p))
            fail_msg("FOXHUNT_LINEAR=cublas still selects the fused kernel");
    }
    const Out cub = run(L, CUBLAS_COMPUTE_32F_FAST_TF32);
    const Out cub_act = run(L, CUBLAS_COMPUTE_32F_FAST_TF32, Pre::Null);
    const Out cub_in_place = run(L, CUBLAS_COMPUTE_32F_FAST_TF32, Pre::InPlace);
    unsetenv("FOXHUNT_LINEAR");
    double worst = 0;
    for (size_t i = 0; i < fused.pre.size(); ++i)
        worst = std::max(worst, (double)std::fabs(fused.pre[i] - cub.pre[i]));
    const Err ec = errors(L, cub, false);
    printf("[LINEAR] cuBLAS TF32 path: |fused - cublas| <= %.2e, cublas vs float32 operands %.2e, "
           "act %.2e\n", worst, ec.exact, ec.act);
    if (!(worst <= 5e-3)) fail_msg("fused and cuBLAS TF32 differ by %.3e", worst);
    if (!(ec.act <= 1e-6)) fail_msg("cuBLAS path: act %.3e from SiLU(pre)", ec.act);
    if (!bitwise_equal(cub.act, cub_act.act)) fail_msg("cuBLAS path: act without pre differs");
    if (!bitwise_equal(cub.act, cub_in_place.act)) fail_msg("cuBLAS path: act in place differs");

    /* Strict FP32 never takes the fused kernel: float32 sums of the unrounded operands. */
    const Out strict = run(L, CUBLAS_COMPUTE_32F);
    const Err es = errors(L, strict, false);
    printf("[LINEAR] strict FP32 path: vs float32 operands %.2e\n", es.exact);
    if (!(es.exact <= 1e-5)) fail_msg("strict: %.3e from the float64 sums", es.exact);

    /* K not a multiple of 4 (rows of x not 16-byte aligned): cuBLAS as well. */
    const Layer odd(200, 64, 30, 9);
    const Out o = run(odd, CUBLAS_COMPUTE_32F_FAST_TF32);
    const Err eo = errors(odd, o, false);
    printf("[LINEAR] K = 30 (cuBLAS path): vs float32 operands %.2e\n", eo.exact);
    if (!(eo.exact <= 2e-3)) fail_msg("K = 30: %.3e", eo.exact);
}

void test_unknown_selector_is_refused(void **) {
    if (!fh_test_have_cuda()) skip();
    setenv("FOXHUNT_LINEAR", "wgmma", 1);
    Blas bl;
    bool refused = false;
    try {
        fh::cuda::linear_silu_fused(fh::cuda::Blas{bl.h, CUBLAS_COMPUTE_32F_FAST_TF32, nullptr}, 128,
                                    nullptr, nullptr);
    } catch (const fh::Error &e) {
        refused = e.status == FH_ERR_BAD_VALUE &&
                  e.message.find("FOXHUNT_LINEAR") != std::string::npos;
    }
    unsetenv("FOXHUNT_LINEAR");
    if (!refused) fail_msg("FOXHUNT_LINEAR=wgmma was not refused with FH_ERR_BAD_VALUE");
}
#else
void test_fused_against_float64(void **) { skip(); }
void test_cublas_paths(void **) { skip(); }
void test_unknown_selector_is_refused(void **) { skip(); }
#endif

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_against_float64),
        cmocka_unit_test(test_cublas_paths),
        cmocka_unit_test(test_unknown_selector_is_refused),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
