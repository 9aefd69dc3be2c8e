/* IQN's passes fused on tensor cores (cuda/iqn_target.cu, iqn_online.cu, iqn_backward.cu; TF32
 * and BF16 modes):
 * 1. the target kernel alone (TF32 and bfloat16 products) against a float64 evaluation of SPEC
 *    §4's Z̄(x̃', τ') from the same ψ̄, random target weights of a size that gives Z̄ structure,
 *    and τ' drawn on the host from Philox purpose 3 — every row, so a wrong τ, row or column
 *    mapping shows;
 * 2. the online kernel alone against a float64 evaluation of the online pass and the quantile
 *    Huber head (Dabney et al. 2018, eq. 3 with SPEC §5.5's mean): every output it writes (τ,
 *    cos, φraw, m, dhpre, z_mean) and its partial sums (dbm, dw_z, db_z, the loss), at
 *    N = 8, 4, 16 and 1 (the shapes of its z_mean sums), with a partly filled last tile;
 * 3. the backward kernel alone against a float64 evaluation of the chain rule through
 *    m = ψ ⊙ φ, with φraw = cos(π k τ) Wφᵀ from random τ (the kernel recomputes it): dφpre,
 *    dψpre and the partial sums of dbφ and dbψ, at the same N;
 *    each kernel also in FH_MATH_BF16's instance (bfloat16 products, mma_bf16.cuh; the online
 *    pass's m, dhpre and the backward's dφpre stored as bfloat16, the backward reading
 *    dhpre so) against the same float64 evaluation within bfloat16's rounding, the float32
 *    buffers it must not write untouched, dψpre stored as bfloat16 values; and the TF32 target
 *    and online kernels also with h on the warpgroup products (wgmma, TF32's path where sm_90a
 *    code is loaded) within TF32's bound;
 * 3a. the dWφ kernel alone against float64 sums: dWφ = dφpreᵀ cos(π k τ) (cuda/iqn_dwphi.cu,
 *    its TF32 and bfloat16 instances), each run twice and bitwise equal;
 * 4. whole steps of the four levels of FOXHUNT_IQN_KERNELS (fused, online, target, unfused)
 *    against each other and the CPU: IQN loss, parameters and the ensemble mean after 1 and 5
 *    steps, in TF32 (TF32 products in every GPU path, so they agree to TF32 rounding, not
 *    bitwise) and in BF16 (where the fused path multiplies bfloat16 operands and its GEMMs read
 *    the bfloat16 operands its kernels write, and the others stage theirs).
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../cuda/iqn_fused.hpp"
#include "config.hpp"
#include "iqn_paths.hpp"
#include "error.hpp"
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
#include <cstring>
#include <random>
#include <string>
#include <utility>

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

/* Runs a fused kernel's prepare and launch, then waits for it: a throw or a fault fails the test
 * (after the handler, not from inside it). */
template <class F>
void launch_and_wait(const char *what, F &&launch) {
    std::string err;
    try {
        launch();
    } catch (const fh::Error &e) {
        err = e.message;
    } catch (...) {
        err = "unknown exception";
    }
    if (!err.empty()) fail_msg("%s threw: %s", what, err.c_str());
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fail_msg("%s: %s", what, cudaGetErrorString(e));
}

/* vec(n, sc): n normal deviates times sc (the kernels' random weights and inputs). */
struct Normal {
    std::mt19937 rng;
    std::normal_distribution<float> nd{0.0f, 1.0f};
    explicit Normal(unsigned seed) : rng(seed) {}
    std::vector<float> operator()(size_t n, float sc) {
        std::vector<float> v(n);
        for (float &e : v) e = sc * nd(rng);
        return v;
    }
};

template <class T>
std::vector<T> back(const T *d, size_t n) {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
}

