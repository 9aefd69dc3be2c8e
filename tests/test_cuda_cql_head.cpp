/* CQL's part of the branch heads' gradients in one pass (cql_head_sums, cuda/cql.cu) against
 * float64, for NB branches at once: dU_b = dzc_bᵀ g_b [A, HB], de_b = Σ_i dzc_b [A].
 * Bound per element (from the kernel's arithmetic): exact float products summed in double,
 * rounded once to float: within 2^-24 of the value plus 1e-12 of Σ |terms|.
 * dzc is dense, as CQL's is (softmax − one-hot, times ω·alpha/(B·NB), 0 outside the clamp).
 * Shapes: the default config (B = 16384, A = 8, HB = 128, NB = 4: 128 blocks a branch, each two
 * chunks of 64 rows), B = 8320 (130 chunks: blocks 0 and 1 take a third), a last partial chunk
 * (B = 1000), HB > 128 (two column rounds) with A = 5 (A read at run time), A = 3 with HB = 64,
 * B = 1. Outputs and partial rows start as NaN, so an unwritten one shows. A second run gives
 * the same bits; A = 9 is refused (FH_ERR_INTERNAL) with nothing written, and an unknown
 * FOXHUNT_CQL_GRADS at pipeline creation (FH_ERR_BAD_VALUE). The whole step under the trial is
 * checked by test_cuda_vs_cpu, test_cuda_determinism and test_cuda_memory_plan run with
 * FOXHUNT_CQL_GRADS=pass. Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/cql_head.hpp"
#include "cql_paths.hpp"
#include "error.hpp"
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}
#if FOXHUNT_HAVE_CUDA
#include "cuda_dev.hpp"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_cuda_util.h"

namespace {

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;
using fhtest::cuda_config;
using fhtest::default_config;
using cuda_test::dev_of;

struct Case {
    int B, A, HB, NB;
};

struct Bufs {
    Dev dzc, g, part, dU, de;
};

/* One call and a wait for it: the error code it threw (FH_OK when none). */
fh_status run(const Bufs &b, const Case &c) {
    fh_status st = FH_OK;
    try {
        fh::cuda::cql_head_sums(static_cast<const float *>(b.dzc.p),
                                static_cast<const float *>(b.g.p), c.B, c.A, c.HB, c.NB,
                                static_cast<double *>(b.part.p), static_cast<float *>(b.dU.p),
                                static_cast<float *>(b.de.p), nullptr);
    } catch (const fh::Error &e) {
        st = e.status;
    }
    cuda_test::cuda_ok(cudaDeviceSynchronize(), "cql_head_sums");
    return st;
}

double err(double got, double want, double bound) {
    const double e = std::fabs(got - want) / bound;
    return std::isfinite(e) ? e : 1e30;
}

