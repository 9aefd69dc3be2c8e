/* The attention learner's factored reward head (cuda/attention_head_factored.cu) against
 * float64, kernel by kernel:
 * - k_head_fac_comp: C1 = Wr1 Wo and C2 = Wr1 M (M = [Wt / T | Wg / T | ebar / T + bo]), float64
 *   sums rounded once to float32: within 2^-24 of each value (plus 1e-15 of the terms' sum).
 * - k_attn_head_fac at B = 1000 (a partly filled last tile; once 8 tiles on 3 blocks) and 16384,
 *   with ā and aug columns of one matrix, aug 64 columns after ā and rows 2·64 + na rounded up
 *   to 4 floats apart (the learner's stride and offset; its pool columns before ā are left out),
 *   na = 9 (the default config), 32 (the most it stages) and 1: h = C2 aug (float32 on the CUDA
 *   cores) + ā C1ᵀ (operands rounded to TF32 or bfloat16 as the kernel does, so the reference's
 *   products are exact) within 8e-6 (twice γ_64, for 64 + na terms within γ_96) of the terms'
 *   magnitudes; the head, dh and its sums as test_cuda_attention_head checks them
 *   (attention_head_ref.hpp); dā = dh C1 from the kernel's own dh, rounded, within the same
 *   share of its terms. dh is a bfloat16 value in BF16 mode (checked), dā float32 in both.
 *   Rows past the batch stay untouched (sentinels), and so does the input matrix.
 * - k_head_fac_grads: from G = dhᵀ [ā | aug], dWr1 = G_aug Mᵀ + G_ā Woᵀ, dWo = Wr1ᵀ G_ā and
 *   R = Wr1ᵀ G_aug (float64 sums, rounded once) into their blocks of the weight-gradient
 *   product, its other elements untouched.
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/attention_head.hpp"
#include "../cuda/attention_paths.hpp"
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
#include <cstdio>
#include <random>
#include <vector>

#include "attention_head_ref.hpp"
#include "operand_round.hpp"
#include "test_cuda_util.h"

#if FOXHUNT_HAVE_CUDA
#include "cuda_dev.hpp"
#endif

namespace {

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;
using cuda_test::dev_of;
using head_ref::dot;
using head_ref::kAcc;
using head_ref::kPartW;
using head_ref::Reach;
using head_ref::W;
using operand_round::bf16_rne;
using operand_round::tf32;

constexpr float kSentinel = -12345.0f;
constexpr double kRound = 0x1p-24;  // float32's unit roundoff

float *fp(const Dev &d) { return static_cast<float *>(d.p); }

std::vector<float> uniform(size_t n, float scale, std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float &x : v) x = scale * u(rng);
    return v;
}

// The geometry fields the composites and gradients read (td + G + 1 = na, T tokens, ebar at
// c_eb in the composite buffer).
fh::cuda::attn::Geom geom(int td, int G, int T) {
    fh::cuda::attn::Geom g{};
    g.td = td; g.G = G; g.na = td + G + 1; g.T = T; g.d = W; g.hh = W;
    g.c_eb = 5;  // any offset: the kernels read ebar there
    g.c_total = g.c_eb + W;
    return g;
}

// The learner's weights and M [W, na] (float64) for a geometry.
struct Weights {
    std::vector<float> Wo, Wr1, Wt, Wg, bo, comp;
    std::vector<double> M;
    Weights(const fh::cuda::attn::Geom &g, std::mt19937 &rng) {
        Wo = uniform(W * W, 0.125f, rng);
        Wr1 = uniform(W * W, 0.125f, rng);
        Wt = uniform((size_t)W * g.td, 0.5f, rng);
        Wg = uniform((size_t)W * std::max(g.G, 1), 0.5f, rng);
        bo = uniform(W, 0.1f, rng);
        comp = uniform(g.c_total, 1.0f, rng);
        M.resize((size_t)W * g.na);
        for (int x = 0; x < W; ++x)
            for (int f = 0; f < g.na; ++f)
                M[(size_t)x * g.na + f] =
                    f < g.td ? (double)Wt[x * g.td + f] / g.T
                    : f < g.td + g.G ? (double)Wg[x * g.G + f - g.td] / g.T
                                     : (double)comp[g.c_eb + x] / g.T + bo[x];
    }
};

// Their device copies, freed with the object.
struct DevWeights {
    Dev Wo, Wr1, Wt, Wg, bo, comp;
    explicit DevWeights(const Weights &w)
        : Wo(dev_of(w.Wo)), Wr1(dev_of(w.Wr1)), Wt(dev_of(w.Wt)), Wg(dev_of(w.Wg)),
          bo(dev_of(w.bo)), comp(dev_of(w.comp)) {}
};

// The geometries of the composites' and gradients' tests: the default config's (td = 4, G = 4,
// 9 tokens: na = 9) and the widest aug the head stages (na = 32).
const fh::cuda::attn::Geom kGeoms[] = {geom(4, 4, 9), geom(16, 15, 17)};

void test_composites(void **) {
    if (!fh_test_have_cuda()) skip();
    for (const fh::cuda::attn::Geom &g : kGeoms) {
        std::mt19937 rng(21 + g.na);
        const Weights w(g, rng);
        const DevWeights dw(w);
        const Dev &dWo = dw.Wo, &dWr1 = dw.Wr1, &dWt = dw.Wt, &dWg = dw.Wg, &dbo = dw.bo,
                  &dcomp = dw.comp;
        const Dev dC1 = dev_of(std::vector<float>(W * W, kSentinel));
        const Dev dC2 = dev_of(std::vector<float>((size_t)W * g.na, kSentinel));
        fh::cuda::attn::head_factored_composites(g, fp(dWo), fp(dWr1), fp(dWt), fp(dWg), fp(dbo),
                                                 fp(dcomp), fp(dC1), fp(dC2), 0);
        cuda_test::cuda_ok(cudaDeviceSynchronize(), "k_head_fac_comp");
        const std::vector<float> C1 = dC1.get<float>(), C2 = dC2.get<float>();
        Reach r1{"C1"}, r2{"C2"};
        for (int m = 0; m < W; ++m) {
            for (int j = 0; j < W; ++j) {
                double s = 0.0, mag = 0.0;
                dot(&w.Wr1[m * W], 1, &w.Wo[j], W, W, s, mag);
                r1.add(C1[m * W + j], s, kRound * std::fabs(s) + 1e-15 * mag + 1e-30,
                       (size_t)m * W + j);
            }
            for (int f = 0; f < g.na; ++f) {
                double s = 0.0, mag = 0.0;
                dot(&w.Wr1[m * W], 1, &w.M[f], g.na, W, s, mag);
                r2.add(C2[(size_t)m * g.na + f], s, kRound * std::fabs(s) + 1e-15 * mag + 1e-30,
                       (size_t)m * g.na + f);
            }
        }
        printf("[ATTN_HEAD_FAC] composites na = %d: largest share of the bound C1 %.3f, C2 %.3f\n",
               g.na, r1.worst, r2.worst);
    }
}

// The kernel at batch B with na aug columns; blocks_req > 0: that grid, else the kernel's own.
void check_head(int B, unsigned seed, int na, int blocks_req, bool bf16) {
    const auto rnd = [bf16](float x) { return bf16 ? bf16_rne(x) : tf32(x); };
    const double st = bf16 ? std::ldexp(1.0, -8) : 0.0;
    // [ā | aug | 0] rows as the learner lays them out (attention_batch_cols: 76 at na = 9).
    const int ld = (W + na + 3) / 4 * 4;
    std::mt19937 rng(seed);
    std::vector<float> in((size_t)B * ld, kSentinel);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < B; ++i) {
        for (int k = 0; k < W; ++k) in[(size_t)i * ld + k] = 0.5f * u(rng);
        for (int f = 0; f < na; ++f)  // aug: token sums, the goal, and a constant 1 last
            in[(size_t)i * ld + W + f] = f == na - 1 ? 1.0f : 2.0f * u(rng);
    }
    const std::vector<float> C1 = uniform(W * W, 0.1f, rng);
    const std::vector<float> C2 = uniform((size_t)W * na, 0.1f, rng);
    const std::vector<float> br1 = uniform(W, 0.5f, rng), wr2 = uniform(W, 0.5f, rng);
    const std::vector<float> br2{0.1f}, r = uniform(B, 1.0f, rng);
    const int rows = B + 128;
    const std::vector<float> sent((size_t)rows * W, kSentinel);
    const Dev d_in = dev_of(in), d_C1 = dev_of(C1), d_C2 = dev_of(C2), d_br1 = dev_of(br1);
    const Dev d_wr2 = dev_of(wr2), d_br2 = dev_of(br2), d_r = dev_of(r);
    const Dev d_dh = dev_of(sent), d_da = dev_of(sent);
    const int blocks = blocks_req > 0 ? blocks_req : fh::cuda::attn::head_fused_blocks(B);
    const Dev d_part((size_t)blocks * kPartW * sizeof(double));
    fh::cuda::attn::HeadFactoredArgs a{fp(d_in), fp(d_in) + W, fp(d_C1), fp(d_C2), fp(d_br1),
                                       fp(d_wr2), fp(d_br2), fp(d_r), B, na, (float)B,
                                       fp(d_dh), fp(d_da), static_cast<double *>(d_part.p)};
    a.bf16 = bf16;
    a.ld_in = ld;
    try {
        fh::cuda::attn::head_factored(a, blocks, 0);
    } catch (...) {
        fail_msg("head_factored threw");
    }
    cuda_test::cuda_ok(cudaDeviceSynchronize(), "k_attn_head_fac");
    if (d_in.get<float>() != in) fail_msg("B = %d: the kernel wrote into its input", B);
    const std::vector<float> dh = d_dh.get<float>(), da = d_da.get<float>();
    const std::vector<double> part = d_part.get<double>();
    for (size_t e = (size_t)B * W; e < (size_t)rows * W; ++e)
        if (dh[e] != kSentinel || da[e] != kSentinel)
            fail_msg("B = %d: element %zu past the batch was written", B, e);
    if (bf16)
        for (size_t e = 0; e < (size_t)B * W; ++e)
            if (dh[e] != bf16_rne(dh[e]))
                fail_msg("B = %d: dh[%zu] (%.9g) is not a bfloat16 value", B, e, (double)dh[e]);

    Reach rd{"dh"}, ra{"dabar"}, rs{"sums"};
    head_ref::Sums sums;
    for (int i = 0; i < B; ++i) {
        const float *ai = &in[(size_t)i * ld], *gi = ai + W;
        double h[W], hb[W];
        for (int j = 0; j < W; ++j) {
            double acc = 0.0, mag = 0.0;
            dot(&C2[(size_t)j * na], 1, gi, 1, na, acc, mag);
            dot(ai, 1, &C1[j * W], 1, W, acc, mag, rnd);
            h[j] = acc;
            hb[j] = kAcc * mag + 1e-6 * std::fabs(acc);
        }
        head_ref::check_row(h, hb, br1.data(), wr2.data(), br2[0], r[i], B, st,
                            &dh[(size_t)i * W], (size_t)i * W, rd, sums);
        for (int n = 0; n < W; ++n) {  // dā = dh C1 from the kernel's dh
            double acc = 0.0, mag = 0.0;
            dot(&dh[(size_t)i * W], 1, &C1[n], W, W, acc, mag, rnd);
            ra.add(da[(size_t)i * W + n], acc, kAcc * mag + 1e-30, (size_t)i * W + n);
        }
    }
    sums.check(part, blocks, rs);
    printf("[ATTN_HEAD_FAC] %s B = %d, na = %d, %d blocks: largest share of the bound: dh %.3f, "
           "dabar %.3f, sums %.3f\n", bf16 ? "BF16" : "TF32", B, na, blocks, rd.worst, ra.worst,
           rs.worst);
}

void test_head_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    check_head(1000, 1, 9, 0, false);
    check_head(1000, 2, 9, 3, false);  // 8 tiles on 3 blocks: the sums carried across tiles
    check_head(16384, 3, 9, 0, false);
    check_head(1000, 4, 32, 0, false);
    check_head(1000, 5, 1, 0, false);
    check_head(1000, 6, 9, 0, true);
    check_head(16384, 7, 9, 0, true);
    check_head(1000, 8, 32, 3, true);
}

void test_grads(void **) {
    if (!fh_test_have_cuda()) skip();
    for (const fh::cuda::attn::Geom &g : kGeoms) {
        std::mt19937 rng(31 + g.na);
        const Weights w(g, rng);
        const int ldG = W + g.na + 3, ldP = 2 * W + g.na + 5, rowsP = 2 * W;
        const std::vector<float> G = uniform((size_t)W * ldG, 1.0f, rng);
        const DevWeights dw(w);
        const Dev &dWo = dw.Wo, &dWr1 = dw.Wr1, &dWt = dw.Wt, &dWg = dw.Wg, &dbo = dw.bo,
                  &dcomp = dw.comp, dG = dev_of(G);
        const Dev dP = dev_of(std::vector<float>((size_t)rowsP * ldP, kSentinel));
        fh::cuda::attn::head_factored_grads(g, fp(dG), ldG, fp(dWo), fp(dWr1), fp(dWt), fp(dWg),
                                            fp(dbo), fp(dcomp), fp(dP), ldP, 0);
        cuda_test::cuda_ok(cudaDeviceSynchronize(), "k_head_fac_grads");
        const std::vector<float> P = dP.get<float>();
        std::vector<char> written((size_t)rowsP * ldP, 0);
        Reach rw{"dWr1"}, ro{"dWo | R"};
        // dWr1[m][x] = Σ_f G_aug[m][f] M[x][f] + Σ_j G_ā[m][j] Wo[x][j]
        for (int m = 0; m < W; ++m)
            for (int x = 0; x < W; ++x) {
                double s = 0.0, mag = 0.0;
                dot(&G[(size_t)m * ldG + W], 1, &w.M[(size_t)x * g.na], 1, g.na, s, mag);
                dot(&G[(size_t)m * ldG], 1, &w.Wo[x * W], 1, W, s, mag);
                const size_t at = (size_t)m * ldP + x;
                rw.add(P[at], s, kRound * std::fabs(s) + 1e-15 * mag + 1e-30, at);
                written[at] = 1;
            }
        for (int x = 0; x < W; ++x)  // [dWo | R][x][c] = Σ_m Wr1[m][x] G[m][c]
            for (int c = 0; c < W + g.na; ++c) {
                double s = 0.0, mag = 0.0;
                dot(&w.Wr1[x], W, &G[c], ldG, W, s, mag);
                const size_t at = (size_t)(W + x) * ldP + W + c;
                ro.add(P[at], s, kRound * std::fabs(s) + 1e-15 * mag + 1e-30, at);
                written[at] = 1;
            }
        for (size_t e = 0; e < P.size(); ++e)
            if (!written[e] && P[e] != kSentinel)
                fail_msg("na = %d: product element %zu outside the three blocks written", g.na, e);
        printf("[ATTN_HEAD_FAC] gradients na = %d: largest share of the bound dWr1 %.3f, "
               "dWo | R %.3f\n", g.na, rw.worst, ro.worst);
    }
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_composites),
                                       cmocka_unit_test(test_head_vs_float64),
                                       cmocka_unit_test(test_grads)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