void test_target_kernel_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const int Hq = 128, C = 64;
    for (int Nt : {8, 5}) {  /* 5: a transition's rows straddle the 16-row warp tiles */
        const int B = 777;   /* a last tile only partly filled */
        /* N' = 5 as rank 3 of a data-parallel step (SPEC §9): its rows' Philox c0 = 3B + i. */
        const uint32_t row0 = Nt == 5 ? 3 * B : 0;
        Normal vec(3 + Nt);
        const std::vector<float> psi = vec((size_t)B * Hq, 0.8f), Wphi = vec((size_t)Hq * C, 0.25f),
                                 bphi = vec(Hq, 0.3f), Wm = vec((size_t)Hq * Hq, 0.12f),
                                 bm = vec(Hq, 0.3f), wz = vec(Hq, 0.3f), bz = vec(1, 0.5f);
        const uint64_t seed = 12345, step = 7;
        std::vector<float> zt((size_t)B * Nt, NAN);
        float *d_psi = dev(psi), *d_Wphi = dev(Wphi), *d_bphi = dev(bphi), *d_Wm = dev(Wm),
              *d_bm = dev(bm), *d_wz = dev(wz), *d_bz = dev(bz), *d_zt = dev(zt);
        uint64_t *d_step = dev(std::vector<uint64_t>{step});
        std::vector<double> zr((size_t)B * Nt);  /* the float64 Z̄ */
        for (int i = 0; i < B; ++i)
            for (int m = 0; m < Nt; ++m) {
                const double tau = fh::uniform24(fh::philox(seed, row0 + (uint32_t)i, (uint32_t)m,
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
                zr[(size_t)i * Nt + m] = z;
            }
        /* TF32 operands (2^-11) in two chained products of K = 64 and 128, fast SiLU: ~1e-3.
         * FH_MATH_BF16's bfloat16 products (2^-9 operand rounding): about eight times that
         * (3.5e-3 on the H200); a misplaced fragment
         * gives O(1). */
        /* The TF32 instance also with h̄ on the warpgroup products (the TF32 mode's on Hopper),
         * where the loaded code has them (sm_90a). */
        bool have_wg = false;
        launch_and_wait("target_fused_prepare",
                        [&] { have_wg = fh::cuda::iqn::target_fused_prepare(); });
        for (const int mode : {0, 1, 2}) {
            const bool bf16 = mode == 2, wg = mode == 1;
            if (wg && !have_wg) {
                printf("[IQN] fused target kernel (TF32 warpgroup): no sm_90a code, skipped\n");
                continue;
            }
            cudaMemcpy(d_zt, zt.data(), zt.size() * 4, cudaMemcpyHostToDevice);  /* NaN */
            fh::cuda::iqn::TargetArgs a{d_psi, d_Wphi, d_bphi, d_Wm, d_bm, d_wz, d_bz, seed,
                                        d_step, B, Nt, row0, d_zt, bf16, wg};
            launch_and_wait("target_fused", [&] {
                fh::cuda::iqn::target_fused(a, fh::cuda::iqn::fused_blocks((size_t)B * Nt), 0);
            });
            const std::vector<float> g = back(d_zt, zt.size());
            double num = 0, den = 0, worst = 0;
            for (size_t k = 0; k < zr.size(); ++k) {
                num += (g[k] - zr[k]) * (g[k] - zr[k]);
                den += zr[k] * zr[k];
                worst = std::max(worst, std::fabs(g[k] - zr[k]));
            }
            const double rel = std::sqrt(num / den);
            const char *what = bf16 ? "BF16" : wg ? "TF32 warpgroup" : "TF32";
            printf("[IQN] fused target kernel (%s) vs float64, B=%d N'=%d: rel. error %.3e, max "
                   "|diff| %.3e (|Z| rms %.3f)\n", what, B, Nt, rel, worst,
                   std::sqrt(den / ((double)B * Nt)));
            if (!(rel <= (bf16 ? 2e-2 : 5e-3)))
                fail_msg("fused target pass (%s): rel. error %.3e (NaN = unwritten rows)", what,
                         rel);
        }
        for (void *p : {(void *)d_psi, (void *)d_Wphi, (void *)d_bphi, (void *)d_Wm, (void *)d_bm,
                        (void *)d_wz, (void *)d_bz, (void *)d_zt, (void *)d_step})
            cudaFree(p);
    }
}

/* ‖g − ref‖₂ / ‖ref‖₂ over a tensor. */
double rel_l2(const std::vector<float> &g, const std::vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
        num += ((double)g[k] - ref[k]) * ((double)g[k] - ref[k]);
        den += ref[k] * ref[k];
    }
    return std::sqrt(num / den);
}

double huber(double u, double k) { return std::fabs(u) <= k ? 0.5 * u * u : k * (std::fabs(u) - 0.5 * k); }
double dhuber(double u, double k) { return std::fabs(u) <= k ? u : (u > 0 ? k : -k); }


/* bfloat16 bit patterns as floats (exact). */
std::vector<float> widen(const std::vector<uint16_t> &h) {
    std::vector<float> f(h.size());
    for (size_t k = 0; k < h.size(); ++k) {
        const uint32_t u = (uint32_t)h[k] << 16;
        memcpy(&f[k], &u, sizeof u);
    }
    return f;
}

template <class T>
bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

bool all_nan(const std::vector<float> &v) {
    for (float x : v)
        if (!std::isnan(x)) return false;
    return true;
}

