/* IQL's fused tensor-core pass (cuda/iql_fused.cu, TF32 and BF16 modes):
 * 1. the kernel alone against a float64 evaluation of SPEC §4 and §5.5 step 2 (Kostrikov et al.
 *    2021's expectile loss) from the same random x̃, Q̄sa and weights of both nets: every output it
 *    writes (V_hi, V_lo, ω, h1, dpre2, dpre1) on every row, and its partial sums of db2, dw3, db3,
 *    db1 and the loss, at D = 128 and D = 72, with a partly filled last tile, blocks that walk
 *    several tiles, and the mean's divisor W·B ≠ B; with FH_MATH_BF16's stores (bf16_stores)
 *    h1, dpre2 and dpre1 each the bfloat16 rounding of the float32 run's, the rest bitwise the
 *    same;
 * 2. whole TF32 steps of the fused and unfused paths (FOXHUNT_IQL_KERNELS) against each other and
 *    the CPU: the IQL parameters, both losses and the ensemble mean (which reads V_hi and V_lo)
 *    after 1 and 5 steps, at B = 1000 and 4096 and at D = 64;
 * 3. the IQL gradient after one step, fused against unfused, and the fused pipeline's memory
 *    (pre1 not allocated);
 * 4. two fused runs bitwise equal, and FOXHUNT_IQL_KERNELS=bogus refused with FH_ERR_BAD_VALUE.
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/iql_fused.hpp"
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

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "operand_round.hpp"
#include "test_cuda_util.h"

#if FOXHUNT_HAVE_CUDA
extern "C" const float *fh_cuda_debug_iql_grad(size_t *n) __attribute__((weak));
#endif

using namespace fhtest;

namespace {

#if FOXHUNT_HAVE_CUDA
double silu(double z) { return z / (1.0 + std::exp(-z)); }
double dsilu(double z) {
    const double s = 1.0 / (1.0 + std::exp(-z));
    return s * (1.0 + z * (1.0 - s));
}

template <class T>
T *ptr(const cuda_test::Dev &d) {
    return static_cast<T *>(d.p);
}

/* ‖g − ref‖₂ / ‖ref‖₂ (NaN, e.g. an unwritten row, gives NaN). */
double rel(const std::vector<double> &ref, const std::vector<double> &g) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num += (g[i] - ref[i]) * (g[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

void test_fused_kernel_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const int H = 128;
    /* D = 72: an odd number of contraction steps (9). Each D with the library's grid (one tile
     * per block at this B) and with 2 blocks, whose grid-stride loops take 3 and 4 tiles: the
     * next tile's x̃ prefetch and the sums across tiles. */
    for (const int D : {128, 72})
    for (const int grid : {0, 2}) {
        const int B = 777;                 /* 7 tiles, the last with 9 rows */
        const float rows = 2.0f * (float)B; /* W = 2: the mean over both ranks' rows */
        std::mt19937 rng(40 + D);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        auto vec = [&](size_t n, float sc) {
            std::vector<float> v(n);
            for (float &e : v) e = sc * nd(rng);
            return v;
        };
        /* One net's tensors at the layout's offsets (W1, b1, W2, b2, w3, b3), padded to 4. */
        const size_t oW1 = 0, ob1 = (size_t)H * D, oW2 = ob1 + H, ob2 = oW2 + (size_t)H * H,
                     ow3 = ob2 + H, ob3 = ow3 + H, total = ob3 + 4;
        std::vector<float> params(2 * total, 0.0f);
        for (int z = 0; z < 2; ++z) {
            float *P = params.data() + z * total;
            const std::vector<float> W1 = vec((size_t)H * D, 1.2f / std::sqrt((float)D)),
                                     b1 = vec(H, 0.3f), W2 = vec((size_t)H * H, 0.12f),
                                     b2 = vec(H, 0.3f), w3 = vec(H, 0.3f), b3 = vec(1, 0.5f);
            std::copy(W1.begin(), W1.end(), P + oW1);
            std::copy(b1.begin(), b1.end(), P + ob1);
            std::copy(W2.begin(), W2.end(), P + oW2);
            std::copy(b2.begin(), b2.end(), P + ob2);
            std::copy(w3.begin(), w3.end(), P + ow3);
            P[ob3] = b3[0];
        }
        const std::vector<float> x = vec((size_t)B * D, 1.0f), qsa = vec(B, 1.0f);
        const float tau[2] = {0.9f, 0.1f}, beta = 3.0f, wmax = 100.0f;

        const int blocks = grid ? grid : fh::cuda::iql::fused_blocks(B);
        const size_t BH = (size_t)B * H, W = 2 * H + 2;
        using cuda_test::dev_of;
        const cuda_test::Dev d_x = dev_of(x), d_p = dev_of(params), d_q = dev_of(qsa);
        const std::vector<float> nan_b(B, NAN), nan_bh(2 * BH, NAN);
        const cuda_test::Dev d_vh = dev_of(nan_b), d_vl = dev_of(nan_b), d_om = dev_of(nan_b);
        const cuda_test::Dev d_h1 = dev_of(nan_bh), d_d2 = dev_of(nan_bh), d_d1 = dev_of(nan_bh);
        const cuda_test::Dev d_ph = dev_of(std::vector<double>(2 * (size_t)blocks * W, NAN));
        const cuda_test::Dev d_pb = dev_of(std::vector<double>(2 * (size_t)blocks * H, NAN));
        fh::cuda::iql::FusedArgs a{};
        a.x = ptr<float>(d_x);
        a.params = ptr<float>(d_p);
        a.total = total;
        a.off_W1 = oW1; a.off_b1 = ob1; a.off_W2 = oW2; a.off_b2 = ob2; a.off_w3 = ow3; a.off_b3 = ob3;
        a.qsa = ptr<float>(d_q);
        a.B = B; a.D = D;
        a.rows = rows;
        a.tau[0] = tau[0]; a.tau[1] = tau[1];
        a.awr_beta = beta; a.awr_max = wmax;
        a.v_out[0] = ptr<float>(d_vh); a.v_out[1] = ptr<float>(d_vl); a.omega = ptr<float>(d_om);
        a.h1 = ptr<float>(d_h1); a.dpre2 = ptr<float>(d_d2); a.dpre1 = ptr<float>(d_d1);
        a.part_head = ptr<double>(d_ph); a.part_b1 = ptr<double>(d_pb);
        std::string err;
        try {
            fh::cuda::iql::fused_prepare();
            fh::cuda::iql::fused(a, blocks, 0);
        } catch (const fh::Error &e) {
            err = e.message;
        }
        if (!err.empty()) fail_msg("fused IQL threw: %s", err.c_str());
        const cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess) fail_msg("fused IQL: %s", cudaGetErrorString(ce));

        /* float64 reference. */
        std::vector<double> rV(2 * (size_t)B), rom(B), rh1(2 * BH), rd2(2 * BH), rd1(2 * BH);
        std::vector<double> rsum(2 * (W + H), 0.0);  /* per net: db2 | dw3 | db3 | loss | db1 */
        for (int z = 0; z < 2; ++z) {
            const float *P = params.data() + z * total;
            double *S = rsum.data() + z * (W + H);
            for (int i = 0; i < B; ++i) {
                std::vector<double> z1(H), h1(H), z2(H), h2(H), d2(H);
                for (int j = 0; j < H; ++j) {
                    double s = P[ob1 + j];
                    for (int k = 0; k < D; ++k) s += (double)P[oW1 + (size_t)j * D + k] * x[(size_t)i * D + k];
                    z1[j] = s;
                    h1[j] = silu(s);
                }
                double V = P[ob3];
                for (int j = 0; j < H; ++j) {
                    double s = P[ob2 + j];
                    for (int k = 0; k < H; ++k) s += (double)P[oW2 + (size_t)j * H + k] * h1[k];
                    z2[j] = s;
                    h2[j] = silu(s);
                    V += h2[j] * P[ow3 + j];
                }
                const double u = qsa[i] - V, w = u < 0 ? 1.0 - tau[z] : tau[z];
                const double dV = -2.0 * w * u / rows;
                rV[(size_t)z * B + i] = V;
                if (z == 0) rom[i] = std::min(std::exp(beta * u), (double)wmax);
                for (int j = 0; j < H; ++j) {
                    d2[j] = dV * P[ow3 + j] * dsilu(z2[j]);
                    S[j] += d2[j];
                    S[H + j] += dV * h2[j];
                }
                S[2 * H] += dV;
                S[2 * H + 1] += w * u * u;
                for (int k = 0; k < H; ++k) {
                    double s = 0;
                    for (int j = 0; j < H; ++j) s += d2[j] * P[oW2 + (size_t)j * H + k];
                    const double d1 = s * dsilu(z1[k]);
                    S[W + k] += d1;
                    const size_t at = (size_t)z * BH + (size_t)i * H + k;
                    rh1[at] = h1[k];
                    rd2[at] = d2[k];
                    rd1[at] = d1;
                }
            }
        }
        auto tod = [](const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); };
        std::vector<double> gV = tod(d_vh.get<float>()), gVl = tod(d_vl.get<float>());
        gV.insert(gV.end(), gVl.begin(), gVl.end());
        const std::vector<double> gom = tod(d_om.get<float>()), gh1 = tod(d_h1.get<float>()),
                                  gd2 = tod(d_d2.get<float>()), gd1 = tod(d_d1.get<float>());
        const std::vector<double> ph = d_ph.get<double>(), pb = d_pb.get<double>();
        std::vector<double> gsum(2 * (W + H), 0.0);
        for (int z = 0; z < 2; ++z)
            for (int b = 0; b < blocks; ++b) {
                for (size_t c = 0; c < W; ++c) gsum[z * (W + H) + c] += ph[((size_t)z * blocks + b) * W + c];
                for (int c = 0; c < H; ++c) gsum[z * (W + H) + W + c] += pb[((size_t)z * blocks + b) * H + c];
            }
        /* Each sum kind over both nets. */
        auto pick = [&](const std::vector<double> &s, size_t c0, size_t n) {
            std::vector<double> v;
            for (int z = 0; z < 2; ++z)
                for (size_t c = 0; c < n; ++c) v.push_back(s[z * (W + H) + c0 + c]);
            return v;
        };
        const struct { const char *name; double err, bound; } checks[] = {
            {"V", rel(rV, gV), 3e-3},
            {"omega", rel(rom, gom), 1e-2},
            {"h1", rel(rh1, gh1), 3e-3},
            {"dpre2", rel(rd2, gd2), 5e-3},
            {"dpre1", rel(rd1, gd1), 5e-3},
            {"db2", rel(pick(rsum, 0, H), pick(gsum, 0, H)), 5e-3},
            {"dw3", rel(pick(rsum, H, H), pick(gsum, H, H)), 5e-3},
            {"db3", rel(pick(rsum, 2 * H, 1), pick(gsum, 2 * H, 1)), 5e-3},
            {"loss", rel(pick(rsum, 2 * H + 1, 1), pick(gsum, 2 * H + 1, 1)), 5e-3},
            {"db1", rel(pick(rsum, W, H), pick(gsum, W, H)), 5e-3},
        };
        printf("[IQL] fused kernel vs float64, B=%d D=%d, %d blocks per net, rel. errors:", B, D,
               blocks);
        for (const auto &c : checks) printf(" %s %.2e", c.name, c.err);
        printf("\n");
        /* TF32 operands (2^-11) in chained products of K = D and 128, fast SiLU: ~1e-3. NaN (an unwritten row or partial) fails. */
        for (const auto &c : checks)
            if (!(c.err <= c.bound)) fail_msg("fused IQL, D=%d, %d blocks: %s rel. error %.3e > %.1e", D, blocks, c.name, c.err, c.bound);

        /* FH_MATH_BF16's stores (bf16_stores): h1, dpre2 and dpre1 each the bfloat16 rounding
         * (nearest even) of the float32 run's, every other output bitwise the float32 run's. */
        const std::vector<float> f_h1 = d_h1.get<float>(), f_d2 = d_d2.get<float>(),
                                 f_d1 = d_d1.get<float>(), f_vh = d_vh.get<float>(),
                                 f_vl = d_vl.get<float>(), f_om = d_om.get<float>();
        a.bf16_stores = true;
        try {
            fh::cuda::iql::fused(a, blocks, 0);
        } catch (const fh::Error &e) {
            fail_msg("fused IQL with bfloat16 stores threw: %s", e.message.c_str());
        }
        if (cudaDeviceSynchronize() != cudaSuccess)
            fail_msg("fused IQL with bfloat16 stores: a fault");
        const auto not_rounding = [](const std::vector<float> &got, const std::vector<float> &f) {
            size_t bad = 0;
            for (size_t k = 0; k < f.size(); ++k) {
                const float want = operand_round::bf16_rne(f[k]);
                bad += memcmp(&got[k], &want, sizeof(float)) != 0;
            }
            return bad;
        };
        const auto bits = [](const auto &u, const auto &v) {
            return u.size() == v.size() && memcmp(u.data(), v.data(), u.size() * sizeof(u[0])) == 0;
        };
        const size_t bad_h1 = not_rounding(d_h1.get<float>(), f_h1),
                     bad_d2 = not_rounding(d_d2.get<float>(), f_d2),
                     bad_d1 = not_rounding(d_d1.get<float>(), f_d1);
        const bool same = bits(d_vh.get<float>(), f_vh) && bits(d_vl.get<float>(), f_vl) &&
                          bits(d_om.get<float>(), f_om) && bits(d_ph.get<double>(), ph) &&
                          bits(d_pb.get<double>(), pb);
        printf("[IQL] bfloat16 stores, D=%d, %d blocks: h1 %zu, dpre2 %zu, dpre1 %zu entries not "
               "the rounding of the float32 run's; the other outputs %s\n", D, blocks, bad_h1,
               bad_d2, bad_d1, same ? "bitwise equal" : "DIFFER");
        if (bad_h1 || bad_d2 || bad_d1 || !same)
            fail_msg("fused IQL with bfloat16 stores, D=%d", D);
    }
}
#endif

