/* The fused SiLU layer (cuda/linear_silu.cu): act = SiLU(X Wᵀ + b) and pre = X Wᵀ against a
 * float64 evaluation of the same formula, on the wgmma kernel and on the cuBLAS + bias_silu path,
 * at the Q net's, IQN's and IQL's shapes and at shapes with a partly filled last row tile, with
 * the pre-activation kept and not kept (pre = act), and X given exact (the kernel rounds it) or
 * already rounded (x_rounded).
 * - The kernel: W is passed as its TF32 copy (rounded here as the kernels round, to nearest), and
 *   the reference takes the same rounded operands, so their products are exact in float64 and
 *   only the float32 accumulation differs: pre within 3e-5 of Σ_k |x_k w_k| per element, 5e-6
 *   over the tensor. Truncating X instead of rounding it (what wgmma does to an unrounded
 *   operand) is off by about 2^-11 of each operand, ~3e-5 of that sum per element at one
 *   standard deviation, so the worst of a layer's elements fails the bound. act must hold TF32
 *   values and be SiLU of the reference within its rounding (2^-11 of itself).
 * - cuBLAS: operands exact, TF32 inside cuBLAS: 2.5e-3 of the sum, 1e-3 over the tensor.
 * Then linear_silu_heads, the branch heads in the kernel's epilogue (check_heads), and
 * linear_dsilu, the trunk backward's SiLU' epilogue with its column sums (check_dsilu).
 * The kernel's checks run twice: with TF32 operands and with bfloat16 ones (FH_MATH_BF16,
 * Blas::linear_bf16: X, W, U and the stored activations rounded to nearest even bfloat16, u =
 * 2^-8 in the bounds instead of 2^-11; the products of those values are exact in float64 too),
 * and so does the check of the pass's pack, the rounded weight copies the layers read
 * (check_pack).
 * On a Hopper GPU the test also requires that the wgmma kernel is the one that runs (the probe
 * found its code) in both modes, so a silent fallback cannot pass for it. Skipped without a
 * GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/cuda_step.hpp"
#include "../cuda/lanes.hpp"
#include "../cuda/linear_silu.hpp"
#include "config.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "memory_plan.hpp"
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
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "operand_round.hpp"
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

using operand_round::bf16_rne;
using operand_round::tf32;

/* The kernel's operand rounding: TF32 (to nearest, operand_round::tf32) or, with
 * Blas::linear_bf16 (FH_MATH_BF16), bfloat16 (round to nearest even); u is its unit roundoff
 * (2^-11, 2^-8). */
struct Rounding {
    bool bf16;
    float operator()(float x) const { return bf16 ? bf16_rne(x) : tf32(x); }
    double u() const { return std::ldexp(1.0, bf16 ? -8 : -11); }
    const char *name() const { return bf16 ? "BF16" : "TF32"; }
};

/* Row i of X [M, K] times row j of W [N, K] in float64, X's elements rounded first when round_x
 * (as the kernel reads them); mag = Σ_k |x_k w_k|, the scale of the bounds. */
struct Dot {
    double z, mag;
};
Dot ref_dot(const std::vector<float> &X, const std::vector<float> &W, int i, int j, int K,
            bool round_x, Rounding rd) {
    Dot r{0.0, 0.0};
    for (int k = 0; k < K; ++k) {
        const float x = X[(size_t)i * K + k];
        const double t = (double)(round_x ? rd(x) : x) * W[(size_t)j * K + k];
        r.z += t;
        r.mag += std::fabs(t);
    }
    return r;
}

/* The bounds of one element of a layer: pre (the product) within pk of Σ|x·w| plus 1e-6; act
 * within 1.1 times that (SiLU's slope is at most 1.1) plus, on the kernel's path, its own
 * rounding (u of the activation a). */
struct Bounds {
    double pre, act;
};
Bounds elem_bounds(const Dot &dot, double a, double pk, bool tc, Rounding rd) {
    const double pre = pk * dot.mag + 1e-6;
    return Bounds{pre, 1.1 * pre + (tc ? rd.u() * std::fabs(a) : 0.0)};
}

/* One layer on one path (the kernel when bl.linear_tc, rounding as bl.linear_bf16 says); fails
 * the test beyond the bounds. */