void test_online_kernel_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const int Hq = 128, C = 64, Nt = 8, B = 333; /* 333·N rows: a last tile partly filled */
    for (int N : {8, 4, 16, 1}) {
        const uint32_t row0 = N == 4 ? 2 * B : 0; /* N = 4 as rank 2 of a data-parallel step */
        const size_t R = (size_t)B * N;
        Normal vec(11 + N);
        std::uniform_real_distribution<float> ud(0.0f, 1.0f);
        const std::vector<float> psi = vec((size_t)B * Hq, 0.8f), Wphi = vec((size_t)Hq * C, 0.25f),
                                 bphi = vec(Hq, 0.3f), Wm = vec((size_t)Hq * Hq, 0.12f),
                                 bm = vec(Hq, 0.3f), wz = vec(Hq, 0.3f), bz = vec(1, 0.5f),
                                 zt = vec((size_t)B * Nt, 1.0f), r = vec(B, 0.5f);
        std::vector<float> done(B);
        for (float &d : done) d = ud(vec.rng) < 0.2f ? 1.0f : 0.0f;
        const float gamma = 0.99f, kappa = 1.0f;
        const double scale = 1.0 / (3.0 * B * Nt); /* as W = 3 */
        const uint64_t seed = 987, step = 4;
        const int blocks = fh::cuda::iqn::fused_blocks(R);
        const std::vector<float> nan_r(R, NAN), nan_rc(R * C, NAN), nan_rh(R * Hq, NAN), nan_b(B, NAN);
        float *d_psi = dev(psi), *d_Wphi = dev(Wphi), *d_bphi = dev(bphi), *d_Wm = dev(Wm),
              *d_bm = dev(bm), *d_wz = dev(wz), *d_bz = dev(bz), *d_zt = dev(zt), *d_r = dev(r),
              *d_done = dev(done), *d_tau = dev(nan_r), *d_cos = dev(nan_rc), *d_phi = dev(nan_rh),
              *d_m = dev(nan_rh), *d_dh = dev(nan_rh), *d_zm = dev(nan_b);
        double *d_part = dev(std::vector<double>((size_t)blocks * (2 * Hq + 2), NAN));
        uint64_t *d_step = dev(std::vector<uint64_t>{step});
        fh::cuda::iqn::OnlineArgs a{};
        a.psi = d_psi; a.Wphi = d_Wphi; a.bphi = d_bphi; a.Wm = d_Wm; a.bm = d_bm; a.wz = d_wz;
        a.bz = d_bz; a.zt = d_zt; a.r = d_r; a.done = d_done; a.gamma = gamma; a.kappa = kappa;
        a.scale = scale; a.seed = seed; a.step = d_step; a.B = B; a.N = N; a.Nt = Nt;
        a.row0 = row0; a.tau = d_tau; a.cos = d_cos; a.phi = d_phi; a.m = d_m; a.dh = d_dh;
        a.z_mean = d_zm; a.partial = d_part;
        bool have_wg = false;
        launch_and_wait("online_fused", [&] {
            have_wg = fh::cuda::iqn::online_fused_prepare();
            fh::cuda::iqn::online_fused(a, blocks, 0);
        });
        /* The float64 reference of every output and partial sum. */
        std::vector<double> cosr(R * C), phir(R * Hq), mr(R * Hq), dhr(R * Hq), zmr(B, 0.0),
            dbm(Hq, 0.0), dwz(Hq, 0.0);
        double dbz = 0, loss = 0;
        for (size_t row = 0; row < R; ++row) {
            const size_t i = row / N, n = row % N;
            const float tf = fh::uniform24(fh::philox(seed, row0 + (uint32_t)i, (uint32_t)n,
                                                      (uint32_t)step, fh::PURPOSE_IQN_ONLINE).w[0]);
            const double tau = tf;
            for (int k = 0; k < C; ++k) cosr[row * C + k] = std::cos(M_PI * k * tau);
            for (int j = 0; j < Hq; ++j) {
                double s = 0;
                for (int k = 0; k < C; ++k) s += cosr[row * C + k] * Wphi[(size_t)j * C + k];
                phir[row * Hq + j] = s;
                mr[row * Hq + j] = psi[i * Hq + j] * silu(s + bphi[j]);
            }
            std::vector<double> pre(Hq);
            double z = bz[0];
            for (int j = 0; j < Hq; ++j) {
                double h = bm[j];
                for (int k = 0; k < Hq; ++k) h += mr[row * Hq + k] * Wm[(size_t)j * Hq + k];
                pre[j] = h;
                z += silu(h) * wz[j];
            }
            zmr[i] += z / N;
            double ls = 0, ds = 0;
            for (int m = 0; m < Nt; ++m) {
                const double u = r[i] + (double)gamma * (1.0 - done[i]) * zt[i * Nt + m] - z;
                const double w = std::fabs(tau - (u < 0 ? 1.0 : 0.0));
                ls += w * huber(u, kappa) / kappa;
                ds += w * dhuber(u, kappa) / kappa;
            }
            const double dz = -ds * scale;
            loss += ls;
            dbz += dz;
            for (int j = 0; j < Hq; ++j) {
                const double sg = 1.0 / (1.0 + std::exp(-pre[j]));
                const double v = dz * wz[j] * sg * (1.0 + pre[j] * (1.0 - sg));
                dhr[row * Hq + j] = v;
                dbm[j] += v;
                dwz[j] += dz * pre[j] * sg;
            }
        }
        /* One run's outputs against it: relative L2 errors of cos, φraw, m, dhpre, z_mean, the
         * partial sums of dbm and dw_z, db_z and the loss; τ exactly. */
        const char *names[] = {"cos", "phi", "m", "dh", "z_mean", "dbm", "dw_z", "db_z", "loss"};
        auto check = [&](const char *what, const std::vector<float> &g_tau,
                         const std::vector<float> *g_cos, const std::vector<float> &g_phi,
                         const std::vector<float> &g_m, const std::vector<float> &g_dh,
                         double bound) {
            const std::vector<float> g_zm = back(d_zm, B);
            const std::vector<double> g_part = back(d_part, (size_t)blocks * (2 * Hq + 2));
            size_t tau_bad = 0;
            for (size_t row = 0; row < R; ++row)
                tau_bad += g_tau[row] != fh::uniform24(fh::philox(seed, row0 + (uint32_t)(row / N),
                                                                  (uint32_t)(row % N),
                                                                  (uint32_t)step,
                                                                  fh::PURPOSE_IQN_ONLINE).w[0]);
            std::vector<float> p_dbm(Hq, 0.0f), p_dwz(Hq, 0.0f);
            double p_dbz = 0, p_loss = 0;
            for (int b = 0; b < blocks; ++b) {
                const double *row = g_part.data() + (size_t)b * (2 * Hq + 2);
                for (int j = 0; j < Hq; ++j) {
                    p_dbm[j] += (float)row[j];
                    p_dwz[j] += (float)row[Hq + j];
                }
                p_dbz += row[2 * Hq];
                p_loss += row[2 * Hq + 1];
            }
            const double e[] = {rel_l2(*g_cos, cosr), rel_l2(g_phi, phir), rel_l2(g_m, mr),
                                rel_l2(g_dh, dhr), rel_l2(g_zm, zmr), rel_l2(p_dbm, dbm),
                                rel_l2(p_dwz, dwz), std::fabs(p_dbz - dbz) / std::fabs(dbz),
                                std::fabs(p_loss - loss) / std::fabs(loss)};
            printf("[IQN] fused online kernel (%s) vs float64, B=%d N=%d, %d blocks: tau %zu of "
                   "%zu rows differ;", what, B, N, blocks, tau_bad, R);
            for (int k = 0; k < 9; ++k) printf(" %s %.2e", names[k], e[k]);
            printf("\n");
            if (tau_bad) fail_msg("tau: %zu rows differ from Philox purpose 2", tau_bad);
            /* NaN means an output left unwritten. */
            for (int k = 0; k < 9; ++k)
                if (!(e[k] <= bound))
                    fail_msg("fused online pass (%s), N=%d: %s rel. error %.3e", what, N,
                             names[k], e[k]);
        };
        /* TF32 operands (2^-11) in two chained products of K = 64 and 128, fast SiLU: ~1e-3. */
        const std::vector<float> cos_tf32 = back(d_cos, R * C);
        check("TF32", back(d_tau, R), &cos_tf32, back(d_phi, R * Hq), back(d_m, R * Hq),
              back(d_dh, R * Hq), 5e-3);
        using Buf = std::pair<float *, size_t>;
        const auto reset = [&] {
            for (const Buf &q : {Buf{d_tau, R}, Buf{d_cos, R * C}, Buf{d_phi, R * Hq},
                                 Buf{d_m, R * Hq}, Buf{d_dh, R * Hq}, Buf{d_zm, (size_t)B}})
                cudaMemcpy(q.first, std::vector<float>(q.second, NAN).data(), q.second * 4,
                           cudaMemcpyHostToDevice);
            const size_t nparts = (size_t)blocks * (2 * Hq + 2);
            cudaMemcpy(d_part, std::vector<double>(nparts, NAN).data(), nparts * 8,
                       cudaMemcpyHostToDevice);
        };
        /* The TF32 instance with h on the warpgroup products (the TF32 mode's on Hopper), where the
         * loaded code has them (sm_90a), within the same bound. */
        if (have_wg) {
            reset();
            a.wg = true;
            launch_and_wait("online_fused (warpgroup)",
                            [&] { fh::cuda::iqn::online_fused(a, blocks, 0); });
            a.wg = false;
            const std::vector<float> cos_wg = back(d_cos, R * C);
            check("TF32 warpgroup", back(d_tau, R), &cos_wg, back(d_phi, R * Hq),
                  back(d_m, R * Hq), back(d_dh, R * Hq), 5e-3);
        } else {
            printf("[IQN] fused online kernel (TF32 warpgroup): no sm_90a code, skipped\n");
        }

        /* FH_MATH_BF16's instance on the same inputs: bfloat16 products (2^-9 operand rounding,
         * about eight times TF32's errors: 1e-3 to 5e-3 on the H200; a misplaced fragment gives
         * O(1)) and m and dhpre stored as bfloat16; the float32 outputs and the partial rows
         * reset to NaN first, and m and dh's must stay so. The cosine features (float32 in
         * either instance) do not depend on the products: they must be the TF32 run's, bit for
         * bit. */
        uint16_t *d_m16 = dev(std::vector<uint16_t>(R * Hq, 0xffff)),
                 *d_dh16 = dev(std::vector<uint16_t>(R * Hq, 0xffff));
        reset();
        a.m16 = reinterpret_cast<__nv_bfloat16 *>(d_m16);
        a.dh16 = reinterpret_cast<__nv_bfloat16 *>(d_dh16);
        launch_and_wait("online_fused (bfloat16)",
                        [&] { fh::cuda::iqn::online_fused(a, blocks, 0); });
        const std::vector<float> cos_b16 = back(d_cos, R * C);
        check("BF16", back(d_tau, R), &cos_b16, back(d_phi, R * Hq), widen(back(d_m16, R * Hq)),
              widen(back(d_dh16, R * Hq)), 2e-2);
        const bool untouched = all_nan(back(d_m, R * Hq)) && all_nan(back(d_dh, R * Hq));
        const bool same_cos =
            memcmp(cos_b16.data(), cos_tf32.data(), cos_b16.size() * sizeof(float)) == 0;
        printf("[IQN] fused online kernel (BF16), N=%d: float32 buffers of m, dh %s; cos %s the "
               "TF32 run's\n", N, untouched ? "untouched" : "WRITTEN",
               same_cos ? "bitwise equal to" : "DIFFERENT from");
        if (!untouched) fail_msg("fused online pass (BF16), N=%d: wrote the float32 buffers", N);
        if (!same_cos) fail_msg("fused online pass (BF16), N=%d: cos differs from TF32's", N);
        for (void *p : {(void *)d_m16, (void *)d_dh16}) cudaFree(p);
        for (void *p : {(void *)d_psi, (void *)d_Wphi, (void *)d_bphi, (void *)d_Wm, (void *)d_bm,
                        (void *)d_wz, (void *)d_bz, (void *)d_zt, (void *)d_r, (void *)d_done,
                        (void *)d_tau, (void *)d_cos, (void *)d_phi, (void *)d_m, (void *)d_dh,
                        (void *)d_zm, (void *)d_part, (void *)d_step})
            cudaFree(p);
    }
}

