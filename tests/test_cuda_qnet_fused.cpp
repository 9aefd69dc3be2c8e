/* ddqn's forward-only Q pass as one kernel (cuda/qnet_fused.cu) against
 * - the layer-by-layer wgmma kernels it replaces (linear_silu twice, then linear_silu_heads over
 *   the packed branches; test_cuda_linear checks each of them against float64): q and the stored
 *   rows of h2 must be bitwise equal, the rows of h2 before h2_from untouched;
 * - a float64 evaluation of the same network on the same TF32 operands (x̃ and the weights
 *   rounded, h1 and h2 rounded to TF32 as the kernels store them): every q within 1e-3 of
 *   Σ_c |g_c U_b[a][c]| (+ 1e-6) of its reference. Only the float32 accumulation and the rare
 *   activation that rounds the other way at a TF32 boundary (2^-10 of itself) differ, far below
 *   the bound; a wrong weight, row or swizzle is off by the order of the sum itself.
 * Shapes: the default (D = 128, 4 branches of 8 actions) with enough rows that every block runs
 * three tiles (the persistent loop, the x̃ copy ahead, both region parities), a last partial
 * tile, an odd number of branches (one warpgroup idle in the last pass), D = 256, D = 32 with one
 * branch and 3 actions. Shapes the kernel does not serve are refused. Skipped without a GPU;
 * on a Hopper GPU the wgmma code must be loaded. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/lanes.hpp"
#include "../cuda/linear_silu.hpp"
#include "../cuda/qnet_fused.hpp"
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

namespace {

#if FOXHUNT_HAVE_CUDA
float *dev(const std::vector<float> &v) {
    float *p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(float)) != cudaSuccess)
        fail_msg("cudaMalloc");
    cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
    return p;
}

std::vector<float> host(const float *p, size_t n) {
    std::vector<float> v(n);
    cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return v;
}

float tf32_rna(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & ~0x1FFFu;
    memcpy(&x, &u, 4);
    return x;
}

double silu(double z) { return z / (1.0 + std::exp(-z)); }

/* One layer of the float64 reference: out[i][n] = tf32(SiLU(Σ_k in[i][k] W[n][k] + b[n])). */
std::vector<float> ref_layer(const std::vector<float> &in, int K, const std::vector<float> &W,
                             const std::vector<float> &b, int N) {
    const size_t n_rows = in.size() / K;
    std::vector<float> out(n_rows * N);
    for (size_t r = 0; r < n_rows; ++r)
        for (int n = 0; n < N; ++n) {
            double z = b[n];
            for (int k = 0; k < K; ++k) z += (double)in[r * K + k] * W[(size_t)n * K + k];
            out[r * N + n] = tf32_rna((float)silu(z));
        }
    return out;
}

struct Case {
    int M, D, NB, A;
};

