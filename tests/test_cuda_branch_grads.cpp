/* A branch's gradients below its head in one pass (branch_grads, cuda/td.cu) against float64:
 *   dpre = (dz U) ⊙ SiLU'(preg + c), dU = dzᵀ g, dc = Σ_i dpre, de = Σ_i dz.
 * Bounds (per element, from the kernel's arithmetic):
 * - dpre: dz U as a float32 fused multiply-add chain over A ≤ 8 terms (8 roundings of at most
 *   2^-24 of Σ_a |dz_a U_a| each) times SiLU' in float (its sigmoid from expf and a division,
 *   a few ulp, which do not vanish where SiLU' does): within 1e-6 · |SiLU'| · Σ_a |dz_a U_a| +
 *   1e-6 |dpre| + 1e-6 (1 + |z|) |dz U|, z = preg + c;
 * - dU and de: exact float products summed in double, rounded once to float: within 2^-24 of
 *   the value plus 1e-12 of Σ |terms|;
 * - dc: the sum of the kernel's float dpre in double: within the sum of dpre's bounds plus
 *   2^-24 of the value.
 * The TD loss's dz has one nonzero per row (the taken action); a dense dz is checked too. Shapes:
 * the default branch at B = 16384 with the branches side by side (ld = 4·128), a last partial
 * block, HB > 128 (two column rounds) with A = 5 (the kernel reading A at run time) and with
 * A = 8, HB = 64 with A = 3. A > 8 is refused with nothing enqueued. A second run must give the
 * same bits, and a run with FH_MATH_BF16's stores (dpre_bf16) each dpre rounded to bfloat16 and
 * the sums bitwise the same. Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/branch_grads.hpp"
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

#include "operand_round.hpp"
#include "test_cuda_util.h"

namespace {

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;
using cuda_test::dev_of;

template <class T>
T *ptr(const Dev &d) {
    return static_cast<T *>(d.p);
}

/* One call of branch_grads and a wait for it: whether it ran; a throw or a fault fails the test
 * (after the handler, not from inside it). */
bool run(const fh::cuda::BranchGradArgs &a) {
    bool ran = false;
    std::string err;
    try {
        ran = fh::cuda::branch_grads(a, nullptr);
    } catch (const fh::Error &e) {
        err = e.message;
    }
    if (!err.empty()) fail_msg("branch_grads threw: %s", err.c_str());
    cuda_test::cuda_ok(cudaDeviceSynchronize(), "branch_grads");
    return ran;
}

struct Case {
    int B, HB, A, ld;
    bool sparse;
};

double err(double got, double want, double bound) {
    const double e = std::fabs(got - want) / bound;
    return std::isfinite(e) ? e : 1e30;
}

