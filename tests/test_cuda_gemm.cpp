/* The float32 GEMM layer (cuda/gemm.cpp: gemm() through cublasLtMatmul) against float64 sums:
 * the three row-major forms the step uses (nt: y = x Wᵀ, nn: dx = dy W, tn: dW = dyᵀ x), in
 * strict FP32 and TF32, with beta = 0 and 1, at the step's weight-gradient shapes and shapes
 * like them (K = 16384 rows, A with a row stride wider than its width, as the branch backward's
 * dV has; the trunk's dW2; IQN dWφ's 128 × 64 output over a ragged 40001 rows; partial tiles;
 * strided operands), at odd shapes, with all three operands' row strides wider than their
 * widths (the leading dimensions desc_nt/nn/tn compute are used as they are in the other
 * cases), and with every operand 4 bytes past a 256-byte boundary (cublasLt's heuristics assume
 * 256-byte alignment unless told, and an algorithm chosen for more than a pointer has would
 * fault).
 * Each case runs on workspaces of 32 MiB, 16 MiB (the half workspace of the branch lanes, on
 * which cublasGemmEx chose 1.5 to 2.8 times slower kernels), 64 KiB and none: the algorithm
 * must fit the workspace it is given (the heuristics are asked as for 32 MiB, then for the
 * workspace itself). And each call is run twice: the bits must repeat.
 * Bounds per element, over Σ_k |a_ik b_kj| (+ |beta c|): TF32 2.5e-3 (both operands truncated
 * or rounded to 10-bit mantissas: at most about 2^-9 of each product); strict 2e-6, an empirical
 * bound: about ten times the largest error of float32 sums seen (1.9e-7 on the H200, 2.2e-7 on
 * an H100 at 256 × 256 × 16384), below what TF32 gives at every shape here (7e-6 and up), so
 * TF32 arithmetic in strict mode fails.
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../cuda/gemm.hpp"
#include "../cuda/lanes.hpp"
#include "config.hpp"
#include "error.hpp"
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test_cuda_util.h"

#if FOXHUNT_HAVE_CUDA
#include "cuda_dev.hpp"
#endif

using namespace fhtest;

namespace {

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;

enum Form { NT, NN, TN };
const char *const kForm[] = {"nt", "nn", "tn"};

struct Case {
    Form form;
    int M, N, K;
    int lda, ldb, ldc;  // row strides of A, B, C as stored (0: their widths)
};

/* Row-major A, B and C as the form stores them: nt A [M, K] B [N, K]; nn A [M, K] B [K, N];
 * tn A [K, M] B [K, N]; C [M, N]. */
struct Operands {
    int arows, acols, brows, bcols, lda, ldb, ldc;
};
Operands shape_of(const Case &t) {
    Operands o{};
    o.arows = t.form == TN ? t.K : t.M;
    o.acols = t.form == TN ? t.M : t.K;
    o.brows = t.form == NT ? t.N : t.K;
    o.bcols = t.form == NT ? t.K : t.N;
    o.lda = t.lda ? t.lda : o.acols;
    o.ldb = t.ldb ? t.ldb : o.bcols;
    o.ldc = t.ldc ? t.ldc : t.N;
    return o;
}

/* A case's operands and its float64 product (sum and magnitude Σ_k |a_ik b_kj| per element). */
struct Data {
    Operands o;
    std::vector<float> a, b, c0;
    std::vector<double> ref, mag;
};
Data make_data(const Case &t, unsigned seed) {
    Data d;
    d.o = shape_of(t);
    const Operands &o = d.o;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    d.a.resize((size_t)o.arows * o.lda);
    d.b.resize((size_t)o.brows * o.ldb);
    d.c0.resize((size_t)t.M * o.ldc);
    for (float &v : d.a) v = u(rng);
    for (float &v : d.b) v = u(rng);
    for (float &v : d.c0) v = u(rng);
    auto A = [&](int i, int k) {
        return t.form == TN ? d.a[(size_t)k * o.lda + i] : d.a[(size_t)i * o.lda + k];
    };
    auto B = [&](int k, int j) {
        return t.form == NT ? d.b[(size_t)j * o.ldb + k] : d.b[(size_t)k * o.ldb + j];
    };
    d.ref.assign((size_t)t.M * t.N, 0.0);
    d.mag.assign((size_t)t.M * t.N, 0.0);
    for (int i = 0; i < t.M; ++i)
        for (int k = 0; k < t.K; ++k) {
            const double x = A(i, k);
            double *r = &d.ref[(size_t)i * t.N], *m = &d.mag[(size_t)i * t.N];
            for (int j = 0; j < t.N; ++j) {
                const double p = x * B(k, j);
                r[j] += p;
                m[j] += std::fabs(p);
            }
        }
    return d;
}