void test_backward_kernel_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const int Hq = 128, C = 64, B = 333;
    for (int N : {8, 4, 16, 1}) {
        const size_t R = (size_t)B * N;
        Normal vec(29 + N);
        const std::vector<float> dh = vec(R * Hq, 1e-3f), Wm = vec((size_t)Hq * Hq, 0.12f),
                                 bphi = vec(Hq, 0.3f), psi = vec((size_t)B * Hq, 0.8f),
                                 psi_pre = vec((size_t)B * Hq, 1.0f),
                                 Wphi = vec((size_t)Hq * C, 0.25f), bpsi = vec(Hq, 0.3f);
        std::vector<float> tau(R);
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        for (float &t : tau) t = unit(vec.rng);
        /* φraw = cos(π k τ) Wφᵀ in float64: the kernel recomputes it as the online pass does. */
        std::vector<double> phi(R * Hq);
        for (size_t row = 0; row < R; ++row)
            for (int j = 0; j < Hq; ++j) {
                double v = 0.0;
                for (int k = 0; k < C; ++k)
                    v += std::cos(M_PI * k * (double)tau[row]) * Wphi[(size_t)j * C + k];
                phi[row * Hq + j] = v;
            }
        const std::vector<float> nan_rh(R * Hq, NAN);
        const int blocks = fh::cuda::iqn::fused_blocks(R);
        float *d_dh = dev(dh), *d_Wm = dev(Wm), *d_bphi = dev(bphi), *d_psi = dev(psi),
              *d_pp = dev(psi_pre), *d_bpsi = dev(bpsi), *d_Wphi = dev(Wphi), *d_tau = dev(tau),
              *d_phi = dev(nan_rh), *d_dpsi = dev(std::vector<float>((size_t)B * Hq, NAN));
        double *d_part = dev(std::vector<double>((size_t)blocks * 2 * Hq, NAN));
        /* psi_pre without its bias, as bias_silu leaves it: the kernel adds bpsi. */
        const fh::cuda::iqn::BackwardArgs a{d_dh,  d_Wm,  d_bphi, d_Wphi, d_tau, d_psi, d_pp,
                                            d_bpsi, d_phi, d_dpsi, B,     N,     d_part};
        int rows = 0;  /* the partial rows the kernel wrote (at most `blocks`) */
        launch_and_wait("backward_fused", [&] {
            fh::cuda::iqn::backward_fused_prepare();
            rows = fh::cuda::iqn::backward_fused(a, blocks, 0);
        });
        /* The float64 chain rule from dhpre values dhv, and one run's outputs against it. */
        const char *names[] = {"dphi_pre", "dpsi_pre", "dbphi", "dbpsi"};
        auto check = [&](const char *what, const std::vector<float> &dhv,
                         const std::vector<float> &g_dphi, int rows, double bound) {
            const std::vector<float> g_dpsi = back(d_dpsi, (size_t)B * Hq);
            const std::vector<double> g_part = back(d_part, (size_t)blocks * 2 * Hq);
            std::vector<double> dphi(R * Hq), dpsi((size_t)B * Hq, 0.0), dbphi(Hq, 0.0),
                dbpsi(Hq, 0.0);
            for (size_t row = 0; row < R; ++row) {
                const size_t i = row / N;
                for (int k = 0; k < Hq; ++k) {
                    double dm = 0;
                    for (int j = 0; j < Hq; ++j)
                        dm += (double)dhv[row * Hq + j] * Wm[(size_t)j * Hq + k];
                    const double z = phi[row * Hq + k] + bphi[k],
                                 sg = 1.0 / (1.0 + std::exp(-z));
                    const double v = dm * psi[i * Hq + k] * sg * (1.0 + z * (1.0 - sg));
                    dphi[row * Hq + k] = v;
                    dbphi[k] += v;
                    dpsi[i * Hq + k] += dm * z * sg;  /* Σ_n dm φ, times SiLU'(ψpre) below */
                }
            }
            for (int i = 0; i < B; ++i)
                for (int k = 0; k < Hq; ++k) {
                    const double z = (double)psi_pre[(size_t)i * Hq + k] + bpsi[k],
                                 sg = 1.0 / (1.0 + std::exp(-z));
                    dpsi[(size_t)i * Hq + k] *= sg * (1.0 + z * (1.0 - sg));
                    dbpsi[k] += dpsi[(size_t)i * Hq + k];
                }
            std::vector<float> p_bphi(Hq, 0.0f), p_bpsi(Hq, 0.0f);
            if (rows < 1 || rows > blocks)
                fail_msg("backward_fused (%s) wrote %d partial rows (1..%d)", what, rows, blocks);
            for (int b = 0; b < rows; ++b)
                for (int k = 0; k < Hq; ++k) {
                    p_bphi[k] += (float)g_part[(size_t)b * 2 * Hq + k];
                    p_bpsi[k] += (float)g_part[(size_t)b * 2 * Hq + Hq + k];
                }
            const double e[] = {rel_l2(g_dphi, dphi), rel_l2(g_dpsi, dpsi),
                                rel_l2(p_bphi, dbphi), rel_l2(p_bpsi, dbpsi)};
            printf("[IQN] fused backward kernel (%s) vs float64, B=%d N=%d, %d blocks:", what, B,
                   N, rows);
            for (int k = 0; k < 4; ++k) printf(" %s %.2e", names[k], e[k]);
            printf("\n");
            /* NaN means an output left unwritten. */
            for (int k = 0; k < 4; ++k)
                if (!(e[k] <= bound))
                    fail_msg("fused backward (%s), N=%d: %s rel. error %.3e", what, N, names[k],
                             e[k]);
        };
        /* dm = dhpre Wm with TF32 operands (K = 128): ~5e-4. */
        check("TF32", dh, back(d_phi, R * Hq), rows, 5e-3);

        /* FH_MATH_BF16's instance: dhpre as bfloat16 (the reference takes the same rounded
         * values), dm on bfloat16 products (Wm rounded to 2^-9: ~2e-3; a misplaced fragment
         * gives O(1)), dφpre to its own buffer as bfloat16 and dψpre stored as float32 holding
         * bfloat16 values; the float32 dφpre buffer must stay untouched. */
        std::vector<float> dh_r(R * Hq);
        std::vector<uint16_t> dh16(R * Hq);
        for (size_t k = 0; k < dh_r.size(); ++k) {
            const __nv_bfloat16 h = __float2bfloat16_rn(dh[k]);
            dh_r[k] = __bfloat162float(h);
            memcpy(&dh16[k], &h, 2);
        }
        cudaMemcpy(d_phi, nan_rh.data(), nan_rh.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_dpsi, std::vector<float>((size_t)B * Hq, NAN).data(), (size_t)B * Hq * 4,
                   cudaMemcpyHostToDevice);
        cudaMemcpy(d_part, std::vector<double>((size_t)blocks * 2 * Hq, NAN).data(),
                   (size_t)blocks * 2 * Hq * 8, cudaMemcpyHostToDevice);
        uint16_t *d_dh16 = dev(dh16), *d_dphi16 = dev(std::vector<uint16_t>(R * Hq, 0xffff));
        fh::cuda::iqn::BackwardArgs a16 = a;
        a16.dh = nullptr;  /* must not be read */
        a16.dh16 = reinterpret_cast<const __nv_bfloat16 *>(d_dh16);
        a16.dphi16 = reinterpret_cast<__nv_bfloat16 *>(d_dphi16);
        int rows16 = 0;
        launch_and_wait("backward_fused (bfloat16)",
                        [&] { rows16 = fh::cuda::iqn::backward_fused(a16, blocks, 0); });
        check("BF16", dh_r, widen(back(d_dphi16, R * Hq)), rows16, 2e-2);
        const std::vector<float> g_dpsi16 = back(d_dpsi, (size_t)B * Hq);
        size_t not_bf16 = 0;
        for (float x : g_dpsi16) {  /* a bfloat16 value has 16 zero low bits */
            uint32_t u;
            memcpy(&u, &x, sizeof u);
            not_bf16 += (u & 0xffffu) != 0;
        }
        const bool phi_kept = all_nan(back(d_phi, R * Hq));
        printf("[IQN] fused backward kernel (BF16), N=%d: dpsi_pre %zu of %zu entries not "
               "bfloat16 values; phi %s\n", N, not_bf16, g_dpsi16.size(),
               phi_kept ? "untouched" : "OVERWRITTEN");
        if (not_bf16 || !phi_kept) fail_msg("fused backward (BF16), N=%d", N);
        for (void *p : {(void *)d_dh16, (void *)d_dphi16}) cudaFree(p);
        for (void *p : {(void *)d_dh, (void *)d_Wm, (void *)d_bphi, (void *)d_psi, (void *)d_pp,
                        (void *)d_bpsi, (void *)d_Wphi, (void *)d_tau, (void *)d_phi,
                        (void *)d_dpsi, (void *)d_part})
            cudaFree(p);
    }
}

