/* The fused SiLU layer (cuda/linear_silu.cu): act = SiLU(X Wᵀ + b) and pre = X Wᵀ against a
 * float64 evaluation of the same formula, on the wgmma kernel and on the cuBLAS + bias_silu path,
 * at the Q net's, IQN's and IQL's shapes and at shapes with a partly filled last row tile, with
 * the pre-activation kept and not kept (pre = act). TF32 products: each operand keeps 10 of its
 * 23 mantissa bits, so an element may be off by about 2^-9 of Σ_k |x_k w_k| (both operands);
 * the bound is 2.5e-3 of that sum. The whole tensor's relative error must be under 4.5e-4:
 * operands rounded to nearest give about 2.7e-4 at these shapes (cuBLAS's path too), while
 * truncated ones (the tensor cores' own reading of float32) shift every product the same way by
 * about 2^-11 per operand, which this bound catches.
 * On a Hopper GPU the test also requires that the wgmma kernel is the one that runs (the probe
 * found its code), so a silent fallback cannot pass for it. Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/lanes.hpp"
#include "../cuda/linear_silu.hpp"
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

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "test_cuda_util.h"

using namespace fhtest;

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

struct Shape {
    int M, N, K;
};

/* One layer on one path; returns the largest error in units of the bound. */
void check_layer(const fh::cuda::Blas &bl, cudaStream_t s, Shape sh, bool keep_pre,
                 unsigned seed) {
    const int M = sh.M, N = sh.N, K = sh.K;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X((size_t)M * K), W((size_t)N * K), b(N);
    for (float &e : X) e = nd(rng);
    for (float &e : W) e = nd(rng) / std::sqrt((float)K);
    for (float &e : b) e = 0.5f * nd(rng);
    float *dX = dev(X), *dW = dev(W), *db = dev(b);
    float *dact = dev(std::vector<float>((size_t)M * N, NAN));
    float *dpre = keep_pre ? dev(std::vector<float>((size_t)M * N, NAN)) : dact;
    std::string err;
    try {
        fh::cuda::linear_silu(bl, s, M, N, K, dX, dW, db, dpre, dact, "test layer");
    } catch (const fh::Error &e) {
        err = e.message;
    }
    if (!err.empty()) fail_msg("linear_silu threw: %s", err.c_str());
    const cudaError_t ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) fail_msg("linear_silu: %s", cudaGetErrorString(ce));
    const std::vector<float> act = host(dact, (size_t)M * N);
    const std::vector<float> pre = keep_pre ? host(dpre, (size_t)M * N) : std::vector<float>();
    double worst = 0, num = 0, den = 0, pnum = 0, pden = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double z = 0, mag = 0;
            for (int k = 0; k < K; ++k) {
                const double t = (double)X[(size_t)i * K + k] * W[(size_t)j * K + k];
                z += t;
                mag += std::fabs(t);
            }
            const double zb = z + b[j], a = zb / (1.0 + std::exp(-zb));
            const double bound = 2.5e-3 * mag + 1e-6;
            /* SiLU's slope is at most 1.1: the activation's bound is the product's, times 1.1. */
            const double ea = std::fabs(act[(size_t)i * N + j] - a) / (1.1 * bound);
            worst = std::max(worst, std::isfinite(ea) ? ea : 1e30);
            num += (act[(size_t)i * N + j] - a) * (act[(size_t)i * N + j] - a);
            den += a * a;
            if (keep_pre) {
                const double ep = std::fabs(pre[(size_t)i * N + j] - z) / bound;
                worst = std::max(worst, std::isfinite(ep) ? ep : 1e30);
                pnum += (pre[(size_t)i * N + j] - z) * (pre[(size_t)i * N + j] - z);
                pden += z * z;
            }
        }
    const double rel = std::sqrt(num / den), prel = keep_pre ? std::sqrt(pnum / pden) : 0.0;
    printf("[LINEAR] %s M=%d N=%d K=%d %s: worst %.3f of the bound, relative error act %.2e "
           "pre %.2e\n",
           bl.linear_tc ? "wgmma" : "cublas", M, N, K, keep_pre ? "pre kept" : "act only", worst,
           rel, prel);
    if (!(worst <= 1.0 && rel <= 4.5e-4 && prel <= 4.5e-4))
        fail_msg("linear_silu (%s) M=%d N=%d K=%d: worst %.3f of the bound, relative %.2e / %.2e",
                 bl.linear_tc ? "wgmma" : "cublas", M, N, K, worst, rel, prel);
    cudaFree(dX);
    cudaFree(dW);
    cudaFree(db);
    cudaFree(dact);
    if (keep_pre) cudaFree(dpre);
}

void test_linear_silu_vs_float64(void **) {
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
    printf("[LINEAR] %s (cc %d.%d): wgmma kernel %s\n", prop.name, prop.major, prop.minor,
           tc ? "loaded" : "absent");
    if (prop.major == 9 && prop.minor == 0 && !getenv("FOXHUNT_LINEAR") && !tc)
        fail_msg("a Hopper GPU, but the wgmma kernel's code was not loaded");
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *ws = nullptr;
    const size_t ws_bytes = 32u << 20;
    cudaMalloc(&ws, ws_bytes);
    fh::cuda::Blas bl{fh::cuda::make_handle(c, s, ws, ws_bytes), fh::cuda::compute_type(c),
                      nullptr, false};
    /* The Q net's trunk and packed branches, IQN's ψ (D → 128), a last row tile of 1 and of 77
     * rows, the smallest K. */
    const Shape shapes[] = {{4096, 256, 128}, {1000, 256, 256}, {2048, 512, 256},
                            {513, 128, 128},  {77, 128, 32},    {129, 384, 64}};
    unsigned seed = 1;
    for (int path = 0; path < 2; ++path) {
        bl.linear_tc = path == 1;
        if (bl.linear_tc && !tc) continue;
        for (const Shape &sh : shapes)
            for (bool keep : {true, false}) check_layer(bl, s, sh, keep, seed++);
    }
    cublasDestroy(bl.handle);
    cudaFree(ws);
    cudaStreamDestroy(s);
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_linear_silu_vs_float64)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
