/* FH_MATH_BF16 learns as FH_MATH_TF32 does: the same pipelines, seeds and batches in both modes,
 * the losses compared as they fall. (The per-tensor error of BF16 against the CPU after 1 and 20
 * steps is test_cuda_vs_cpu's; bitwise reproducibility, test_cuda_determinism's.)
 * - the Q learner on test_learning.c's problem (gamma = 0, a reward that is a fixed function of
 *   an observation feature and the action): the TD loss falls below 20 % of its first value in
 *   both modes, and BF16 ends within 2x of TF32;
 * - the default widths at B = 2048, four batches in turn for 300 steps: each learner's loss
 *   (mean of the last 20 steps over the mean of the first 20) falls in BF16 wherever it falls by
 *   10 % or more in TF32, to within 0.1 of TF32's ratio.
 * - gemm_bf16 (cuda/gemm_bf16.cu) against float64 products of the bfloat16-rounded operands,
 *   on shapes that make it cut C into blocks of columns, k into blocks, and on a strided
 *   operand; and against the unrounded operands, which it must miss by the rounding;
 * - gemm_tn_bf16 (operands already bfloat16) against float64 products of the same values;
 * - gemm_bf16_values (float32 operands holding bfloat16 values, on TF32 tensor cores) against
 *   float64 and against gemm_bf16 on the same operands;
 * - its precondition in a whole BF16 step at the default config (B = 16384, where the fused
 *   layers run): HER's rounded x~ and CQL's rounded dzc (in the TD dz buffer) each bitwise the
 *   round to nearest even of their float32 source, and the forward child's branch activations g
 *   and the trunk's dpre1 bfloat16 values throughout (cuda/debug_hooks.h's
 *   fh_cuda_debug_bf16_operands); in TF32 there is no rounded x~.
 * Skipped without a CUDA device. */
/* The library's internal headers come before cmocka.h, whose fail() macro clashes with
 * fh::fail. */
#if FOXHUNT_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../cuda/gemm.hpp"
#include "error.hpp"
#include "schedule.hpp"
#endif

#include <cstring>
#include <random>
#include <vector>

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "operand_round.hpp"
#include "test_cuda_util.h"
#if FOXHUNT_HAVE_CUDA
#include "cuda_dev.hpp"
#endif

using namespace fhtest;

