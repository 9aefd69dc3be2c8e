// CPU warp emulation of the tensor-core attention kernels (cuda/attention_tc.cu; run by
// tests/warp_emu/run.sh): one warp, one head, over 3 transitions, the forward then the backward,
// against a float64 evaluation of ā and of the backward's batch sums S, M1 and M2, for 8
// geometries, with TF32 products, split TF32 (strict FP32's) and, where the kernels have them,
// bfloat16 ones. Shared memory and the softmax statistics that the forward leaves for the
// backward (TF32 and bfloat16 products) start as NaN, so a read of a slot nobody wrote shows. Exit
// status 1 when an error exceeds its bound: 1e-2 for TF32 (2^-11 operand rounding: 6e-4 to 2e-3
// measured), 1e-5 for split TF32 (a dropped low term is 2^-11), 5e-2 for bfloat16 (2^-9: 4e-3
// to 1.7e-2); a misplaced fragment gives O(1). At the default config's shapes also when the
// compiled-in geometry's instances (GeomDefault: the library's default kernels, which stage X
// with XRowVec) differ from the runtime geometry's (XRows) in a bit. (Not run:
// pool_aug_row, stubbed; WIDE blocks and more than one transition slot of a block.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "attention_bf16.cuh"

using std::min;

namespace fh::cuda::attn {
// pool and aug (attention_pool.cuh) are not checked here.
template <class GT>
inline void pool_aug_row(const GT &, const float *, const float *, const float *, const float *,
                         const float *, float *, float *, int) {}
#include "attn_kernels.inc"
}  // namespace fh::cuda::attn

using namespace fh::cuda::attn;

enum Prod { TF32, SPLIT, BF16 };  // the products a run emulates
const char *const kProductName[] = {"tf32", "split", "bf16"};

template <int MT, int KX, bool B16>
constexpr int bwd_floats() {
    if (B16) return tc::B16Shape<MT, KX>::BWD_FLOATS;
    return tc::TcShape<MT, KX>::BWD_FLOATS;
}

// Which instance runs: the runtime geometry's (every case), or at the default config's shapes
// the compiled-in geometry's (GeomDefault).
enum Kind { RUNTIME, DEFAULT };

// The forward leaves its softmax statistics in stats (TF32 and bfloat16 products), the backward
// reads them.
template <int MT, int KX, Prod P, Kind K>
void fwd(const Geom &g, const std::vector<float> &x, const std::vector<float> &comp, float *abar,
         float *stats) {
    if constexpr (K == RUNTIME)
        k_attn_tc_fwd<Geom, MT, KX, P == SPLIT, P == BF16>(g, 1, g.B, x.data(), comp.data(), abar,
                                                           nullptr, nullptr, nullptr, nullptr,
                                                           nullptr, g.d, stats);
    else
        k_attn_tc_fwd<tc::GeomDefault, 2, 1, P == SPLIT, P == BF16>(
            tc::GeomDefault{g.B}, 1, g.B, x.data(), comp.data(), abar, nullptr, nullptr, nullptr,
            nullptr, nullptr, g.d, stats);
}
template <int MT, int KX, Prod P, Kind K>
void bwd(const Geom &g, const std::vector<float> &x, const std::vector<float> &comp,
         const std::vector<float> &dabar, float *partial, const float *stats) {
    if constexpr (K == RUNTIME)
        k_attn_tc_bwd<Geom, MT, KX, P == SPLIT, false, P == BF16>(
            g, 1, g.B, x.data(), comp.data(), dabar.data(), partial, stats);
    else
        k_attn_tc_bwd<tc::GeomDefault, 2, 1, P == SPLIT, false, P == BF16>(
            tc::GeomDefault{g.B}, 1, g.B, x.data(), comp.data(), dabar.data(), partial, stats);
}

// Head h's warp over the batch: the forward into abar and stats, then the backward into partial;
// shared memory starts as NaN.
template <int MT, int KX, Prod P, Kind K = RUNTIME>
void emulate(const Geom &g, int h, const std::vector<float> &x, const std::vector<float> &comp,
             const std::vector<float> &dabar, std::vector<float4> &smem, float *abar,
             float *partial, float *stats) {
    for (auto &f : smem) f = make_float4(NAN, NAN, NAN, NAN);
    gSmem = smem.data();
    Warp W;
    blockDim.x = 32;
    for (int pass = 0; pass < 2; ++pass) {
        std::vector<std::thread> th;
        for (int l = 0; l < 32; ++l)
            th.emplace_back([&, l] {
                threadIdx.x = 32 * h + l;
                gW = &W;
                if (pass == 0) fwd<MT, KX, P, K>(g, x, comp, abar, stats);
                else bwd<MT, KX, P, K>(g, x, comp, dabar, partial, stats);
            });
        for (auto &t : th) t.join();
    }
}