/* One case on one workspace size; `off` floats past each buffer's (256-byte aligned) start. */
void check_case(const Case &t, const Data &d, int math_mode, size_t ws_bytes, int off,
                float beta) {
    const Operands &o = d.o;
    auto padded = [off](const std::vector<float> &v) {
        std::vector<float> p(v.size() + (size_t)off, 0.0f);
        std::copy(v.begin(), v.end(), p.begin() + off);
        return p;
    };
    const Dev da = cuda_test::dev_of(padded(d.a)), db = cuda_test::dev_of(padded(d.b));
    Dev dc = cuda_test::dev_of(padded(d.c0));
    const float *pa = (const float *)da.p + off, *pb = (const float *)db.p + off;
    float *pc = (float *)dc.p + off;

    fh_config c;
    fh_config_init(&c);
    c.math_mode = math_mode;
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) fail_msg("cudaStreamCreate");
    Dev ws(ws_bytes);
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
        if (run == 1)
            cuda_test::to_device(pc, d.c0.data(), d.c0.size() * 4, "reset C");
        fh::cuda::Blas bl{};
        try {
            void *w = ws_bytes ? ws.p : nullptr;
            bl = fh::cuda::Blas{fh::cuda::make_handle(c, s, w, ws_bytes),
                                fh::cuda::compute_type(c), nullptr, false, w, ws_bytes};
            fh::cuda::GemmDesc g{};
            if (t.form == NT) g = fh::cuda::desc_nt(t.M, t.N, t.K, pa, pb, pc);
            if (t.form == NN) g = fh::cuda::desc_nn(t.M, t.N, t.K, pa, pb, pc);
            if (t.form == TN) g = fh::cuda::desc_tn(t.M, t.N, t.K, pa, pb, pc);
            /* Strided cases: the row-major A is cuBLAS's b, B its a, and C's row stride is
             * cuBLAS's ldc. The other cases keep desc_*'s leading dimensions. */
            if (t.lda) g.ldb = t.lda;
            if (t.ldb) g.lda = t.ldb;
            if (t.ldc) g.ldc = t.ldc;
            fh::cuda::gemm(bl, g, beta, "test gemm");
        } catch (const fh::Error &e) {
            fail_msg("%s M=%d N=%d K=%d ws %zu: %s", kForm[t.form], t.M, t.N, t.K, ws_bytes,
                     e.message.c_str());
        }
        cuda_test::cuda_ok(cudaStreamSynchronize(s), "gemm");
        cublasDestroy(bl.handle);
        std::vector<float> got = dc.get<float>();
        got.erase(got.begin(), got.begin() + off);
        if (run == 0) {
            first = got;
            continue;
        }
        if (memcmp(first.data(), got.data(), got.size() * 4) != 0)
            fail_msg("%s M=%d N=%d K=%d ws %zu: two runs differ", kForm[t.form], t.M, t.N, t.K,
                     ws_bytes);
    }
    cudaStreamDestroy(s);

    const double bound = math_mode == FH_MATH_STRICT ? 2e-6 : 2.5e-3;
    double worst = 0;
    for (int i = 0; i < t.M; ++i)
        for (int j = 0; j < t.N; ++j) {
            const size_t e = (size_t)i * t.N + j, at = (size_t)i * o.ldc + j;
            const double cz = (double)beta * d.c0[at];
            const double err =
                std::fabs(first[at] - (d.ref[e] + cz)) / (d.mag[e] + std::fabs(cz) + 1e-30);
            worst = std::max(worst, std::isfinite(err) ? err : 1e30);
        }
    /* Padding columns of C (j >= N) must be as they were. */
    for (int i = 0; i < t.M; ++i)
        for (int j = t.N; j < o.ldc; ++j)
            if (memcmp(&first[(size_t)i * o.ldc + j], &d.c0[(size_t)i * o.ldc + j], 4) != 0)
                fail_msg("%s M=%d N=%d K=%d: C[%d, %d] past N written", kForm[t.form], t.M, t.N,
                         t.K, i, j);
    printf("[GEMM] %s M=%d N=%d K=%d ld %d/%d/%d %s beta %g ws %zu KiB offset %d B: worst %.2e "
           "of the magnitude (bound %.1e)\n",
           kForm[t.form], t.M, t.N, t.K, o.lda, o.ldb, o.ldc,
           math_mode == FH_MATH_STRICT ? "strict" : "tf32", beta, ws_bytes >> 10, off * 4, worst,
           bound);
    if (!(worst <= bound))
        fail_msg("%s M=%d N=%d K=%d ws %zu: worst %.3e > %.1e", kForm[t.form], t.M, t.N, t.K,
                 ws_bytes, worst, bound);
}

void test_gemm_against_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const Case cases[] = {
        {TN, 128, 256, 16384, 512, 0, 0}, /* the branch backward's dV = dpreᵀ h2 */
        {TN, 8, 128, 4096, 0, 0, 0},      /* CQL's dU: an output of 8 rows */
        {NT, 1000, 96, 72, 0, 0, 0},
        {NN, 333, 65, 129, 0, 0, 0},
        {TN, 7, 13, 1001, 0, 0, 0},
        /* every operand strided, each stride different */
        {NT, 100, 40, 36, 44, 52, 60},
        {NN, 100, 40, 36, 44, 52, 60},
        {TN, 100, 40, 36, 108, 52, 60},
        /* the trunk's dW2, and shapes like the step's other weight gradients: IQN dWφ's
         * 128 × 64 output over a ragged number of rows, partial tiles, strided operands */
        {TN, 256, 256, 16384, 0, 0, 0},
        {TN, 128, 64, 40001, 0, 0, 0},
        {TN, 192, 100, 9000, 0, 0, 0},
        {TN, 64, 68, 8192, 72, 76, 0},
    };
    const size_t ws_sizes[] = {size_t{32} << 20, size_t{16} << 20, size_t{64} << 10, 0};
    unsigned seed = 1;
    for (const Case &t : cases) {
        const Data d = make_data(t, seed++);
        for (int mode : {FH_MATH_STRICT, FH_MATH_TF32})
            for (size_t ws : ws_sizes) {
                check_case(t, d, mode, ws, 0, 0.0f);
                check_case(t, d, mode, ws, 1, 1.0f);
            }
    }
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemm_against_float64)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