namespace {

constexpr int kLosses = 6;
const char *const kLossNames[kLosses] = {"td_loss", "iql_loss_hi", "iql_loss_lo",
                                         "iqn_loss", "attn_loss", "conf_loss"};

void losses_of(const fh_metrics &m, double *l) {
    const float v[kLosses] = {m.td_loss, m.iql_loss_hi, m.iql_loss_lo,
                              m.iqn_loss, m.attn_loss, m.conf_loss};
    for (int k = 0; k < kLosses; ++k) l[k] = v[k];
}

/* Means of each loss over the first and the last `window` of `steps` steps. */
void train(const fh_config &c, const Batches &bt, int steps, int window, double *first,
           double *last) {
    fh_pipeline *p = make(c);
    for (int k = 0; k < kLosses; ++k) first[k] = last[k] = 0;
    for (int s = 0; s < steps; ++s) {
        step(p, bt.b[(size_t)s % bt.b.size()]);
        double l[kLosses];
        losses_of(metrics_of(p), l);
        for (int k = 0; k < kLosses; ++k) {
            if (!std::isfinite(l[k])) fail_msg("step %d: %s = %g", s, kLossNames[k], l[k]);
            if (s < window) first[k] += l[k] / window;
            if (s >= steps - window) last[k] += l[k] / window;
        }
    }
    fh_pipeline_destroy(p);
}

void test_td_loss_falls_in_both_modes(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c = fh_test_small_config();
    c.gamma = 0.0f;
    c.goal_dim = 0;
    c.lr_q = 3e-3f;
    c.num_regimes = 1;
    Batches bt(c, 42, 1);
    fh_test_batch &tb = bt.b[0];
    for (uint32_t i = 0; i < c.batch_size; ++i)
        tb.reward[i] = tb.obs[i * c.obs_dim] * (tb.action[i * c.num_branches] == 0 ? 1.0f : -0.5f);
    double first[2][kLosses], last[2][kLosses];
    const int maths[2] = {FH_MATH_TF32, FH_MATH_BF16};
    for (int m = 0; m < 2; ++m) train(cuda_config(c, maths[m]), bt, 300, 1, first[m], last[m]);
    printf("[LEARNING] td_loss after 300 steps: tf32 %.4f -> %.4f, bf16 %.4f -> %.4f\n",
           first[0][0], last[0][0], first[1][0], last[1][0]);
    for (int m = 0; m < 2; ++m) assert_true(last[m][0] < 0.2 * first[m][0]);
    assert_true(last[1][0] <= 2.0 * last[0][0]);
}

void test_every_loss_falls_as_in_tf32(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = default_config(2048);
    Batches bt(c, 77, 4);
    const int steps = 300, window = 20;
    double first[2][kLosses], last[2][kLosses];
    const int maths[2] = {FH_MATH_TF32, FH_MATH_BF16};
    for (int m = 0; m < 2; ++m)
        train(cuda_config(c, maths[m]), bt, steps, window, first[m], last[m]);
    int learnt = 0;
    for (int k = 0; k < kLosses; ++k) {
        const double rt = last[0][k] / first[0][k], rb = last[1][k] / first[1][k];
        printf("[LEARNING] B=2048 %-12s tf32 %.5g -> %.5g (x%.3f)   bf16 %.5g -> %.5g (x%.3f)\n",
               kLossNames[k], first[0][k], last[0][k], rt, first[1][k], last[1][k], rb);
        if (rt <= 0.9) {
            ++learnt;
            if (!(rb <= rt + 0.1))
                fail_msg("%s: bf16 falls to x%.3f of its start, tf32 to x%.3f", kLossNames[k], rb,
                         rt);
        }
    }
    /* The comparison means something only if TF32 learns: the TD loss at least. */
    if (!(last[0][0] / first[0][0] <= 0.9)) fail_msg("tf32's td_loss did not fall");
    printf("[LEARNING] %d of %d losses fall by 10 %% or more in tf32\n", learnt, kLosses);
}

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;
using cuda_test::dev_of;

extern "C" void fh_cuda_debug_bf16_operands(const float *ptrs[6], size_t counts[6])
    __attribute__((weak));

std::vector<float> host_copy(const float *d, size_t n) {
    std::vector<float> v(n);
    cuda_test::cuda_ok(cudaMemcpy(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost),
                       "copying a step buffer");
    return v;
}

/* Entries of `got` that are not bitwise the bfloat16 rounding of `src` (src = got: entries that
 * are not bfloat16 values). */
size_t not_rounding(const std::vector<float> &got, const std::vector<float> &src) {
    size_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k) {
        const float want = operand_round::bf16_rne(src[k]);
        bad += memcmp(&got[k], &want, sizeof want) != 0;
    }
    return bad;
}

void test_bf16_stored_operands(void **) {
    if (!fh_test_have_cuda() || !fh_cuda_debug_bf16_operands) skip();
    const fh_config c = default_config(16384);
    Batches bt(c, 5, 1);
    const char *names[6] = {"x~", "rounded x~", "dzc", "dz (rounded dzc)", "g", "dpre1"};
    for (int math : {FH_MATH_BF16, FH_MATH_TF32}) {
        fh_pipeline *p = make(cuda_config(c, math));
        step(p, bt.b[0]);
        assert_int_equal(fh_pipeline_sync(p), FH_OK);
        const float *ptr[6];
        size_t n[6];
        fh_cuda_debug_bf16_operands(ptr, n);
        if (math == FH_MATH_TF32) {
            if (ptr[1]) fail_msg("TF32 has a rounded x~");
            fh_pipeline_destroy(p);
            continue;
        }
        for (int k = 0; k < 6; ++k)
            if (!ptr[k] || !n[k]) fail_msg("no %s buffer", names[k]);
        const std::vector<float> x = host_copy(ptr[0], n[0]), xr = host_copy(ptr[1], n[1]);
        const std::vector<float> dzc = host_copy(ptr[2], n[2]), dz = host_copy(ptr[3], n[3]);
        const std::vector<float> g = host_copy(ptr[4], n[4]), d1 = host_copy(ptr[5], n[5]);
        fh_pipeline_destroy(p);
        size_t nonzero = 0;
        for (float v : dzc) nonzero += v != 0.0f;
        const size_t bad[4] = {not_rounding(xr, x), not_rounding(dz, dzc), not_rounding(g, g),
                               not_rounding(d1, d1)};
        printf("[BF16_OPERANDS] B=16384: entries not the bfloat16 rounding: x~ %zu of %zu, dzc "
               "%zu of %zu (%zu nonzero), g %zu of %zu, dpre1 %zu of %zu\n", bad[0], n[1],
               bad[1], n[3], nonzero, bad[2], n[4], bad[3], n[5]);
        if (!nonzero) fail_msg("CQL's dzc is all zero: the check would not see its rounding");
        for (size_t b : bad)
            if (b) fail_msg("a BF16 operand stored unrounded");
    }
}