void check_case(const fh::cuda::Blas &bl, cudaStream_t s, Case cs, unsigned seed) {
    const int M = cs.M, D = cs.D, NB = cs.NB, A = cs.A, H = 256, HB = 128, nh = NB * HB;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)M * D), W1((size_t)H * D), W2((size_t)H * H), V((size_t)nh * H);
    std::vector<float> b1(H), b2(H), c(nh);
    for (float &v : x) v = nd(rng);
    for (float &v : W1) v = tf32_rna(nd(rng) / std::sqrt((float)D));
    for (float &v : W2) v = tf32_rna(nd(rng) / std::sqrt((float)H));
    for (float &v : V) v = tf32_rna(nd(rng) / std::sqrt((float)H));
    for (auto *vec : {&b1, &b2, &c})
        for (float &v : *vec) v = 0.5f * nd(rng);
    /* U_b and e_b in blocks `stride` floats apart, as in the flat parameter buffer. */
    const size_t stride = (size_t)A * HB + A + (A % 2);
    std::vector<float> ue(stride * NB, 0.0f);
    for (int b = 0; b < NB; ++b) {
        for (int k = 0; k < A * HB; ++k) ue[b * stride + k] = nd(rng) / std::sqrt((float)HB);
        for (int k = 0; k < A; ++k) ue[b * stride + A * HB + k] = 0.1f * nd(rng);
    }
    const float clip = 0.6f;
    float *dx = dev(x), *dW1 = dev(W1), *dW2 = dev(W2), *dV = dev(V), *db1 = dev(b1),
          *db2 = dev(b2), *dc = dev(c), *due = dev(ue);
    const size_t nq = (size_t)NB * M * A, nhid = (size_t)M * H;
    float *h1 = dev(std::vector<float>(nhid, NAN)), *h2 = dev(std::vector<float>(nhid, NAN));
    float *h2f = dev(std::vector<float>(nhid, NAN));
    float *q = dev(std::vector<float>(nq, NAN)), *qf = dev(std::vector<float>(nq, NAN));
    const int h2_from = M / 3;
    try {
        /* The layer-by-layer kernels. */
        if (!fh::cuda::linear_silu(bl, s, M, H, D, dx, false, dW1, dW1, db1, h1, h1, "W1") ||
            !fh::cuda::linear_silu(bl, s, M, H, H, h1, true, dW2, dW2, db2, h2, h2, "W2"))
            fail_msg("the trunk did not run on the wgmma kernel");
        fh::cuda::BranchHeads hd;
        hd.U = due;
        hd.e = due + (size_t)A * HB;
        hd.u_stride = hd.e_stride = stride;
        hd.z = hd.q = q;
        hd.A = A;
        hd.clip = clip;
        if (!fh::cuda::linear_silu_heads(bl, s, M, nh, H, h2, true, dV, dc, nullptr, nullptr, hd))
            fail_msg("the branches did not run on the wgmma kernel");
        /* The fused pass. */
        fh::cuda::QFusedArgs a;
        a.x = dx;
        a.W1t = dW1;
        a.b1 = db1;
        a.W2t = dW2;
        a.b2 = db2;
        a.Vcat = dV;
        a.ccat = dc;
        a.U = due;
        a.e = due + (size_t)A * HB;
        a.ue_stride = stride;
        a.M = M;
        a.D = D;
        a.H = H;
        a.HB = HB;
        a.NB = NB;
        a.A = A;
        a.clip = clip;
        a.q = qf;
        a.h2 = h2f;
        a.h2_from = h2_from;
        if (!fh::cuda::q_forward_fused(a, s)) fail_msg("q_forward_fused refused M=%d D=%d", M, D);
        /* Shapes it does not serve: nothing enqueued, false. */
        fh::cuda::QFusedArgs bad = a;
        bad.H = 128;
        if (fh::cuda::q_forward_fused(bad, s)) fail_msg("q_forward_fused took H = 128");
        bad = a;
        bad.A = 9;
        if (fh::cuda::q_forward_fused(bad, s)) fail_msg("q_forward_fused took A = 9");
        bad = a;
        bad.D = 48;
        if (fh::cuda::q_forward_fused(bad, s)) fail_msg("q_forward_fused took D = 48");
    } catch (const fh::Error &e) {
        fail_msg("threw: %s", e.message.c_str());
    }
    const cudaError_t ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) fail_msg("M=%d: %s", M, cudaGetErrorString(ce));
    const std::vector<float> qh = host(q, nq), qfh = host(qf, nq);
    const std::vector<float> h2h = host(h2, nhid), h2fh = host(h2f, nhid);
    size_t q_diff = 0, h2_diff = 0, h2_touched = 0;
    for (size_t k = 0; k < nq; ++k) q_diff += memcmp(&qh[k], &qfh[k], 4) != 0;
    for (size_t k = 0; k < nhid; ++k) {
        if (k < (size_t)h2_from * H)
            h2_touched += !std::isnan(h2fh[k]);
        else
            h2_diff += memcmp(&h2h[k], &h2fh[k], 4) != 0;
    }
    /* The float64 reference on a sample of rows (every row of small cases, with the last). */
    std::vector<int> rows;
    const int step = M > 4096 ? 37 : 1;
    for (int i = 0; i < M; i += step) rows.push_back(i);
    if (rows.back() != M - 1) rows.push_back(M - 1);
    std::vector<float> xr((size_t)rows.size() * D);
    for (size_t r = 0; r < rows.size(); ++r)
        for (int k = 0; k < D; ++k) xr[r * D + k] = tf32_rna(x[(size_t)rows[r] * D + k]);
    const std::vector<float> r1 = ref_layer(xr, D, W1, b1, H);
    const std::vector<float> r2 = ref_layer(r1, H, W2, b2, H);
    double worst = 0.0;
    for (size_t r = 0; r < rows.size(); ++r)
        for (int b = 0; b < NB; ++b) {
            std::vector<double> g(HB);
            for (int n = 0; n < HB; ++n) {
                double z = c[(size_t)b * HB + n];
                for (int k = 0; k < H; ++k)
                    z += (double)r2[r * H + k] * V[((size_t)b * HB + n) * H + k];
                g[n] = silu(z);
            }
            for (int k = 0; k < A; ++k) {
                const float *u = ue.data() + b * stride + (size_t)k * HB;
                double z = ue[b * stride + (size_t)A * HB + k], mag = 1e-6;
                for (int n = 0; n < HB; ++n) {
                    z += g[n] * u[n];
                    mag += std::fabs(g[n] * u[n]);
                }
                const double want = std::min(std::max(z, -(double)clip), (double)clip);
                const float got = qfh[(size_t)b * M * A + (size_t)rows[r] * A + k];
                const double e = std::fabs(got - want) / (1e-3 * mag);
                worst = std::max(worst, std::isfinite(e) ? e : 1e30);
            }
        }
    printf("[QFUSED] M=%d D=%d NB=%d A=%d: q bitwise differences %zu of %zu, h2 %zu (rows "
           "before %d written: %zu); against float64 (%zu rows) worst %.4f of the bound\n",
           M, D, NB, A, q_diff, nq, h2_diff, h2_from, h2_touched, rows.size(), worst);
    if (q_diff || h2_diff || h2_touched || !(worst <= 1.0))
        fail_msg("fused Q pass M=%d D=%d NB=%d A=%d: %zu q and %zu h2 differences, %zu h2 "
                 "written before h2_from, worst %.3f of the float64 bound",
                 M, D, NB, A, q_diff, h2_diff, h2_touched, worst);
    for (float *p : {dx, dW1, dW2, dV, db1, db2, dc, due, h1, h2, h2f, q, qf}) cudaFree(p);
}

void test_fused_q_pass(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CUDA;
    c.math_mode = FH_MATH_TF32;
    bool tc = false;
    try {
        tc = fh::cuda::linear_tc_enabled(c);
    } catch (const fh::Error &e) {
        fail_msg("linear_tc_enabled: %s", e.message.c_str());
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    if (prop.major == 9 && prop.minor == 0 && !tc)
        fail_msg("a Hopper GPU, but the wgmma code was not loaded");
    if (!tc) skip();
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *ws = nullptr;
    const size_t ws_bytes = 32u << 20;
    cudaMalloc(&ws, ws_bytes);
    fh::cuda::Blas bl{fh::cuda::make_handle(c, s, ws, ws_bytes), fh::cuda::compute_type(c),
                      nullptr, true};
    const int three_tiles = 3 * 64 * prop.multiProcessorCount - 5;
    const Case cases[] = {{three_tiles, 128, 4, 8}, {1000, 128, 3, 8}, {513, 256, 2, 8},
                          {77, 32, 1, 3}};
    unsigned seed = 11;
    for (const Case &cs : cases) check_case(bl, s, cs, seed++);
    cublasDestroy(bl.handle);
    cudaFree(ws);
    cudaStreamDestroy(s);
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_q_pass)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