void check_layer(const fh::cuda::Blas &bl, cudaStream_t s, Shape sh, bool keep_pre,
                 bool x_rounded, unsigned seed) {
    const int M = sh.M, N = sh.N, K = sh.K;
    const bool tc = bl.linear_tc;
    const Rounding rd{bl.linear_bf16};
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X((size_t)M * K), W((size_t)N * K), Wt((size_t)N * K), b(N);
    for (float &e : X) e = x_rounded ? rd(nd(rng)) : nd(rng);
    for (float &e : W) e = nd(rng) / std::sqrt((float)K);
    for (size_t k = 0; k < W.size(); ++k) Wt[k] = rd(W[k]);
    for (float &e : b) e = 0.5f * nd(rng);
    float *dX = dev(X), *dW = dev(W), *dWt = dev(Wt), *db = dev(b);
    float *dact = dev(std::vector<float>((size_t)M * N, NAN));
    float *dpre = keep_pre ? dev(std::vector<float>((size_t)M * N, NAN)) : dact;
    std::string err;
    bool fused = false;
    try {
        fused = fh::cuda::linear_silu(bl, s, M, N, K, dX, x_rounded, dW, dWt, db, dpre, dact,
                                      "test layer");
    } catch (const fh::Error &e) {
        err = e.message;
    }
    if (!err.empty()) fail_msg("linear_silu threw: %s", err.c_str());
    if (fused != tc) fail_msg("linear_silu ran the %s path", fused ? "fused" : "cuBLAS");
    const cudaError_t ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) fail_msg("linear_silu: %s", cudaGetErrorString(ce));
    const std::vector<float> act = host(dact, (size_t)M * N);
    const std::vector<float> pre = keep_pre ? host(dpre, (size_t)M * N) : std::vector<float>();
    const double pk = tc ? 3e-5 : 2.5e-3, tensor_bound = tc ? 5e-6 : 1e-3;
    double worst = 0, num = 0, den = 0, pnum = 0, pden = 0;
    bool all_rounded = true;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            const Dot dot = ref_dot(X, tc ? Wt : W, i, j, K, tc, rd);
            const double z = dot.z;
            const double zb = z + b[j], a = zb / (1.0 + std::exp(-zb));
            const Bounds bd = elem_bounds(dot, a, pk, tc, rd);
            const float got = act[(size_t)i * N + j];
            if (tc && rd(got) != got) all_rounded = false;
            const double ea = std::fabs(got - a) / bd.act;
            worst = std::max(worst, std::isfinite(ea) ? ea : 1e30);
            num += (got - a) * (got - a);
            den += a * a;
            if (keep_pre) {
                const double ep = std::fabs(pre[(size_t)i * N + j] - z) / bd.pre;
                worst = std::max(worst, std::isfinite(ep) ? ep : 1e30);
                pnum += (pre[(size_t)i * N + j] - z) * (pre[(size_t)i * N + j] - z);
                pden += z * z;
            }
        }
    const double rel = std::sqrt(num / den), prel = keep_pre ? std::sqrt(pnum / pden) : 0.0;
    printf("[LINEAR] %s %s M=%d N=%d K=%d %s, X %s: worst %.3f of the bound, relative error "
           "act %.2e pre %.2e\n",
           tc ? "wgmma" : "cublas", rd.name(), M, N, K, keep_pre ? "pre kept" : "act only",
           x_rounded ? "rounded" : "exact", worst, rel, prel);
    /* act's own rounding (up to u relative) dominates its tensor-wide error on the kernel. */
    if (!(worst <= 1.0 && rel <= (tc ? 1.03 * rd.u() : tensor_bound) && prel <= tensor_bound &&
          all_rounded))
        fail_msg("linear_silu (%s %s) M=%d N=%d K=%d: worst %.3f of the bound, relative %.2e / "
                 "%.2e%s",
                 tc ? "wgmma" : "cublas", rd.name(), M, N, K, worst, rel, prel,
                 all_rounded ? "" : ", act not rounded");
    cudaFree(dX);
    cudaFree(dW);
    cudaFree(dWt);
    cudaFree(db);
    cudaFree(dact);
    if (keep_pre) cudaFree(dpre);
}

/* linear_silu_heads on the kernel: ncol branches of 128 (the tiles), the heads against float64
 * (z = Σ_c SiLU(x·w_c + b_c) U[a][c] + e[a] with the rounded operands of check_layer, q its
 * clamp): products over 128 activations, each activation within 1.1 × check_layer's bound
 * of its float64 value, so z within Σ_c |U[a][c]| of that, plus 2u of Σ_c |g_c U[a][c]| for
 * rounding g and U (u each: 2^-11 TF32, 2^-8 BF16) and 1e-5 of it for the float32
 * accumulation. */