/* float -> bfloat16 -> float, round to nearest even. */
using operand_round::bf16_rne;

struct GemmCase {
    const char *name;
    cublasOperation_t opa, opb;
    int m, n, k, lda, ldb;
    float beta;
    bool check_rounding; /* k small enough that the operands' rounding shows above float32 sums */
};

/* C = op(a) op(b) + beta C through gemm_bf16, against float64 sums; errors per element over
 * Σ_k |op(a)_ik op(b)_kj| (+ |beta C|). */
void check_gemm(const GemmCase &t, cublasHandle_t h, void *stage) {
    const int ar = t.opa == CUBLAS_OP_N ? t.m : t.k, ac = t.opa == CUBLAS_OP_N ? t.k : t.m;
    const int br = t.opb == CUBLAS_OP_N ? t.k : t.n, bc = t.opb == CUBLAS_OP_N ? t.n : t.k;
    printf("[GEMM_BF16] %s: operands %zu elements, stage %zu\n", t.name,
           (size_t)ar * ac + (size_t)br * bc, fh::kBf16StageElems);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a((size_t)t.lda * ac), b((size_t)t.ldb * bc), c0((size_t)t.m * t.n);
    for (float &v : a) v = u(rng);
    for (float &v : b) v = u(rng);
    for (float &v : c0) v = u(rng);
    const Dev da = dev_of(a), db = dev_of(b), dc = dev_of(c0);
    const fh::cuda::Blas bl{h, CUBLAS_COMPUTE_32F, stage};
    const fh::cuda::GemmDesc g{t.opa, t.opb, t.m, t.n, t.k, (const float *)da.p, t.lda,
                               (const float *)db.p, t.ldb, (float *)dc.p, t.m};
    try {
        fh::cuda::gemm_bf16(bl, g, t.beta, t.name);
    } catch (const fh::Error &e) {
        fail_msg("%s: %s", t.name, e.message.c_str());
    }
    const std::vector<float> c = dc.get<float>();
    auto A = [&](int i, int l) { return t.opa == CUBLAS_OP_N ? a[(size_t)l * t.lda + i] : a[(size_t)i * t.lda + l]; };
    auto Bm = [&](int l, int j) { return t.opb == CUBLAS_OP_N ? b[(size_t)j * t.ldb + l] : b[(size_t)l * t.ldb + j]; };
    double worst_bf = 0, worst_exact = 0;
    for (int j = 0; j < t.n; ++j)
        for (int i = 0; i < t.m; ++i) {
            double s_bf = 0, s_ex = 0, mag = 0;
            for (int l = 0; l < t.k; ++l) {
                const float x = A(i, l), y = Bm(l, j);
                s_bf += (double)bf16_rne(x) * bf16_rne(y);
                s_ex += (double)x * y;
                mag += std::fabs((double)x * y);
            }
            const double cz = (double)t.beta * c0[(size_t)j * t.m + i];
            mag += std::fabs(cz);
            const double got = c[(size_t)j * t.m + i];
            worst_bf = std::max(worst_bf, std::fabs(got - (s_bf + cz)) / mag);
            worst_exact = std::max(worst_exact, std::fabs(got - (s_ex + cz)) / mag);
        }
    printf("[GEMM_BF16] %-44s vs bf16 operands %.2e, vs float32 operands %.2e\n", t.name,
           worst_bf, worst_exact);
    /* float32 accumulation of k products: a few float32 roundings of the magnitude sum. */
    if (!(worst_bf <= 2e-5)) fail_msg("%s: %.3e from the bfloat16 reference", t.name, worst_bf);
    if (t.check_rounding && !(worst_exact >= 10 * worst_bf && worst_exact >= 1e-4))
        fail_msg("%s: %.3e from the float32 operands: not rounded to bfloat16?", t.name,
                 worst_exact);
}

