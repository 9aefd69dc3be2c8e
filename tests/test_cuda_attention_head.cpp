/* The attention learner's fused output projection and reward head (cuda/attention_head.cu)
 * against float64, stage by stage, at B = 1000 (a partly filled last tile) and 16384:
 * - pool = pool_in + ā Woᵀ: the reference takes the operands rounded to TF32 as the kernel does
 *   (to nearest, operand_round::tf32), so its products are exact in float64 and only the
 *   float32 accumulation differs: within 8e-6 (twice γ_64) of |pool_in| + Σ_k |ā_k Wo_nk| per
 *   element (rounding the operands by truncation instead would be off by ~2^-11 of each).
 * - dh and the head's sums from the kernel's own pool (rounded as its next product reads it):
 *   h's accumulation error (the same bound) carried through r̂ = SiLU(h + br1)·w_r2 + b_r2,
 *   dr = 2 (r̂ − r̃) / B and dh = dr w_r2 ⊙ SiLU'(h + br1) with |SiLU''| ≤ 0.5 and |SiLU'| ≤ 1.1,
 *   plus 1e-5 of each result for the float32 head arithmetic; the sums dbr1, dw_r2, db_r2 and
 *   Σ (r̂ − r̃)² (the kernel's partial rows summed in float64) within the sums of those bounds.
 * - dpool = dh Wr1 from the kernel's own dh, rounded: the pool bound again.
 * Rows past the batch stay untouched (sentinels); the weights may sit off 16-byte boundaries;
 * one case runs 8 tiles on 3 blocks; two (TF32, BF16) have ā and pool rows 140 floats apart
 * and dh and dpool rows 128 apart (the learner's layout: columns of wider matrices), whose other
 * columns stay untouched.
 * The BF16 instance (FH_MATH_BF16) the same way with the operands rounded to bfloat16 (round to
 * nearest even) in the reference, and pool, dh and dpool, which it stores as bfloat16 values
 * (checked: each float is its own bfloat16 rounding), each within a further 2^-8 of its
 * magnitude (bfloat16's unit roundoff: 8 significant bits) of the reference. Skipped without a
 * GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/attention_head.hpp"
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
using operand_round::bf16_rne;
using operand_round::tf32;

using head_ref::kPartW;
using head_ref::W;
constexpr float kSentinel = -12345.0f;

using head_ref::kAcc;
using head_ref::Reach;

// `shift` floats before each weight on the device: 1 puts Wo and Wr1 off 16-byte boundaries, as
// the learner's layout may at other configs with these widths. `blocks` > 0: that grid, so that
// a block walks several tiles; else the kernel's own.
// ld_in, ld_out: the row strides of ā and pool, and of dh and dpool (columns past W: sentinels).
void check(int B, unsigned seed, int shift, int blocks_req, bool bf16 = false, int ld_in = W,
           int ld_out = W) {
    // The operands as the instance's products read them, and the stores' rounding share.
    const auto rnd = [bf16](float x) { return bf16 ? bf16_rne(x) : tf32(x); };
    const double st = bf16 ? std::ldexp(1.0, -8) : 0.0;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // ā and pool are exactly B rows (a read past them is memcheck's to find); dh and dpool have
    // sentinel rows past the batch, which must stay untouched.
    const int rows = B + 128;
    std::vector<float> abar((size_t)B * W), pool_in((size_t)B * W);
    std::vector<float> Wo(W * W), Wr1(W * W), br1(W), wr2(W), br2(1), r(B);
    for (size_t i = 0; i < (size_t)B * W; ++i) {
        abar[i] = 0.5f * u(rng);
        pool_in[i] = u(rng);
    }
    for (float &w : Wo) w = 0.125f * u(rng);
    for (float &w : Wr1) w = 0.125f * u(rng);
    for (float &v : br1) v = 0.5f * u(rng);
    for (float &v : wr2) v = 0.5f * u(rng);
    br2[0] = 0.1f;
    for (float &v : r) v = u(rng);
    const std::vector<float> sent((size_t)rows * ld_out, kSentinel);
    // A [B, W] matrix as rows ld floats apart, sentinels between.
    auto spread = [&](const std::vector<float> &v, int ld) {
        std::vector<float> w((size_t)B * ld, kSentinel);
        for (int i = 0; i < B; ++i)
            std::copy(v.begin() + (size_t)i * W, v.begin() + (size_t)(i + 1) * W,
                      w.begin() + (size_t)i * ld);
        return w;
    };
    // Its [rows, W] part back; the columns past W must still hold sentinels.
    auto gather = [&](const std::vector<float> &w, int ld, int n, const char *what) {
        std::vector<float> v((size_t)n * W);
        for (int i = 0; i < n; ++i)
            for (int c = 0; c < ld; ++c) {
                const float x = w[(size_t)i * ld + c];
                if (c < W) v[(size_t)i * W + c] = x;
                else if (x != kSentinel) fail_msg("%s: row %d, column %d written", what, i, c);
            }
        return v;
    };
    auto shifted = [&](const std::vector<float> &v) {
        std::vector<float> w(shift, 0.0f);
        w.insert(w.end(), v.begin(), v.end());
        return w;
    };
    // Device copies, freed with their objects (also when a check fails and longjmps out).
    const std::vector<float> abar_s = spread(abar, ld_in);
    const Dev d_abar = dev_of(abar_s), d_pool = dev_of(spread(pool_in, ld_in));
    const Dev d_Wo = dev_of(shifted(Wo));
    const Dev d_Wr1 = dev_of(shifted(Wr1)), d_br1 = dev_of(br1), d_wr2 = dev_of(wr2);
    const Dev d_br2 = dev_of(br2), d_r = dev_of(r), d_dh = dev_of(sent), d_dpool = dev_of(sent);
    const int blocks = blocks_req > 0 ? blocks_req : fh::cuda::attn::head_fused_blocks(B);
    const Dev d_part((size_t)blocks * kPartW * sizeof(double));
    auto f = [](const Dev &d) { return static_cast<float *>(d.p); };
    fh::cuda::attn::HeadFusedArgs a{
        f(d_abar), f(d_pool),  f(d_Wo) + shift, f(d_Wr1) + shift, f(d_br1),
        f(d_wr2),  f(d_br2),   f(d_r),          B,                (float)B,
        f(d_dh),   f(d_dpool), static_cast<double *>(d_part.p), bf16};
    a.ld_in = ld_in;
    a.ld_out = ld_out;
    try {
        fh::cuda::attn::head_fused(a, blocks, 0);
    } catch (...) {
        fail_msg("head_fused threw");
    }
    cuda_test::cuda_ok(cudaDeviceSynchronize(), "the kernel");
    if (d_abar.get<float>() != abar_s) fail_msg("B = %d: the kernel wrote into abar", B);
    const std::vector<float> pool = gather(d_pool.get<float>(), ld_in, B, "pool");
    const std::vector<float> dh = gather(d_dh.get<float>(), ld_out, rows, "dh");
    const std::vector<float> dpool = gather(d_dpool.get<float>(), ld_out, rows, "dpool");
    const std::vector<double> part = d_part.get<double>();

    Reach rp{"pool"}, rd{"dh"}, rq{"dpool"}, rs{"sums"};
    if (bf16)
        for (const std::vector<float> *v : {&pool, &dh, &dpool})
            for (size_t e = 0; e < (size_t)B * W; ++e)
                if ((*v)[e] != bf16_rne((*v)[e]))
                    fail_msg("B = %d: stored element %zu (%.9g) is not a bfloat16 value", B, e,
                             (double)(*v)[e]);
    head_ref::Sums sums;
    for (int i = 0; i < B; ++i) {
        const float *ai = &abar[(size_t)i * W], *pi = &pool[(size_t)i * W];
        for (int n = 0; n < W; ++n) {
            double ref = pool_in[(size_t)i * W + n], mag = std::fabs(ref);
            head_ref::dot(ai, 1, &Wo[n * W], 1, W, ref, mag, rnd);
            rp.add(pi[n], ref, kAcc * mag * (1.0 + st) + st * std::fabs(ref) + 1e-30,
                   (size_t)i * W + n);
        }
        // h from the kernel's pool, the head, dh.
        double h[W], hb[W];
        for (int j = 0; j < W; ++j) {
            double acc = 0.0, mag = 0.0;
            head_ref::dot(pi, 1, &Wr1[j * W], 1, W, acc, mag, rnd);
            h[j] = acc;
            hb[j] = kAcc * mag + 1e-6 * std::fabs(acc);
        }
        head_ref::check_row(h, hb, br1.data(), wr2.data(), br2[0], r[i], B, st,
                            &dh[(size_t)i * W], (size_t)i * W, rd, sums);
        // dpool from the kernel's dh.
        for (int n = 0; n < W; ++n) {
            double acc = 0.0, mag = 0.0;
            head_ref::dot(&dh[(size_t)i * W], 1, &Wr1[n], W, W, acc, mag, rnd);
            rq.add(dpool[(size_t)i * W + n], acc, kAcc * mag * (1.0 + st) + st * std::fabs(acc) +
                   1e-30, (size_t)i * W + n);
        }
    }
    sums.check(part, blocks, rs);
    for (size_t e = (size_t)B * W; e < (size_t)rows * W; ++e)
        if (dh[e] != kSentinel || dpool[e] != kSentinel)
            fail_msg("B = %d: element %zu past the batch was written", B, e);
    printf("[ATTN_HEAD] %s B = %d, %d blocks, weights %s, row strides %d / %d: largest share of "
           "the bound: pool %.3f, dh %.3f, dpool %.3f, sums %.3f\n", bf16 ? "BF16" : "TF32", B,
           blocks, shift ? "unaligned" : "aligned", ld_in, ld_out, rp.worst, rd.worst, rq.worst,
           rs.worst);
}

void test_attention_head_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    check(1000, 1, 1, 0);
    check(1000, 3, 0, 3);  // 8 tiles on 3 blocks: the sums carried across a block's tiles
    check(16384, 2, 0, 0);
    check(1000, 4, 1, 0, true);
    check(1000, 5, 0, 3, true);
    check(16384, 6, 0, 0, true);
    check(1000, 7, 1, 3, false, 140, 128);  // the learner's strides (attention.cu)
    check(1000, 8, 0, 0, true, 140, 128);
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_attention_head_vs_float64)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