void check_heads(const fh::cuda::Blas &bl, cudaStream_t s, int M, int nbr, int K, int A,
                 bool keep, bool z_apart, bool x_rounded, unsigned seed) {
    const int N = 128 * nbr;
    const Rounding rd{bl.linear_bf16};
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X((size_t)M * K), Wt((size_t)N * K), b(N), U((size_t)nbr * A * 128),
        e((size_t)nbr * A);
    for (float &v : X) v = x_rounded ? rd(nd(rng)) : nd(rng);
    for (float &v : Wt) v = rd(nd(rng) / std::sqrt((float)K));
    for (float &v : b) v = 0.5f * nd(rng);
    for (float &v : U) v = nd(rng) / std::sqrt(128.0f);
    for (float &v : e) v = 0.1f * nd(rng);
    const float clip = 0.6f;
    float *dX = dev(X), *dW = dev(Wt), *db = dev(b), *dU = dev(U), *de = dev(e);
    const size_t nq = (size_t)nbr * M * A;
    float *dq = dev(std::vector<float>(nq, NAN));
    float *dz = z_apart ? dev(std::vector<float>(nq, NAN)) : dq;
    float *dact = keep ? dev(std::vector<float>((size_t)M * N, NAN)) : nullptr;
    float *dpre = keep ? dev(std::vector<float>((size_t)M * N, NAN)) : nullptr;
    fh::cuda::BranchHeads hd;
    hd.U = dU;
    hd.u_stride = (size_t)A * 128;
    hd.e = de;
    hd.e_stride = A;
    hd.z = dz;
    hd.q = dq;
    hd.A = A;
    hd.clip = clip;
    bool ran = false;
    try {
        ran = fh::cuda::linear_silu_heads(bl, s, M, N, K, dX, x_rounded, dW, db, dpre, dact, hd);
    } catch (const fh::Error &ex) {
        fail_msg("linear_silu_heads threw: %s", ex.message.c_str());
    }
    if (!ran) fail_msg("linear_silu_heads did not run (M=%d N=%d K=%d A=%d)", M, N, K, A);
    const cudaError_t ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) fail_msg("linear_silu_heads: %s", cudaGetErrorString(ce));
    const std::vector<float> q = host(dq, nq), z = z_apart ? host(dz, nq) : q;
    /* Kept, act and pre are check_layer's: pre within its product bound, act a rounded value
     * within 1.1 times that plus its own rounding (the forward child's backward reads both). */
    const std::vector<float> hact = keep ? host(dact, (size_t)M * N) : std::vector<float>();
    const std::vector<float> hpre = keep ? host(dpre, (size_t)M * N) : std::vector<float>();
    double worst = 0, worst_layer = 0, worst_exact = 0;
    bool all_rounded = true;
    std::vector<double> g(N), gb(N);
    for (int i = 0; i < M; ++i) {
        for (int c = 0; c < N; ++c) {
            const Dot dot = ref_dot(X, Wt, i, c, K, true, rd);
            const double zb = dot.z + b[c];
            g[c] = zb / (1.0 + std::exp(-zb));
            const Bounds bd = elem_bounds(dot, g[c], 3e-5, true, rd);
            gb[c] = 1.1 * bd.pre;
            if (keep) {
                const float ga = hact[(size_t)i * N + c], pa = hpre[(size_t)i * N + c];
                if (rd(ga) != ga) all_rounded = false;
                const double ea = std::fabs(ga - g[c]) / bd.act;
                const double ep = std::fabs(pa - dot.z) / bd.pre;
                worst_layer = std::max({worst_layer, std::isfinite(ea) ? ea : 1e30,
                                        std::isfinite(ep) ? ep : 1e30});
            }
        }
        for (int br = 0; br < nbr; ++br)
            for (int a = 0; a < A; ++a) {
                const float *u = U.data() + ((size_t)br * A + a) * 128;
                double ref = e[(size_t)br * A + a], bound = 1e-6, gu = 0;
                for (int c = 0; c < 128; ++c) {
                    ref += g[br * 128 + c] * u[c];
                    bound += std::fabs(u[c]) * gb[br * 128 + c];
                    gu += std::fabs(g[br * 128 + c] * u[c]);
                }
                bound += (2.0 * rd.u() + 1e-5) * gu;
                const size_t at = (size_t)br * M * A + (size_t)i * A + a;
                const double qr = std::min(std::max(ref, -(double)clip), (double)clip);
                /* z is q's buffer when not apart: then only q holds a value to check. */
                const double ez = z_apart ? std::fabs(z[at] - ref) / bound : 0.0;
                const double eq = std::fabs(q[at] - qr) / bound;
                worst = std::max(
                    {worst, std::isfinite(ez) ? ez : 1e30, std::isfinite(eq) ? eq : 1e30});
                /* With act stored, the products' operands are known exactly: the stored
                 * activations and U rounded as the mode rounds (the products of those values
                 * are exact), so z is their float32-accumulated sum, within 1e-5 of Σ|g U|. A
                 * U rounded otherwise (TF32 in BF16, say) is off by ~1e-2 of that sum. */
                if (keep && z_apart) {
                    double zk = e[(size_t)br * A + a], mk = 0.0;
                    for (int c = 0; c < 128; ++c) {
                        const double t =
                            (double)hact[(size_t)i * N + br * 128 + c] * (double)rd(u[c]);
                        zk += t;
                        mk += std::fabs(t);
                    }
                    const double ek = std::fabs(z[at] - zk) / (1e-5 * mk + 1e-6);
                    worst_exact = std::max(worst_exact, std::isfinite(ek) ? ek : 1e30);
                }
            }
    }
    printf("[LINEAR] heads %s M=%d branches=%d K=%d A=%d %s, z %s, X %s: worst %.3f of the "
           "bound%s\n",
           rd.name(), M, nbr, K, A, keep ? "act and pre kept" : "act not stored",
           z_apart ? "apart" : "= q", x_rounded ? "rounded" : "exact", worst,
           keep ? "" : " (act, pre: not stored)");
    if (keep)
        printf("[LINEAR] heads %s M=%d act and pre: worst %.3f of check_layer's bounds%s; z from "
               "the stored act: worst %.3f of its bound\n",
               rd.name(), M, worst_layer, all_rounded ? "" : ", act not rounded", worst_exact);
    if (!(worst <= 1.0 && worst_layer <= 1.0 && worst_exact <= 1.0 && all_rounded))
        fail_msg("linear_silu_heads %s M=%d A=%d: worst %.3f of the bound, act/pre %.3f, z from "
                 "act %.3f%s",
                 rd.name(), M, A, worst, worst_layer, worst_exact,
                 all_rounded ? "" : ", act not rounded");
    for (float *ptr : {dX, dW, db, dU, de, dq}) cudaFree(ptr);
    if (z_apart) cudaFree(dz);
    if (keep) {
        cudaFree(dact);
        cudaFree(dpre);
    }
}

