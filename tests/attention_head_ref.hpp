// The attention learner's reward head in float64 with error bounds, for the tests of its fused
// kernels (test_cuda_attention_head: cuda/attention_head.cu; test_cuda_attention_head_factored:
// cuda/attention_head_factored.cu). Header-only; include after cmocka.h.
//   r̂ = SiLU(h + br1)·w_r2 + b_r2,  dr = 2 (r̂ − r̃) / B,  dh = dr w_r2 ⊙ SiLU'(h + br1)
// from h and a bound on its error: that error carried through with |SiLU''| ≤ 0.5 and
// |SiLU'| ≤ 1.1, plus 1e-5 of each result for the kernels' float32 head arithmetic.
#ifndef FOXHUNT_TEST_ATTENTION_HEAD_REF_HPP
#define FOXHUNT_TEST_ATTENTION_HEAD_REF_HPP

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace head_ref {

constexpr int W = 64, kPartW = 2 * W + 2;  // the kernels' width; a partial row's floats

// Float32 accumulation of K = 64 products: within γ_64 = 64·2^-24/(1 − 64·2^-24) ≈ 3.8e-6 of the
// sum of their magnitudes in any order (Higham, Accuracy and Stability of Numerical Algorithms,
// §3.1); twice that for the tensor cores' own adders.
constexpr double kAcc = 8e-6;

inline double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Σ_k rnd(x[k·sx])·rnd(w[k·sw]) over n terms in float64, in k's order, added to acc, and the
// terms' magnitudes added to mag. rnd: the operands' rounding as a kernel's products take them
// (operand_round.hpp's tf32 or bf16_rne: each product then exact in float64), or none.
struct NoRound {
    template <class T> T operator()(T v) const { return v; }
};
template <class X, class Y, class Round = NoRound>
void dot(const X *x, size_t sx, const Y *w, size_t sw, int n, double &acc, double &mag,
         Round rnd = Round()) {
    for (int k = 0; k < n; ++k) {
        const double t = (double)rnd(x[k * sx]) * rnd(w[k * sw]);
        acc += t;
        mag += std::fabs(t);
    }
}

// The largest |got − ref| / bound; fails the test past 1.
struct Reach {
    const char *what;
    double worst = 0.0;
    void add(double got, double ref, double bound, size_t at) {
        const double r = std::fabs(got - ref) / bound;
        if (!(r <= 1.0))
            fail_msg("%s[%zu]: %.9g against %.9g, bound %.3g", what, at, got, ref, bound);
        worst = std::max(worst, r);
    }
};

// The head's batch sums (dbr1 | dw_r2 | db_r2 | Σ (r̂ − r̃)²) and their bounds.
struct Sums {
    std::vector<double> sum = std::vector<double>(kPartW, 0.0);
    std::vector<double> bound = std::vector<double>(kPartW, 0.0);
    // The kernel's partial rows ([blocks, kPartW]) summed, against the reference.
    void check(const std::vector<double> &part, int blocks, Reach &rs) const {
        for (int c = 0; c < kPartW; ++c) {
            double got = 0.0;
            for (int b = 0; b < blocks; ++b) got += part[(size_t)b * kPartW + c];
            rs.add(got, sum[c], bound[c] + 1e-12 * std::fabs(sum[c]) + 1e-30, (size_t)c);
        }
    }
};

// Row i's head from h (within hb of the kernel's), checked against the kernel's dh row (stored
// with relative rounding st: 2^-8 where bfloat16, else 0); its terms added to the sums.
inline void check_row(const double (&h)[W], const double (&hb)[W], const float *br1,
                      const float *wr2, float br2, float r, int B, double st, const float *dh,
                      size_t at, Reach &rd, Sums &sums) {
    double pre[W], s = 0.0, smag = 0.0, rb = 0.0;
    for (int j = 0; j < W; ++j) {
        pre[j] = h[j] + br1[j];
        const double silu = pre[j] * sigmoid(pre[j]);
        s += silu * wr2[j];
        smag += std::fabs(silu * wr2[j]);
        rb += std::fabs(wr2[j]) * 1.1 * hb[j];
    }
    const double rhat = s + br2, e = rhat - r, dr = 2.0 * e / B;
    rb += 1e-5 * (smag + std::fabs(rhat));
    const double drb = 2.0 * rb / B;
    for (int j = 0; j < W; ++j) {
        const double sg = sigmoid(pre[j]), ds = sg * (1.0 + pre[j] * (1.0 - sg));
        const double ref = dr * wr2[j] * ds;
        const double bound = std::fabs(dr * wr2[j]) * 0.5 * hb[j] +
                             std::fabs(wr2[j]) * 1.1 * drb + 1e-5 * std::fabs(ref) + 1e-30;
        rd.add(dh[j], ref, bound * (1.0 + st) + st * std::fabs(ref), at + j);
        sums.sum[j] += ref;
        sums.bound[j] += bound;
        sums.sum[W + j] += dr * pre[j] * sg;
        sums.bound[W + j] += drb * std::fabs(pre[j] * sg) + std::fabs(dr) * 1.1 * hb[j] +
                             1e-5 * std::fabs(dr * pre[j] * sg);
    }
    sums.sum[2 * W] += dr;
    sums.bound[2 * W] += drb;
    sums.sum[2 * W + 1] += e * e;
    sums.bound[2 * W + 1] += 2.0 * std::fabs(e) * rb + rb * rb + 1e-5 * e * e;
}

}  // namespace head_ref

#endif