// One geometry (T tokens, heads of dh, td token features, goal G), head h's warp: true when
// within the bound.
template <int MT, int KX, Prod P>
bool run(int T, int dh, int td, int G, int heads, int h, unsigned seed) {
    constexpr bool B16 = P == BF16;
    Geom g{};
    g.B = 3;
    g.td = td;
    g.G = G;
    g.To = T - 1;
    g.T = T;
    g.O = g.To * td;
    // The default config's shapes: its row of D = O + G floats, so that the compiled-in
    // geometry's instances run too (below); else 3 floats more, as a row with other columns.
    const bool dflt = MT == 2 && KX == 1 && T == 32 && dh == 16 && td == 4 && G == 4 && heads == 4;
    g.D = g.O + G + (dflt ? 0 : 3);
    g.heads = heads;
    g.dh = dh;
    g.d = heads * dh;
    g.d3 = 3 * g.d;
    g.na = td + G + 1;
    g.scale = (float)(1.0 / std::sqrt((double)dh));
    g.c_wg = g.d3 * td;
    g.c_cc = g.c_wg + g.d3 * G;
    g.c_eb = g.c_cc + T * g.d3;
    g.c_total = g.c_eb + g.d;
    g.pw = T * g.d3 + g.d3 * td + g.d3 * G;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x((size_t)g.B * g.D), comp(g.c_total), dabar((size_t)g.B * g.d);
    for (auto &v : x) v = nd(rng);
    for (auto &v : comp) v = 0.7f * nd(rng);
    for (auto &v : dabar) v = nd(rng);
    // The block's shared memory, warp h's region among `heads` (only warp h runs; its own head's
    // columns of the staged cc start at 48h, which its staging loop, from thread 32h, covers).
    using S = tc::TcShape<MT, KX>;
    const int nfl = S::cc_floats(heads) +
                    heads * std::max({bwd_floats<MT, KX, B16>(), S::FWD_FLOATS}) + 64;
    std::vector<float4> smem((nfl + 3) / 4);
    std::vector<float> partial((size_t)g.pw, NAN), abar((size_t)g.B * g.d, NAN);
    // A slot of the statistics that the forward does not write makes the backward's sums NaN.
    std::vector<float> stats(P == SPLIT ? 0 : (size_t)g.B * heads * tc::stats_floats(MT), NAN);
    emulate<MT, KX, P>(g, h, x, comp, dabar, smem, abar.data(), partial.data(),
                       P == SPLIT ? nullptr : stats.data());
    // At the default config's shapes, the compiled-in geometry's instances must give the runtime
    // geometry's outputs bit for bit.
    bool same = true;
    if constexpr (MT == 2 && KX == 1) {
        if (dflt) {
            same = tc::GeomDefault::matches(g);
            auto check = [&](auto run_kind) {
                std::vector<float> p2(partial.size(), NAN), a2(abar.size(), NAN),
                    s2(stats.size(), NAN);
                run_kind(a2.data(), p2.data(), P == SPLIT ? nullptr : s2.data());
                auto eq = [](const std::vector<float> &u, const std::vector<float> &v) {
                    return u.size() == v.size() &&
                           (u.empty() ||
                            std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0);
                };
                return eq(a2, abar) && eq(p2, partial) && eq(s2, stats);
            };
            same &= check([&](float *a, float *p, float *st) {
                emulate<2, 1, P, DEFAULT>(g, h, x, comp, dabar, smem, a, p, st);
            });
        }
    }
    // The float64 evaluation of head h.
    double errA = 0, nrmA = 0;
    std::vector<double> Sref((size_t)T * g.d3, 0.0), M1((size_t)g.d3 * td, 0.0),
        M2((size_t)g.d3 * std::max(G, 1), 0.0);
    const int nf = td + G;
    for (int i = 0; i < g.B; ++i) {
        std::vector<double> X((size_t)T * nf, 0.0);
        for (int t = 0; t < g.To; ++t)
            for (int f = 0; f < td; ++f) X[t * nf + f] = x[(size_t)i * g.D + t * td + f];
        for (int f = 0; f < G; ++f) X[g.To * nf + td + f] = x[(size_t)i * g.D + g.O + f];
        auto waug = [&](int c, int f) -> double {
            return f < td ? comp[(size_t)c * td + f] : comp[g.c_wg + (size_t)c * G + f - td];
        };
        std::vector<double> q(T * dh), k(T * dh), v(T * dh);
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < dh; ++j)
                for (int p = 0; p < 3; ++p) {
                    const int c = p * g.d + h * dh + j;
                    double s = comp[g.c_cc + (size_t)t * g.d3 + c];
                    for (int f = 0; f < nf; ++f) s += X[t * nf + f] * waug(c, f);
                    (p == 0 ? q : p == 1 ? k : v)[t * dh + j] = s;
                }
        std::vector<double> A(T * T), csum(T, 0.0);
        for (int t = 0; t < T; ++t) {
            double mx = -1e300;
            for (int s = 0; s < T; ++s) {
                double a = 0;
                for (int j = 0; j < dh; ++j) a += q[t * dh + j] * k[s * dh + j];
                A[t * T + s] = a * g.scale;
                mx = std::max(mx, A[t * T + s]);
            }
            double sum = 0;
            for (int s = 0; s < T; ++s) sum += (A[t * T + s] = std::exp(A[t * T + s] - mx));
            for (int s = 0; s < T; ++s) csum[s] += (A[t * T + s] /= sum);
        }
        for (int j = 0; j < dh; ++j) {
            double a = 0;
            for (int s = 0; s < T; ++s) a += csum[s] * v[s * dh + j];
            a /= T;
            const double gv = abar[(size_t)i * g.d + h * dh + j];
            errA += (a - gv) * (a - gv);
            nrmA += a * a;
        }
        std::vector<double> gam(dh), beta(T), dS(T * T);
        for (int j = 0; j < dh; ++j) gam[j] = dabar[(size_t)i * g.d + h * dh + j] / T;
        for (int s = 0; s < T; ++s) {
            double b = 0;
            for (int j = 0; j < dh; ++j) b += gam[j] * v[s * dh + j];
            beta[s] = b;
        }
        for (int t = 0; t < T; ++t) {
            double rs = 0;
            for (int s = 0; s < T; ++s) rs += A[t * T + s] * beta[s];
            for (int s = 0; s < T; ++s) dS[t * T + s] = A[t * T + s] * (beta[s] - rs) * g.scale;
        }
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < dh; ++j) {
                double dq = 0, dk = 0;
                for (int s = 0; s < T; ++s) {
                    dq += dS[t * T + s] * k[s * dh + j];
                    dk += dS[s * T + t] * q[s * dh + j];
                }
                const double d3[3] = {dq, dk, csum[t] * gam[j]};
                for (int p = 0; p < 3; ++p) {
                    const int c = p * g.d + h * dh + j;
                    Sref[(size_t)t * g.d3 + c] += d3[p];
                    for (int f = 0; f < nf; ++f) {
                        if (f < td) M1[(size_t)c * td + f] += d3[p] * X[t * nf + f];
                        else M2[(size_t)c * G + f - td] += d3[p] * X[t * nf + f];
                    }
                }
            }
    }
    const float *gS = partial.data(), *gM1 = gS + (size_t)T * g.d3, *gM2 = gM1 + (size_t)g.d3 * td;
    double eS = 0, nS = 0, eM = 0, nM = 0;
    auto add = [](double &e, double &n, double got, double want) {
        e += (got - want) * (got - want);
        n += want * want;
    };
    for (int p = 0; p < 3; ++p)
        for (int j = 0; j < dh; ++j) {
            const int c = p * g.d + h * dh + j;
            for (int t = 0; t < T; ++t)
                add(eS, nS, gS[(size_t)t * g.d3 + c], Sref[(size_t)t * g.d3 + c]);
            for (int f = 0; f < td; ++f)
                add(eM, nM, gM1[(size_t)c * td + f], M1[(size_t)c * td + f]);
            for (int f = 0; f < G; ++f) add(eM, nM, gM2[(size_t)c * G + f], M2[(size_t)c * G + f]);
        }
    const double ea = std::sqrt(errA / nrmA), es = std::sqrt(eS / nS), em = std::sqrt(eM / nM);
    const double bound = P == BF16 ? 5e-2 : P == SPLIT ? 1e-5 : 1e-2;
    const bool ok = ea <= bound && es <= bound && em <= bound && same;  // false for NaN
    printf("%-5s MT=%d KX=%d T=%2d dh=%2d td=%2d G=%d heads=%d h=%d: abar %.2e  S %.2e  M %.2e"
           "%s  %s\n", kProductName[P], MT, KX, T, dh, td, G, heads, h, ea, es, em,
           dflt ? (same ? "  default instances bitwise equal" : "  default instances DIFFER")
                : "",
           ok ? "ok" : "FAILED");
    return ok;
}

template <Prod P>
bool all_geometries() {
    bool ok = true;
    ok &= run<2, 1, P>(32, 16, 4, 4, 4, 2, 1);  // the default config's shapes, heads 2 and 0
    ok &= run<2, 1, P>(32, 16, 4, 4, 4, 0, 2);
    ok &= run<2, 1, P>(27, 12, 3, 2, 3, 1, 3);  // padded tokens and channels
    ok &= run<1, 1, P>(16, 16, 4, 4, 2, 1, 4);
    ok &= run<1, 1, P>(9, 8, 5, 3, 2, 1, 5);
    ok &= run<1, 2, P>(16, 16, 8, 6, 2, 0, 6);  // two feature steps
    ok &= run<2, 2, P>(32, 16, 10, 6, 4, 3, 7);
    ok &= run<2, 2, P>(20, 10, 9, 3, 3, 2, 8);
    return ok;
}

int main() {
    const bool ok = all_geometries<TF32>() & all_geometries<SPLIT>() & all_geometries<BF16>();
    return ok ? 0 : 1;
}