/* The largest relative error over the IQL tensors and the ensemble mean (which reads V_hi and
 * V_lo). */
double iql_err(fh_pipeline *a, fh_pipeline *b, std::string &worst) {
    return max_rel_err(a, b, {"iql_hi.W1", "iql_hi.b1", "iql_hi.W2", "iql_hi.b2", "iql_hi.w3",
                              "iql_hi.b3", "iql_lo.W1", "iql_lo.b1", "iql_lo.W2", "iql_lo.b2",
                              "iql_lo.w3", "iql_lo.b3", "ensemble_mean"},
                       worst);
}

void test_fused_steps_agree(void **) {
    if (!fh_test_have_cuda()) skip();
    struct Case {
        uint32_t B, obs;
    };
    /* 1000: a partly filled last tile; obs 60 + goal 4: D = 64. */
    for (const Case k : {Case{1000, 124}, Case{4096, 124}, Case{1000, 60}}) {
        fh_config base = default_config(k.B);
        base.obs_dim = k.obs;
        fh_config cc = base;
        cc.backend = FH_BACKEND_CPU;
        fh_pipeline *cpu = make(cc);
        setenv("FOXHUNT_IQL_KERNELS", "unfused", 1);
        fh_pipeline *unfused = make(cuda_config(base, FH_MATH_TF32));
        unsetenv("FOXHUNT_IQL_KERNELS");
        fh_pipeline *fused = make(cuda_config(base, FH_MATH_TF32));
        Batches bt(base, 91, 5);
        for (int s = 0; s < 5; ++s) {
            for (fh_pipeline *p : {cpu, unfused, fused}) step(p, bt.b[(size_t)s]);
            if (s != 0 && s != 4) continue;
            const fh_metrics mf = metrics_of(fused);
            printf("[IQL] B=%u D=%u after %d step%s, fused against:", k.B, k.obs + base.goal_dim,
                   s + 1, s ? "s" : "");
            const char *names[] = {"unfused", "CPU"};
            fh_pipeline *others[] = {unfused, cpu};
            for (int o = 0; o < 2; ++o) {
                const fh_metrics mo = metrics_of(others[o]);
                std::string w;
                const double e = iql_err(fused, others[o], w);
                const double lh = std::fabs(mf.iql_loss_hi - mo.iql_loss_hi) / std::fabs(mo.iql_loss_hi);
                const double ll = std::fabs(mf.iql_loss_lo - mo.iql_loss_lo) / std::fabs(mo.iql_loss_lo);
                printf(" %s %.3e (%s), losses %.3e %.3e;", names[o], e, w.c_str(), lh, ll);
                /* TF32 products in every GPU path: the test_cuda_vs_cpu bound. */
                if (!(e <= 5e-2 && lh <= 5e-2 && ll <= 5e-2))
                    fail_msg("fused IQL: B=%u step %d against %s: %.3e (%s), losses %.3e %.3e",
                             k.B, s + 1, names[o], e, w.c_str(), lh, ll);
            }
            printf("\n");
        }
        for (fh_pipeline *p : {cpu, unfused, fused}) fh_pipeline_destroy(p);
    }
}