bool same_bits(const std::vector<float> &x, const std::vector<float> &y) {
    return x.size() == y.size() && memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

void check_case(Case cs, unsigned seed) {
    const int B = cs.B, A = cs.A, HB = cs.HB, NB = cs.NB;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> dzc((size_t)NB * B * A), g((size_t)NB * B * HB);
    for (float &v : dzc) v = 1e-5f * nd(rng);
    for (float &v : g) v = std::fabs(nd(rng));
    const size_t np = (size_t)NB * fh::cql_head_blocks((uint32_t)B) * ((size_t)A * HB + A);
    Bufs b{dev_of(dzc), dev_of(g), dev_of(std::vector<double>(np, NAN)),
           dev_of(std::vector<float>((size_t)NB * A * HB, NAN)),
           dev_of(std::vector<float>((size_t)NB * A, NAN))};
    const fh_status st = run(b, cs);
    if (st != FH_OK) fail_msg("cql_head_sums B=%d A=%d HB=%d NB=%d: status %d", B, A, HB, NB, st);
    const std::vector<float> hU = b.dU.get<float>(), he = b.de.get<float>();
    run(b, cs);
    const bool same = same_bits(b.dU.get<float>(), hU) && same_bits(b.de.get<float>(), he);
    double wU = 0, we = 0;
    for (int z = 0; z < NB; ++z) {
        const float *dz = dzc.data() + (size_t)z * B * A, *gz = g.data() + (size_t)z * B * HB;
        for (int k = 0; k < A; ++k) {
            double e = 0.0, emag = 0.0;
            for (int i = 0; i < B; ++i) {
                e += dz[(size_t)i * A + k];
                emag += std::fabs(dz[(size_t)i * A + k]);
            }
            we = std::max(we, err(he[(size_t)z * A + k], e,
                                  std::ldexp(std::fabs(e), -24) + 1e-12 * emag + 1e-30));
            for (int j = 0; j < HB; ++j) {
                double u = 0.0, umag = 0.0;
                for (int i = 0; i < B; ++i) {
                    const double t = (double)dz[(size_t)i * A + k] * gz[(size_t)i * HB + j];
                    u += t;
                    umag += std::fabs(t);
                }
                wU = std::max(wU, err(hU[((size_t)z * A + k) * HB + j], u,
                                      std::ldexp(std::fabs(u), -24) + 1e-12 * umag + 1e-30));
            }
        }
    }
    printf("[CQL-HEAD] B=%d A=%d HB=%d NB=%d: worst of the bound dU %.3f de %.3f%s\n", B, A, HB,
           NB, wU, we, same ? ", rerun bitwise equal" : ", a rerun DIFFERS");
    if (!(wU <= 1.0 && we <= 1.0 && same))
        fail_msg("cql_head_sums B=%d A=%d HB=%d NB=%d: worst dU %.3f de %.3f%s", B, A, HB, NB, wU,
                 we, same ? "" : ", a second run differs");
}

void test_cql_head_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const Case cases[] = {{16384, 8, 128, 4}, {8320, 8, 128, 2}, {1000, 8, 128, 3},
                          {333, 5, 200, 2},   {300, 3, 64, 1},   {1, 8, 128, 4}};
    unsigned seed = 11;
    for (const Case &cs : cases) check_case(cs, seed++);
}

/* A = 9 (past kCqlHeadMaxA) and A = 0 are refused before anything is enqueued: the outputs keep
 * their NaN. */
void test_cql_head_refuses(void **) {
    if (!fh_test_have_cuda()) skip();
    for (int A : {9, 0}) {
        const Case cs{64, A, 16, 1};
        const size_t a = (size_t)std::max(A, 1);
        Bufs b{dev_of(std::vector<float>(64 * a, 1.0f)), dev_of(std::vector<float>(64 * 16, 1.0f)),
               dev_of(std::vector<double>(64 * (16 * a + a), NAN)),
               dev_of(std::vector<float>(16 * a, NAN)), dev_of(std::vector<float>(a, NAN))};
        const fh_status st = run(b, cs);
        bool untouched = true;
        for (float v : b.dU.get<float>()) untouched &= std::isnan(v);
        for (float v : b.de.get<float>()) untouched &= std::isnan(v);
        printf("[CQL-HEAD] A=%d: status %d, outputs %s\n", A, st,
               untouched ? "untouched" : "WRITTEN");
        if (st != FH_ERR_INTERNAL || !untouched)
            fail_msg("cql_head_sums A=%d: status %d (want FH_ERR_INTERNAL), outputs %s", A, st,
                     untouched ? "untouched" : "written");
    }
}

/* The trial's switch: an unknown value is refused at creation, naming the variable. */
void test_bad_cql_env(void **) {
    if (!fh_test_have_cuda()) skip();
    setenv("FOXHUNT_CQL_GRADS", "bogus", 1);
    const fh_config c = cuda_config(default_config(256), FH_MATH_TF32);
    fh_pipeline *p = nullptr;
    const int rc = fh_pipeline_create(&c, &p);
    unsetenv("FOXHUNT_CQL_GRADS");
    assert_int_equal(rc, FH_ERR_BAD_VALUE);
    assert_null(p);
    assert_non_null(strstr(fh_last_error_message(), "FOXHUNT_CQL_GRADS"));
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cql_head_vs_float64),
                                       cmocka_unit_test(test_cql_head_refuses),
                                       cmocka_unit_test(test_bad_cql_env)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