/* dWφ = dφpreᵀ cos(π k τ) by cuda/iqn_dwphi.cu against float64, at row counts that leave the
 * last block's last stage partly filled (197, 8037) and that give the blocks several stages
 * (40000: 209 blocks of three 64-row stages; 131072 = the default batch's rows: 256 blocks of
 * eight); each run twice, bit for bit the same:
 * the TF32 instance (TF32's path with the fused backward) on float32 dφpre, and the bfloat16
 * instance (FH_MATH_BF16's) on the same values rounded to
 * bfloat16, against the float64 sums of the rounded values. */
void test_dwphi_kernel_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const int Hq = 128, C = 64;
    for (size_t R : {(size_t)197, (size_t)8037, (size_t)40000, (size_t)131072}) {
        Normal vec(41 + (unsigned)R);
        const std::vector<float> dphi = vec(R * Hq, 1e-3f);
        std::vector<float> tau(R), dphi_r(R * Hq);
        std::vector<uint16_t> dphi16(R * Hq);
        for (size_t k = 0; k < dphi.size(); ++k) {
            const __nv_bfloat16 h = __float2bfloat16_rn(dphi[k]);
            dphi_r[k] = __bfloat162float(h);
            memcpy(&dphi16[k], &h, 2);
        }
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        for (float &t : tau) t = unit(vec.rng);
        std::vector<double> cs(R * C);
        for (size_t r = 0; r < R; ++r)
            for (int k = 0; k < C; ++k) cs[r * C + k] = std::cos(M_PI * k * (double)tau[r]);
        auto reference = [&](const std::vector<float> &a) {
            std::vector<double> ref((size_t)Hq * C, 0.0);
            for (size_t r = 0; r < R; ++r)
                for (int j = 0; j < Hq; ++j) {
                    const double v = a[r * Hq + j];
                    for (int k = 0; k < C; ++k) ref[(size_t)j * C + k] += v * cs[r * C + k];
                }
            return ref;
        };
        const size_t pf = fh::iqn_dwphi_partial_floats(R);
        const std::vector<float> nan_out((size_t)Hq * C, NAN);
        float *d_dphi = dev(dphi), *d_tau = dev(tau),
              *d_part = dev(std::vector<float>(pf, NAN)), *d_out = dev(nan_out);
        uint16_t *d_dphi16 = dev(dphi16);
        for (const bool b16 : {false, true}) {
            std::vector<float> g[2];
            for (int run = 0; run < 2; ++run) {
                cudaMemcpy(d_out, nan_out.data(), nan_out.size() * 4, cudaMemcpyHostToDevice);
                launch_and_wait("dwphi", [&] {
                    fh::cuda::iqn::dwphi_prepare();
                    if (b16)
                        fh::cuda::iqn::dwphi(reinterpret_cast<const __nv_bfloat16 *>(d_dphi16),
                                             d_tau, R, d_part, pf, d_out, 0);
                    else
                        fh::cuda::iqn::dwphi(d_dphi, d_tau, R, d_part, pf, d_out, 0);
                });
                g[run] = back(d_out, (size_t)Hq * C);
            }
            const double e = rel_l2(g[0], reference(b16 ? dphi_r : dphi));
            const bool same = memcmp(g[0].data(), g[1].data(), g[0].size() * sizeof(float)) == 0;
            printf("[IQN] dWphi kernel (%s) vs float64, R=%zu, %llu blocks: rel. error %.2e, "
                   "second run %s\n", b16 ? "BF16" : "TF32", R,
                   (unsigned long long)fh::iqn_wgrad_blocks(R, fh::kIqnDwphiMaxBlocks), e,
                   same ? "bitwise equal" : "DIFFERENT");
            /* The features rounded to TF32 (2^-11): ~3e-4; to bfloat16 (2^-9): ~2e-3. A
             * misplaced fragment or row gives O(1), NaN an entry left unwritten. */
            if (!(e <= (b16 ? 2e-2 : 5e-3)))
                fail_msg("dWphi kernel (%s), R=%zu: rel. error %.3e", b16 ? "BF16" : "TF32", R, e);
            if (!same) fail_msg("dWphi kernel, R=%zu: two runs differ", R);
        }
        for (void *p : {(void *)d_dphi, (void *)d_tau, (void *)d_part, (void *)d_out,
                        (void *)d_dphi16})
            cudaFree(p);
    }
}
#endif