void test_gemm_bf16_against_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail_msg("cublasCreate");
    const Dev stage(fh::kBf16StageElems * 2 + 256);
    const GemmCase cases[] = {
        /* y = x Wᵀ at 20000 rows: |x| + |W| = 5.2M elements > the stage: blocks of columns */
        {"nt, 20000 rows x 256 x 256 (column blocks)", CUBLAS_OP_T, CUBLAS_OP_N, 256, 20000, 256,
         256, 256, 0.0f, true},
        /* dW = dyᵀ x over 70000 rows: (48 + 64) · 70000 > the stage: blocks of k */
        {"tn, dW 64 x 48 over 70000 rows (k blocks)", CUBLAS_OP_N, CUBLAS_OP_T, 48, 64, 70000, 48,
         64, 0.0f, false},
        /* a strided operand (lda > rows), odd sizes, beta = 1 */
        {"nn, strided a (lda 40), 33 x 50 x 7, beta 1", CUBLAS_OP_N, CUBLAS_OP_N, 33, 50, 7, 40, 7,
         1.0f, true},
    };
    for (const GemmCase &t : cases) check_gemm(t, h, stage.p);
    cublasDestroy(h);
}

/* gemm_tn_bf16 (operands a kernel wrote as bfloat16: the IQN learner's dWm, dWφ): row-major
 * C[M, N] = A[K, M]ᵀ B[K, N] + beta C against float64 sums of the same bfloat16 values, errors
 * per element over Σ_k |A_ki B_kj| (+ |beta C|). */
void test_gemm_tn_bf16_against_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail_msg("cublasCreate");
    struct Case {
        int M, N, K;
        float beta;
    };
    /* dWφ's shape over 70000 rows; odd sizes with beta = 1 */
    for (const Case t : {Case{128, 64, 70000, 0.0f}, Case{33, 50, 1001, 1.0f}}) {
        std::mt19937 rng(11);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<uint16_t> a((size_t)t.K * t.M), b((size_t)t.K * t.N);
        std::vector<float> af(a.size()), bf(b.size()), c0((size_t)t.M * t.N);
        auto fill = [&](std::vector<uint16_t> &h16, std::vector<float> &f) {
            for (size_t k = 0; k < h16.size(); ++k) {
                f[k] = bf16_rne(u(rng));
                uint32_t bits;
                memcpy(&bits, &f[k], 4);
                h16[k] = (uint16_t)(bits >> 16);
            }
        };
        fill(a, af);
        fill(b, bf);
        for (float &v : c0) v = u(rng);
        const Dev da = dev_of(a), db = dev_of(b), dc = dev_of(c0);
        const fh::cuda::Blas bl{h, CUBLAS_COMPUTE_32F, nullptr};
        try {
            fh::cuda::gemm_tn_bf16(bl, t.M, t.N, t.K, (const __nv_bfloat16 *)da.p,
                                   (const __nv_bfloat16 *)db.p, (float *)dc.p, t.beta, "test");
        } catch (const fh::Error &e) {
            fail_msg("gemm_tn_bf16 %dx%d over %d: %s", t.M, t.N, t.K, e.message.c_str());
        }
        if (cudaDeviceSynchronize() != cudaSuccess) fail_msg("gemm_tn_bf16: a fault");
        const std::vector<float> c = dc.get<float>();
        double worst = 0;
        for (int i = 0; i < t.M; ++i)
            for (int j = 0; j < t.N; ++j) {
                double sum = (double)t.beta * c0[(size_t)i * t.N + j];
                double mag = std::fabs(sum);
                for (int l = 0; l < t.K; ++l) {
                    const double p = (double)af[(size_t)l * t.M + i] * bf[(size_t)l * t.N + j];
                    sum += p;
                    mag += std::fabs(p);
                }
                worst = std::max(worst, std::fabs(c[(size_t)i * t.N + j] - sum) / mag);
            }
        printf("[GEMM_BF16] gemm_tn_bf16 %d x %d over %d rows, beta %.0f: %.2e against float64\n",
               t.M, t.N, t.K, t.beta, worst);
        if (!(worst <= 2e-5)) fail_msg("gemm_tn_bf16 %dx%d over %d: %.3e", t.M, t.N, t.K, worst);
    }
    cublasDestroy(h);
}