/* linear_dsilu on the kernel: dpre = (X Wtᵀ) ⊙ SiLU'(P + b) against float64 with the rounded
 * operands (so the product within check_layer's kernel bound, times |SiLU'| ≤ 1.1, plus 1e-6 of
 * |v| + |z| for SiLU' in float, plus dpre's own rounding, u of itself), stored as rounded
 * values, and each 128-row tile's column sums within the sum of those bounds over its rows
 * (plus 1e-12 of the sum's magnitude). */
void check_dsilu(const fh::cuda::Blas &bl, cudaStream_t s, int M, int N, int K, bool x_rounded,
                 unsigned seed) {
    const Rounding rd{bl.linear_bf16};
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X((size_t)M * K), Wt((size_t)N * K), P((size_t)M * N), b(N);
    for (float &v : X) v = x_rounded ? rd(nd(rng)) : nd(rng);
    for (float &v : Wt) v = rd(nd(rng) / std::sqrt((float)K));
    for (float &v : P) v = 2.0f * nd(rng);
    for (float &v : b) v = 0.5f * nd(rng);
    const int tiles = (M + 127) / 128;
    float *dX = dev(X), *dW = dev(Wt), *dP = dev(P), *db = dev(b);
    float *dout = dev(std::vector<float>((size_t)M * N, NAN));
    double *dpart = nullptr;
    cudaMalloc(&dpart, (size_t)tiles * N * sizeof(double));
    bool ran = false;
    try {
        ran = fh::cuda::linear_dsilu(bl, s, M, N, K, dX, x_rounded, dW, dP, db, dout, dpart);
    } catch (const fh::Error &ex) {
        fail_msg("linear_dsilu threw: %s", ex.message.c_str());
    }
    if (!ran) fail_msg("linear_dsilu did not run (M=%d N=%d K=%d)", M, N, K);
    const cudaError_t ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) fail_msg("linear_dsilu: %s", cudaGetErrorString(ce));
    const std::vector<float> out = host(dout, (size_t)M * N);
    std::vector<double> part((size_t)tiles * N);
    cudaMemcpy(part.data(), dpart, part.size() * sizeof(double), cudaMemcpyDeviceToHost);
    std::vector<double> ps((size_t)tiles * N, 0.0), pb((size_t)tiles * N, 0.0),
        pm((size_t)tiles * N, 0.0);
    double worst = 0;
    bool all_rounded = true;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            const Dot dot = ref_dot(X, Wt, i, j, K, true, rd);
            const double z = dot.z;
            const double p = (double)P[(size_t)i * N + j] + b[j], sg = 1.0 / (1.0 + std::exp(-p));
            const double ds = sg * (1.0 + p * (1.0 - sg)), v = z * ds;
            /* + 1e-6 |z|: SiLU' of P + b rounded to float (P's rounding, the float sigmoid),
             * which does not vanish where SiLU' does. */
            const double vb =
                std::fabs(ds) * elem_bounds(dot, 0.0, 3e-5, true, rd).pre +
                1e-6 * (std::fabs(v) + std::fabs(z));
            const float got = out[(size_t)i * N + j];
            if (rd(got) != got) all_rounded = false;
            const double e = std::fabs(got - v) / (vb + rd.u() * std::fabs(v));
            worst = std::max(worst, std::isfinite(e) ? e : 1e30);
            const size_t t = (size_t)(i / 128) * N + j;
            ps[t] += v;
            pb[t] += vb;
            pm[t] += std::fabs(v);
        }
    for (size_t t = 0; t < ps.size(); ++t) {
        const double e = std::fabs(part[t] - ps[t]) / (pb[t] + 1e-12 * pm[t] + 1e-12);
        worst = std::max(worst, std::isfinite(e) ? e : 1e30);
    }
    printf("[LINEAR] dsilu %s M=%d N=%d K=%d X %s: worst %.3f of the bound%s\n", rd.name(), M,
           N, K, x_rounded ? "rounded" : "exact", worst, all_rounded ? "" : ", dpre not rounded");
    if (!(worst <= 1.0 && all_rounded))
        fail_msg("linear_dsilu %s M=%d N=%d K=%d: worst %.3f of the bound%s", rd.name(), M, N, K,
                 worst, all_rounded ? "" : ", dpre not rounded");
    for (float *ptr : {dX, dW, dP, db, dout}) cudaFree(ptr);
    cudaFree(dpart);
}