double iqn_err(fh_pipeline *a, fh_pipeline *b, std::string &worst) {
    return max_rel_err(a, b, {"iqn.Wpsi", "iqn.bpsi", "iqn.Wphi", "iqn.bphi", "iqn.Wm", "iqn.bm",
                              "iqn.w_z", "iqn.b_z", "ensemble_mean"},
                       worst);
}

void test_fused_paths_agree(void **) {
    if (!fh_test_have_cuda()) skip();
    struct Case {
        uint32_t B, N, Nt;
        fh_math_mode math;
    };
    /* 1000: a last tile of rows only partly filled; N = 16 with N' = 5: another z_mean shape;
     * 16384: ψ̄ and ψ on linear_silu's fused kernel (its 128-tile gate), the unfused level's
     * ψ GEMMs beside them.
     * BF16: the fused path's bfloat16 operands (the online pass's cos, m, dhpre, the backward's
     * dφpre, in halves of the learner's float32 buffers) against the other levels, which stage
     * the same GEMMs' operands. */
    for (const Case k : {Case{1000, 8, 8, FH_MATH_TF32}, Case{4096, 8, 8, FH_MATH_TF32},
                         Case{1000, 16, 5, FH_MATH_TF32}, Case{4096, 8, 8, FH_MATH_BF16},
                         Case{1000, 16, 5, FH_MATH_BF16}, Case{16384, 8, 8, FH_MATH_TF32},
                         Case{16384, 8, 8, FH_MATH_BF16}}) {
        fh_config base = default_config(k.B);
        base.iqn_n = k.N;
        base.iqn_n_target = k.Nt;
        fh_config cc = base;
        cc.backend = FH_BACKEND_CPU;
        fh_pipeline *cpu = make(cc);
        setenv("FOXHUNT_IQN_KERNELS", "unfused", 1);
        fh_pipeline *unfused = make(cuda_config(base, k.math));
        setenv("FOXHUNT_IQN_KERNELS", "target", 1);
        fh_pipeline *target = make(cuda_config(base, k.math));
        setenv("FOXHUNT_IQN_KERNELS", "online", 1);
        fh_pipeline *online = make(cuda_config(base, k.math));
        unsetenv("FOXHUNT_IQN_KERNELS");
        fh_pipeline *fused = make(cuda_config(base, k.math));
        Batches bt(base, 77, 5);
        for (int s = 0; s < 5; ++s) {
            for (fh_pipeline *p : {cpu, unfused, target, online, fused}) step(p, bt.b[(size_t)s]);
            if (s != 0 && s != 4) continue;
            fh_metrics mf;
            mf.struct_size = sizeof(fh_metrics);
            fh_pipeline_metrics(fused, &mf);
            printf("[IQN] %s B=%u N=%u N'=%u after %d step%s, fused against:",
                   k.math == FH_MATH_BF16 ? "BF16" : "TF32", k.B, k.N, k.Nt, s + 1, s ? "s" : "");
            const char *names[] = {"unfused", "target", "online", "CPU"};
            fh_pipeline *others[] = {unfused, target, online, cpu};
            for (int o = 0; o < 4; ++o) {
                fh_metrics mo;
                mo.struct_size = sizeof(fh_metrics);
                fh_pipeline_metrics(others[o], &mo);
                std::string w;
                const double e = iqn_err(fused, others[o], w);
                const double l = std::fabs(mf.iqn_loss - mo.iqn_loss) / std::fabs(mo.iqn_loss);
                printf(" %s %.3e (%s), loss %.3e;", names[o], e, w.c_str(), l);
                /* TF32 products (2^-11 operand rounding) in every path: the test_cuda_vs_cpu
                 * bound; BF16's the same (its IQN tensors, bfloat16 products and operands, stay
                 * well inside it; a misplaced operand gives O(1)). */
                if (!(e <= 5e-2 && l <= 5e-2))
                    fail_msg("fused IQN passes: math %d B=%u N=%u step %d against %s: %.3e (%s), "
                             "loss %.3e", (int)k.math, k.B, k.N, s + 1, names[o], e, w.c_str(), l);
            }
            printf("\n");
        }
        for (fh_pipeline *p : {cpu, unfused, target, online, fused}) fh_pipeline_destroy(p);
    }
}

}  // namespace

int main(void) {
    /* FOXHUNT_TEST_FILTER=pattern (cmocka's * and ? wildcards) runs the matching tests only: the
     * kernel tests alone under compute-sanitizer (bench/run_device_quick.sh iqn-san). */
    if (const char *f = getenv("FOXHUNT_TEST_FILTER")) cmocka_set_test_filter(f);
    const struct CMUnitTest tests[] = {
#if FOXHUNT_HAVE_CUDA
        cmocka_unit_test(test_target_kernel_vs_float64),
        cmocka_unit_test(test_online_kernel_vs_float64),
        cmocka_unit_test(test_backward_kernel_vs_float64),
        cmocka_unit_test(test_dwphi_kernel_vs_float64),
#endif
        cmocka_unit_test(test_fused_paths_agree)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