/* gemm_bf16_values (float32 operands holding bfloat16 values, e.g. dW2 = dpre2ᵀ h1): against
 * float64 sums of the same values, as gemm_bf16's check; and against gemm_bf16 on the same
 * operands, which must agree to float32 accumulation (the same products). */
void test_gemm_bf16_values_against_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail_msg("cublasCreate");
    const int M = 128, N = 96, K = 16384;  /* dW = dyᵀ x over a batch of rows */
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a((size_t)K * M), b((size_t)K * N);
    for (float &v : a) v = bf16_rne(u(rng));
    for (float &v : b) v = bf16_rne(u(rng));
    const Dev da = dev_of(a), db = dev_of(b);
    const Dev c1 = dev_of(std::vector<float>((size_t)M * N, NAN));
    const Dev c2 = dev_of(std::vector<float>((size_t)M * N, NAN));
    const Dev stage(fh::kBf16StageElems * 2 + 256), ws(fh::cuda::kHeuristicWorkspace);
    fh::cuda::Blas bl{h, CUBLAS_COMPUTE_32F, stage.p};
    bl.ws = ws.p;
    bl.ws_bytes = fh::cuda::kHeuristicWorkspace;
    if (cublasSetWorkspace(h, ws.p, ws.n) != CUBLAS_STATUS_SUCCESS) fail_msg("cublasSetWorkspace");
    try {
        fh::cuda::gemm_bf16_values(bl, fh::cuda::desc_tn(M, N, K, (const float *)da.p,
                                                         (const float *)db.p, (float *)c1.p),
                                   0.0f, "values");
        fh::cuda::gemm_bf16(bl, fh::cuda::desc_tn(M, N, K, (const float *)da.p,
                                                  (const float *)db.p, (float *)c2.p),
                            0.0f, "staged");
    } catch (const fh::Error &e) {
        fail_msg("gemm_bf16_values: %s", e.message.c_str());
    }
    if (cudaDeviceSynchronize() != cudaSuccess) fail_msg("gemm_bf16_values: a fault");
    const std::vector<float> g1 = c1.get<float>(), g2 = c2.get<float>();
    double worst = 0, worst_staged = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double sum = 0, mag = 0;
            for (int l = 0; l < K; ++l) {
                const double p = (double)a[(size_t)l * M + i] * b[(size_t)l * N + j];
                sum += p;
                mag += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(g1[(size_t)i * N + j] - sum) / mag);
            worst_staged = std::max(worst_staged,
                                    std::fabs(g1[(size_t)i * N + j] - g2[(size_t)i * N + j]) / mag);
        }
    printf("[GEMM_BF16] gemm_bf16_values %d x %d over %d rows: %.2e against float64, %.2e "
           "against gemm_bf16\n", M, N, K, worst, worst_staged);
    if (!(worst <= 2e-5 && worst_staged <= 4e-5))
        fail_msg("gemm_bf16_values: %.3e from float64, %.3e from gemm_bf16", worst, worst_staged);
    cublasDestroy(h);
}
#else
void test_gemm_bf16_values_against_float64(void **) { skip(); }
void test_bf16_stored_operands(void **) { skip(); }
void test_gemm_bf16_against_float64(void **) { skip(); }
void test_gemm_tn_bf16_against_float64(void **) { skip(); }
#endif

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_bf16_against_float64),
        cmocka_unit_test(test_gemm_tn_bf16_against_float64),
        cmocka_unit_test(test_gemm_bf16_values_against_float64),
        cmocka_unit_test(test_bf16_stored_operands),
        cmocka_unit_test(test_td_loss_falls_in_both_modes),
        cmocka_unit_test(test_every_loss_falls_as_in_tf32),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