#if FOXHUNT_HAVE_CUDA
/* The gradient itself, which the parameters after Adam's sign-like first steps barely show: the
 * IQL learner's gradient [hi | lo] after one step on the same batch, fused against unfused
 * (both TF32), at B = 3000 (24 tiles, the last partial) and at D = 72. This covers the host side
 * of the fused path too (the weight-gradient GEMMs on what the kernel wrote, the partial sums
 * over its grid). Also: the fused path is the one running (its pipeline lacks pre1). */
void test_fused_gradient_matches(void **) {
    if (!fh_test_have_cuda()) skip();
    if (!fh_cuda_debug_iql_grad) skip();
    for (const uint32_t obs : {124u, 68u}) {
        fh_config base = default_config(3000);
        base.obs_dim = obs;
        Batches bt(base, 17, 1);
        std::vector<float> g[2];
        fh_memory_report mem[2];
        for (int k = 0; k < 2; ++k) {
            if (k == 0) setenv("FOXHUNT_IQL_KERNELS", "unfused", 1);
            fh_pipeline *p = make(cuda_config(base, FH_MATH_TF32));
            unsetenv("FOXHUNT_IQL_KERNELS");
            step(p, bt.b[0]);
            if (fh_pipeline_sync(p) != FH_OK) fail_msg("sync: %s", fh_last_error_message());
            size_t n = 0;
            const float *d = fh_cuda_debug_iql_grad(&n);
            assert_non_null(d);
            g[k].resize(n);
            if (cudaMemcpy(g[k].data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
                fail_msg("copying the IQL gradient");
            mem[k].struct_size = sizeof mem[k];
            if (fh_pipeline_memory(p, &mem[k]) != FH_OK) fail_msg("memory: %s", fh_last_error_message());
            fh_pipeline_destroy(p);
        }
        assert_int_equal(g[0].size(), g[1].size());
        const size_t total = g[0].size() / 2;
        double worst = 0, norm = 0;
        for (int z = 0; z < 2; ++z) {
            const double e = fh_test_rel_err(g[1].data() + z * total, g[0].data() + z * total, total);
            worst = std::max(worst, std::isnan(e) ? INFINITY : e);
        }
        for (float v : g[0]) norm += (double)v * v;
        const uint64_t pre1 = 2ull * base.batch_size * base.iql_hidden * sizeof(float);
        printf("[IQL] gradient after 1 step, B=3000 D=%u: fused against unfused %.3e (|g| %.3e); "
               "activations %llu -> %llu bytes (pre1 %llu)\n", obs + base.goal_dim, worst,
               std::sqrt(norm), (unsigned long long)mem[0].activations,
               (unsigned long long)mem[1].activations, (unsigned long long)pre1);
        if (!(norm > 0)) fail_msg("IQL gradient is zero");
        /* TF32 products in both paths (2^-11 operands), summed in other orders: ~1e-3. */
        if (!(worst <= 1e-2)) fail_msg("fused IQL gradient, D=%u: %.3e from the unfused one", obs + base.goal_dim, worst);
        /* The fused path does not allocate pre1 [2, B, 128] but needs at most as many partial
         * rows as the unfused head: exactly pre1 less. */
        assert_true(mem[0].activations - mem[1].activations == pre1);
    }
}
#endif

void test_fused_deterministic(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = cuda_config(default_config(3000), FH_MATH_TF32);
    Batches bt(c, 5, 3);
    const Snapshot a = run(c, bt, 3), b = run(c, bt, 3);
    assert_bitwise(a, b, "two fused-IQL runs, 3 TF32 steps");
    printf("[IQL] two fused runs of 3 steps: bitwise equal\n");
}

void test_bad_kernels_env(void **) {
    if (!fh_test_have_cuda()) skip();
    setenv("FOXHUNT_IQL_KERNELS", "bogus", 1);
    const fh_config c = cuda_config(default_config(256), FH_MATH_TF32);
    fh_pipeline *p = nullptr;
    const int rc = fh_pipeline_create(&c, &p);
    unsetenv("FOXHUNT_IQL_KERNELS");
    assert_int_equal(rc, FH_ERR_BAD_VALUE);
    assert_null(p);
    assert_non_null(strstr(fh_last_error_message(), "FOXHUNT_IQL_KERNELS"));
}

}  // namespace

int main(void) {
    /* FOXHUNT_TEST_FILTER=pattern (cmocka's * and ? wildcards) runs the matching tests only: the
     * kernel tests alone under compute-sanitizer (bench/run_device_quick.sh iql-san). */
    if (const char *f = getenv("FOXHUNT_TEST_FILTER")) cmocka_set_test_filter(f);
    const struct CMUnitTest tests[] = {
#if FOXHUNT_HAVE_CUDA
        cmocka_unit_test(test_fused_kernel_vs_float64),
#endif
        cmocka_unit_test(test_fused_steps_agree),
#if FOXHUNT_HAVE_CUDA
        cmocka_unit_test(test_fused_gradient_matches),
#endif
        cmocka_unit_test(test_fused_deterministic),
        cmocka_unit_test(test_bad_kernels_env)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