/* q_pack's rounded copies (qnet.cu), which the fused layers read as their weights: in a lane
 * with linear_tc every element of W1t, W2t, W2ᵀ, Vcat and Vcatᵀ is its source weight rounded as
 * the mode rounds (TF32, or bfloat16 with linear_bf16), at the default dims. */
void check_pack(const fh::cuda::Blas &bl, cudaStream_t s) {
    fh_config c;
    fh_config_init(&c);
    const fh::Dims d = fh::make_dims(c);
    const fh::Layout L = fh::make_layout(d);
    const fh::QOffsets &o = L.q;
    const Rounding rd{bl.linear_bf16};
    std::mt19937 rng(77);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> P(o.total);
    for (float &v : P) v = nd(rng);
    const fh::PackedBranches pk = fh::packed_branches(d);
    float *dP = dev(P), *dpack = dev(std::vector<float>(pk.total, NAN));
    fh::cuda::QView w{dP, dP + o.W1, dP + o.W2};
    const fh::cuda::LaneCtx l{s, bl, nullptr, nullptr};
    try {
        fh::cuda::q_pack(l, d, L, w, dpack);
    } catch (const fh::Error &ex) {
        fail_msg("q_pack threw: %s", ex.message.c_str());
    }
    const cudaError_t ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) fail_msg("q_pack: %s", cudaGetErrorString(ce));
    const std::vector<float> pack = host(dpack, pk.total);
    const size_t H = d.H, D = d.D, HB = d.HB, nh = (size_t)d.NB * HB;
    const size_t stride = o.V[1] - o.V[0];
    const auto V = [&](size_t row, size_t col) {  // Vcat[row][col] = V_b[row − b·HB][col]
        const size_t b = row / HB;
        return P[o.V[0] + b * stride + (row - b * HB) * H + col];
    };
    size_t bad = 0, n = 0;
    const auto expect = [&](uint64_t at, float src) {
        const float want = rd(src);
        ++n;
        if (memcmp(&pack[at], &want, 4) != 0) ++bad;
    };
    for (size_t e = 0; e < H * D; ++e) expect(pk.W1t + e, P[o.W1 + e]);
    for (size_t e = 0; e < H * H; ++e) expect(pk.W2t + e, P[o.W2 + e]);
    for (size_t r = 0; r < H; ++r)
        for (size_t col = 0; col < H; ++col) expect(pk.W2T + r * H + col, P[o.W2 + col * H + r]);
    for (size_t r = 0; r < nh; ++r)
        for (size_t col = 0; col < H; ++col) {
            expect(pk.Vcat + r * H + col, V(r, col));
            expect(pk.VcatT + col * nh + r, V(r, col));
        }
    printf("[LINEAR] pack %s: %zu of %zu rounded copies differ from their weight rounded\n",
           rd.name(), bad, n);
    if (bad) fail_msg("q_pack %s: %zu of %zu elements not rounded as the mode rounds", rd.name(),
                      bad, n);
    cudaFree(dP);
    cudaFree(dpack);
}