void check_case(Case cs, unsigned seed) {
    const int B = cs.B, HB = cs.HB, A = cs.A, ld = cs.ld;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int> act(0, A - 1);
    std::vector<float> dz((size_t)B * A, 0.0f), g((size_t)B * HB), preg((size_t)B * HB),
        U((size_t)A * HB), c(HB);
    for (int i = 0; i < B; ++i) {
        if (cs.sparse)
            dz[(size_t)i * A + act(rng)] = 1e-4f * nd(rng);
        else
            for (int k = 0; k < A; ++k) dz[(size_t)i * A + k] = 1e-4f * nd(rng);
    }
    for (size_t k = 0; k < g.size(); ++k) {
        preg[k] = 2.0f * nd(rng);
        g[k] = std::fabs(nd(rng));
    }
    for (float &v : U) v = nd(rng) / std::sqrt((float)HB);
    for (float &v : c) v = 0.5f * nd(rng);
    const size_t np = fh::cuda::branch_grad_partials(B, HB, A);
    const Dev ddz = dev_of(dz), dg = dev_of(g), dp = dev_of(preg), dU_w = dev_of(U),
              dc_w = dev_of(c);
    const Dev dpre = dev_of(std::vector<float>((size_t)B * ld, NAN));
    const Dev dU = dev_of(std::vector<float>((size_t)A * HB, NAN));
    const Dev dcb = dev_of(std::vector<float>(HB, NAN)), de = dev_of(std::vector<float>(A, NAN));
    const Dev part = dev_of(std::vector<double>(np, NAN));
    const fh::cuda::BranchGradArgs a{ptr<float>(ddz), ptr<float>(dg),  ptr<float>(dp),
                                     ptr<float>(dU_w), ptr<float>(dc_w), B, HB, A, ld,
                                     ptr<float>(dpre), ptr<double>(part), ptr<float>(dU),
                                     ptr<float>(dcb), ptr<float>(de)};
    if (!run(a)) fail_msg("branch_grads refused A=%d", A);
    fh::cuda::BranchGradArgs bad = a;
    bad.A = 9;
    if (run(bad)) fail_msg("branch_grads took A = 9");
    const std::vector<float> hp = dpre.get<float>(), hU = dU.get<float>(), hc = dcb.get<float>(),
                             he = de.get<float>();
    /* A second run gives the same bits (fixed-order sums, no atomics); bytes, not ==: dpre's
     * columns past HB hold NaN, which equals nothing. */
    run(a);
    const auto bits = [](const std::vector<float> &x, const std::vector<float> &y) {
        return x.size() == y.size() && memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    const bool same = bits(dpre.get<float>(), hp) && bits(dU.get<float>(), hU) &&
                      bits(dcb.get<float>(), hc) && bits(de.get<float>(), he);
    /* FH_MATH_BF16's stores: dpre each the bfloat16 rounding (nearest even) of this run's,
     * dU, dc and de bitwise this run's (the sums read the unrounded values). */
    fh::cuda::BranchGradArgs r16 = a;
    r16.dpre_bf16 = true;
    run(r16);
    const std::vector<float> hp16 = dpre.get<float>();
    size_t bf16_bad = 0;
    for (int i = 0; i < B; ++i)
        for (int j = 0; j < ld; ++j) {
            const size_t at = (size_t)i * ld + j;
            const float want = j < HB ? operand_round::bf16_rne(hp[at]) : NAN;
            bf16_bad += memcmp(&hp16[at], &want, sizeof(float)) != 0 &&
                        !(std::isnan(want) && std::isnan(hp16[at]));
        }
    const bool same16 = bits(dU.get<float>(), hU) && bits(dcb.get<float>(), hc) &&
                        bits(de.get<float>(), he);
    printf("[BRANCH-GRADS] B=%d HB=%d A=%d bfloat16 stores: dpre %zu entries not the rounding of "
           "the float32 run's; dU, dc, de %s\n", B, HB, A, bf16_bad,
           same16 ? "bitwise equal" : "DIFFER");
    if (bf16_bad || !same16)
        fail_msg("branch_grads B=%d HB=%d A=%d with bfloat16 stores", B, HB, A);
    double w_pre = 0, w_U = 0, w_c = 0, w_e = 0;
    bool untouched = true;
    std::vector<double> cref(HB, 0.0), cbound(HB, 0.0);
    for (int i = 0; i < B; ++i)
        for (int j = 0; j < ld; ++j) {
            const float got = hp[(size_t)i * ld + j];
            if (j >= HB) {
                untouched &= std::isnan(got);
                continue;
            }
            double dgr = 0.0, mag = 0.0;
            for (int k = 0; k < A; ++k) {
                const double t = (double)dz[(size_t)i * A + k] * U[(size_t)k * HB + j];
                dgr += t;
                mag += std::fabs(t);
            }
            const double z = (double)preg[(size_t)i * HB + j] + c[j];
            const double s = 1.0 / (1.0 + std::exp(-z)), ds = s * (1.0 + z * (1.0 - s));
            /* + 1e-6 (1 + |z|) |dz U|: SiLU' in float is off by a few ulp of its terms, which
             * does not vanish where SiLU' does (z ≈ −2.4). */
            const double v = dgr * ds;
            const double vb = 1e-6 * std::fabs(ds) * mag + 1e-6 * std::fabs(v) +
                              1e-6 * (1.0 + std::fabs(z)) * std::fabs(dgr) + 1e-30;
            w_pre = std::max(w_pre, err(got, v, vb));
            cref[j] += v;
            cbound[j] += vb;
        }
    for (int k = 0; k < A; ++k) {
        double e = 0.0, emag = 0.0;
        for (int i = 0; i < B; ++i) {
            e += dz[(size_t)i * A + k];
            emag += std::fabs(dz[(size_t)i * A + k]);
        }
        w_e = std::max(w_e, err(he[k], e, std::ldexp(std::fabs(e), -24) + 1e-12 * emag + 1e-30));
        for (int j = 0; j < HB; ++j) {
            double u = 0.0, umag = 0.0;
            for (int i = 0; i < B; ++i) {
                const double t = (double)dz[(size_t)i * A + k] * g[(size_t)i * HB + j];
                u += t;
                umag += std::fabs(t);
            }
            w_U = std::max(w_U, err(hU[(size_t)k * HB + j], u,
                                    std::ldexp(std::fabs(u), -24) + 1e-12 * umag + 1e-30));
        }
    }
    for (int j = 0; j < HB; ++j)
        w_c = std::max(w_c, err(hc[j], cref[j], cbound[j] + std::ldexp(std::fabs(cref[j]), -24)));
    printf("[BRANCH-GRADS] B=%d HB=%d A=%d ld=%d dz %s: worst of the bound dpre %.3f dU %.3f "
           "dc %.3f de %.3f%s%s\n",
           B, HB, A, ld, cs.sparse ? "one-hot" : "dense", w_pre, w_U, w_c, w_e,
           untouched ? "" : ", columns past HB written", same ? ", rerun bitwise equal" : "");
    if (!(w_pre <= 1.0 && w_U <= 1.0 && w_c <= 1.0 && w_e <= 1.0 && untouched && same))
        fail_msg("branch_grads B=%d HB=%d A=%d: worst dpre %.3f dU %.3f dc %.3f de %.3f%s%s", B,
                 HB, A, w_pre, w_U, w_c, w_e, untouched ? "" : ", columns past HB written",
                 same ? "" : ", a second run differs");
}

void test_branch_grads_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const Case cases[] = {{16384, 128, 8, 512, true},
                          {1000, 128, 8, 128, false},
                          {77, 200, 5, 200, true},
                          {333, 200, 8, 256, false},
                          {300, 64, 3, 64, false}};
    unsigned seed = 3;
    for (const Case &cs : cases) check_case(cs, seed++);
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_branch_grads_vs_float64)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