void test_linear_silu_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CUDA;
    c.math_mode = FH_MATH_TF32;
    bool tc = false, tc_bf16 = false;
    try {
        tc = fh::cuda::linear_tc_enabled(c);
        fh_config cb = c;
        cb.math_mode = FH_MATH_BF16;
        tc_bf16 = fh::cuda::linear_tc_enabled(cb);
    } catch (const fh::Error &e) {
        fail_msg("linear_tc_enabled: %s", e.message.c_str());
    }
    if (tc_bf16 != tc) fail_msg("the fused kernel is %s in TF32, %s in BF16", tc ? "on" : "off",
                                tc_bf16 ? "on" : "off");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("[LINEAR] %s (cc %d.%d): wgmma kernel %s\n", prop.name, prop.major, prop.minor,
           tc ? "loaded" : "absent");
    if (prop.major == 9 && prop.minor == 0 && !tc)
        fail_msg("a Hopper GPU, but the wgmma kernel's code was not loaded");
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *ws = nullptr;
    const size_t ws_bytes = 32u << 20;
    cudaMalloc(&ws, ws_bytes);
    fh::cuda::Blas bl{fh::cuda::make_handle(c, s, ws, ws_bytes), fh::cuda::compute_type(c),
                      nullptr, false, ws, ws_bytes};
    /* The Q net's trunk and packed branches, IQN's ψ (D → 128), a last row tile of 1 and of 77
     * rows, the smallest K. */
    const Shape shapes[] = {{4096, 256, 128}, {1000, 256, 256}, {2048, 512, 256},
                            {513, 128, 128},  {77, 128, 32},    {129, 384, 64}};
    unsigned seed = 1;
    for (int path = 0; path < 2; ++path) {
        bl.linear_tc = path == 1;
        if (bl.linear_tc && !tc) continue;
        for (const Shape &sh : shapes)
            for (bool keep : {true, false})
                for (bool xt : {false, true}) check_layer(bl, s, sh, keep, xt, seed++);
    }
    /* The heads: ddqn's packed layer (4 branches, nothing but q stored, X already rounded as
     * its h2 is), a forward branch's layer (one branch, act and pre stored, z apart from q; X
     * exact and rounded), A < 8, a last row tile of 1. Then the trunk backward's two shapes (dh2
     * over the packed branches, dh1), a partial tile. TF32, then BF16 (with its layers too). */
    bl.linear_tc = true;
    for (bool bf16 : {false, true}) {
        if (!tc) break;
        bl.linear_bf16 = bf16;
        if (bf16)
            for (const Shape &sh : shapes)
                for (bool keep : {true, false})
                    for (bool xt : {false, true}) check_layer(bl, s, sh, keep, xt, seed++);
        check_heads(bl, s, 1000, 4, 256, 8, false, false, true, seed++);
        check_heads(bl, s, 513, 1, 256, 8, true, true, false, seed++);
        check_heads(bl, s, 513, 1, 256, 8, true, true, true, seed++);
        check_heads(bl, s, 129, 2, 64, 5, true, true, false, seed++);
        check_heads(bl, s, 77, 1, 128, 3, false, true, false, seed++);
        check_dsilu(bl, s, 1000, 256, 512, false, seed++);
        check_dsilu(bl, s, 513, 256, 256, true, seed++);
        check_dsilu(bl, s, 77, 128, 64, false, seed++);
        check_pack(bl, s);
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
