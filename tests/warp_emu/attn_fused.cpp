// CPU warp emulation of the fused attention trial's kernel (cuda/attention_fused.cu; run by
// tests/warp_emu/run.sh): a block's four warps together (its five barriers a transition are the
// warpgroup's), at the default config's geometry, 7 transitions on 1, 2 and 3 blocks, against a
// float64 evaluation of the forward (ā), aug, the reward head (dh and its per-block sums: dbr1,
// dw_r2, db_r2, Σ (r̂ − r̃)²) and the backward's batch sums S, M1 and M2 with the head's dā.
// C1 = Wr1 Wo and C2 = Wr1 M are drawn at random here (the kernel reads them as given). Shared
// memory and the outputs start as NaN. Bound: 1e-2 relative (TF32 products, 2^-11 operand
// rounding); a misplaced value gives O(1).
// Then the head's factoring itself (head()): k_fused_head_comp's C1, C2 and k_fused_head_grads'
// dWr1, dWo, R, run thread by thread, against the unfactored float64 head of random rows: h =
// pool Wr1ᵀ with pool = ē + bo + ā Woᵀ, dWr1 = Σ dh poolᵀ, dWo = Σ dpool āᵀ, R = Σ dpool augᵀ
// (dpool = dh Wr1). Bound 1e-6 (float32 outputs of float64 sums).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attention_tc_grads.cuh"
#include "device_math.cuh"
#include "grid.h"

using std::min;

namespace fh::cuda::attn {
#include "attn_fused_kernel.inc"
#include "attn_fused_head.inc"
}  // namespace fh::cuda::attn

using namespace fh::cuda::attn;
using GD = tc::GeomDefault;

namespace {

double rel(const std::vector<double> &want, const std::vector<double> &got) {
    double e = 0, n = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        e += (got[i] - want[i]) * (got[i] - want[i]);
        n += want[i] * want[i];
    }
    return std::sqrt(e / n);  // NaN when got has a NaN
}

bool run(int B, int blocks, unsigned seed) {
    constexpr int D = GD::D, T = GD::T, To = GD::To, td = GD::td, G = GD::G, d = GD::d,
                  d3 = GD::d3, dh = GD::dh, H = GD::heads, na = GD::na, W = kW;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x((size_t)B * D), comp(GD::c_eb + d), hc(kG), r(B),
        br1(W), wr2(W);
    for (auto &v : x) v = nd(rng);
    for (auto &v : comp) v = 0.7f * nd(rng);
    for (auto &v : r) v = nd(rng);
    for (auto &v : br1) v = 0.3f * nd(rng);
    for (auto &v : wr2) v = 0.3f * nd(rng);
    const float br2 = 0.1f, rows = 2.0f * B;
    for (int m = 0; m < W; ++m)
        for (int j = 0; j < d; ++j) hc[kC1 + m * d + j] = hc[kC1T + j * W + m] = 0.15f * nd(rng);
    for (int m = 0; m < W; ++m)
        for (int f = 0; f < na; ++f) hc[kC2 + m * na + f] = 0.15f * nd(rng);
    const int spb = (B + blocks - 1) / blocks;
    const int ld = d + 16, ldh = W + 8;  // rows of wider matrices
    std::vector<float> abar((size_t)B * ld, NAN), aug((size_t)B * ld, NAN),
        dhv((size_t)B * ldh, NAN), partial((size_t)blocks * GD::pw, NAN);
    std::vector<double> ph((size_t)blocks * kPartW, NAN);
    FusedArgs a{};
    a.x = x.data(); a.comp = comp.data(); a.hc = hc.data(); a.r = r.data();
    a.br1 = br1.data(); a.wr2 = wr2.data(); a.br2 = &br2; a.rows = rows;
    a.abar = abar.data(); a.aug = aug.data(); a.ld = ld; a.dh = dhv.data(); a.ld_dh = ldh;
    a.partial = partial.data(); a.part_head = ph.data();
    const size_t smem =
        (tc::TcShape<2, 1>::cc_floats(H) + (size_t)H * tc::TcShape<2, 1>::BWD_FLOATS + kHFloats) *
        sizeof(float);
    run_grid(
        blocks, 4, smem, [] {}, [&] { k_attn_fused(GD{B}, spb, a); }, 4);

    // float64
    std::vector<double> wA, gA, wAug, gAug, wDh, gDh, wHead(kPartW, 0.0), gHead(kPartW, 0.0);
    std::vector<double> Sref((size_t)T * d3, 0.0), M1((size_t)d3 * td, 0.0),
        M2((size_t)d3 * G, 0.0);
    const int nf = td + G;
    for (int i = 0; i < B; ++i) {
        std::vector<double> X((size_t)T * nf, 0.0);
        for (int t = 0; t < To; ++t)
            for (int f = 0; f < td; ++f) X[t * nf + f] = x[(size_t)i * D + t * td + f];
        for (int f = 0; f < G; ++f) X[To * nf + td + f] = x[(size_t)i * D + GD::O + f];
        auto waug = [&](int c, int f) -> double {
            return f < td ? comp[(size_t)c * td + f] : comp[GD::c_wg + (size_t)c * G + f - td];
        };
        std::vector<double> q(H * T * dh), k(H * T * dh), v(H * T * dh), A(H * T * T),
            csum(H * T, 0.0), ab(d);
        for (int h = 0; h < H; ++h) {
            for (int t = 0; t < T; ++t)
                for (int j = 0; j < dh; ++j)
                    for (int p = 0; p < 3; ++p) {
                        const int c = p * d + h * dh + j;
                        double s = comp[GD::c_cc + (size_t)t * d3 + c];
                        for (int f = 0; f < nf; ++f) s += X[t * nf + f] * waug(c, f);
                        (p == 0 ? q : p == 1 ? k : v)[(h * T + t) * dh + j] = s;
                    }
            for (int t = 0; t < T; ++t) {
                double mx = -1e300, *Ar = &A[(h * T + t) * T];
                for (int s = 0; s < T; ++s) {
                    double z = 0;
                    for (int j = 0; j < dh; ++j)
                        z += q[(h * T + t) * dh + j] * k[(h * T + s) * dh + j];
                    Ar[s] = z * GD::scale;
                    mx = std::max(mx, Ar[s]);
                }
                double sum = 0;
                for (int s = 0; s < T; ++s) sum += (Ar[s] = std::exp(Ar[s] - mx));
                for (int s = 0; s < T; ++s) csum[h * T + s] += (Ar[s] /= sum);
            }
            for (int j = 0; j < dh; ++j) {
                double z = 0;
                for (int s = 0; s < T; ++s) z += csum[h * T + s] * v[(h * T + s) * dh + j];
                ab[h * dh + j] = z / T;
            }
        }
        std::vector<double> au(na, 0.0);
        for (int t = 0; t < To; ++t)
            for (int f = 0; f < td; ++f) au[f] += X[t * nf + f];
        for (int f = 0; f < G; ++f) au[td + f] = X[To * nf + td + f];
        au[na - 1] = 1.0;
        double rhat = br2;
        std::vector<double> pre(W), dh_(W);
        for (int m = 0; m < W; ++m) {
            double z = br1[m];
            for (int j = 0; j < d; ++j) z += (double)hc[kC1 + m * d + j] * ab[j];
            for (int f = 0; f < na; ++f) z += (double)hc[kC2 + m * na + f] * au[f];
            pre[m] = z;
            rhat += z / (1 + std::exp(-z)) * wr2[m];
        }
        const double e = rhat - r[i], dr = 2 * e / rows;
        for (int m = 0; m < W; ++m) {
            const double sg = 1 / (1 + std::exp(-pre[m]));
            dh_[m] = dr * wr2[m] * sg * (1 + pre[m] * (1 - sg));
            wHead[m] += dh_[m];
            wHead[W + m] += dr * pre[m] * sg;
            wDh.push_back(dh_[m]);
            gDh.push_back(dhv[(size_t)i * ldh + m]);
        }
        wHead[2 * W] += dr;
        wHead[2 * W + 1] += e * e;
        for (int j = 0; j < d; ++j) {
            wA.push_back(ab[j]);
            gA.push_back(abar[(size_t)i * ld + j]);
        }
        for (int f = 0; f < na; ++f) {
            wAug.push_back(au[f]);
            gAug.push_back(aug[(size_t)i * ld + f]);
        }
        // The backward with dā = dh C1.
        for (int h = 0; h < H; ++h) {
            std::vector<double> gam(dh), beta(T), dS(T * T);
            for (int j = 0; j < dh; ++j) {
                double z = 0;
                for (int m = 0; m < W; ++m) z += dh_[m] * hc[kC1 + m * d + h * dh + j];
                gam[j] = z / T;
            }
            for (int s = 0; s < T; ++s) {
                double b = 0;
                for (int j = 0; j < dh; ++j) b += gam[j] * v[(h * T + s) * dh + j];
                beta[s] = b;
            }
            const double *Ah = &A[h * T * T];
            for (int t = 0; t < T; ++t) {
                double rs = 0;
                for (int s = 0; s < T; ++s) rs += Ah[t * T + s] * beta[s];
                for (int s = 0; s < T; ++s)
                    dS[t * T + s] = Ah[t * T + s] * (beta[s] - rs) * GD::scale;
            }
            for (int t = 0; t < T; ++t)
                for (int j = 0; j < dh; ++j) {
                    double dq = 0, dk = 0;
                    for (int s = 0; s < T; ++s) {
                        dq += dS[t * T + s] * k[(h * T + s) * dh + j];
                        dk += dS[s * T + t] * q[(h * T + s) * dh + j];
                    }
                    const double g3[3] = {dq, dk, csum[h * T + t] * gam[j]};
                    for (int p = 0; p < 3; ++p) {
                        const int c = p * d + h * dh + j;
                        Sref[(size_t)t * d3 + c] += g3[p];
                        for (int f = 0; f < nf; ++f) {
                            if (f < td) M1[(size_t)c * td + f] += g3[p] * X[t * nf + f];
                            else M2[(size_t)c * G + f - td] += g3[p] * X[t * nf + f];
                        }
                    }
                }
        }
    }
    // The kernel's partial rows, summed over the blocks.
    std::vector<double> gS(Sref.size(), 0.0), gM1(M1.size(), 0.0), gM2(M2.size(), 0.0);
    for (int b = 0; b < blocks; ++b) {
        const float *row = partial.data() + (size_t)b * GD::pw;
        for (size_t e = 0; e < gS.size(); ++e) gS[e] += row[e];
        for (size_t e = 0; e < gM1.size(); ++e) gM1[e] += row[Sref.size() + e];
        for (size_t e = 0; e < gM2.size(); ++e) gM2[e] += row[Sref.size() + M1.size() + e];
        for (int e = 0; e < kPartW; ++e) gHead[e] += ph[(size_t)b * kPartW + e];
    }
    std::vector<double> wM(M1), gM(gM1);
    wM.insert(wM.end(), M2.begin(), M2.end());
    gM.insert(gM.end(), gM2.begin(), gM2.end());
    const double eA = rel(wA, gA), eAug = rel(wAug, gAug), eDh = rel(wDh, gDh),
                 eH = rel(wHead, gHead), eS = rel(Sref, gS), eM = rel(wM, gM);
    const double bound = 1e-2;
    const bool ok = eA <= bound && eAug <= 1e-6 && eDh <= bound && eH <= bound && eS <= bound &&
                    eM <= bound;  // false for NaN
    printf("fused B=%d blocks=%d: abar %.2e  aug %.2e  dh %.2e  head sums %.2e  S %.2e  M %.2e"
           "  %s\n", B, blocks, eA, eAug, eDh, eH, eS, eM, ok ? "ok" : "FAILED");
    return ok;
}


// Runs a plain SIMT kernel's threads one after another (it has no barrier).
template <class F>
void each_thread(int outputs, F &&kernel) {
    blockDim.x = 256;
    gridDim.x = (outputs + 255) / 256;
    for (unsigned b = 0; b < gridDim.x; ++b)
        for (unsigned t = 0; t < 256; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            kernel();
        }
}

bool head(int B, unsigned seed) {
    constexpr int d = GD::d, na = GD::na, td = GD::td, G = GD::G, W = kW, T = GD::T;
    Geom g{};
    g.B = B; g.D = GD::D; g.O = GD::O; g.G = G; g.td = td; g.To = GD::To; g.T = T; g.d = d;
    g.d3 = GD::d3; g.heads = GD::heads; g.dh = GD::dh; g.hh = W; g.na = na; g.scale = GD::scale;
    g.c_wg = GD::c_wg; g.c_cc = GD::c_cc; g.c_eb = GD::c_eb; g.c_total = GD::c_eb + d;
    g.pw = GD::pw;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto draw = [&](size_t n) {
        std::vector<float> v(n);
        for (auto &e : v) e = 0.3f * nd(rng);
        return v;
    };
    const std::vector<float> Wo = draw(d * d), Wr1 = draw(W * d), Wt = draw(d * td),
                             Wg = draw(d * G), bo = draw(d), comp = draw(g.c_total);
    const int ldG = (d + na + 3) / 4 * 4, ldP = 2 * d + na + 7;
    std::vector<float> hc((size_t)kG + W * ldG, NAN), prod((size_t)(W + d) * ldP, NAN);
    each_thread(W * d + W * na, [&] {
        k_fused_head_comp(g, Wo.data(), Wr1.data(), Wt.data(), Wg.data(), bo.data(), comp.data(),
                          hc.data());
    });
    // Random rows: ā, aug (its last column 1), dh; G = dhᵀ [ā | aug] in float64.
    std::vector<double> ab((size_t)B * d), au((size_t)B * na), dh((size_t)B * W);
    for (auto &e : ab) e = nd(rng);
    for (int i = 0; i < B; ++i)
        for (int f = 0; f < na; ++f) au[(size_t)i * na + f] = f == na - 1 ? 1.0 : nd(rng);
    for (auto &e : dh) e = nd(rng);
    for (int m = 0; m < W; ++m)
        for (int c = 0; c < ldG; ++c) {
            double s = 0;
            for (int i = 0; i < B; ++i)
                s += dh[(size_t)i * W + m] * (c < d        ? ab[(size_t)i * d + c]
                                              : c < d + na ? au[(size_t)i * na + c - d]
                                                           : 0.0);
            hc[kG + m * ldG + c] = (float)s;
        }
    each_thread(2 * W * d + d * na, [&] {
        k_fused_head_grads(g, hc.data() + kG, ldG, Wo.data(), Wr1.data(), Wt.data(), Wg.data(),
                           bo.data(), comp.data(), prod.data(), ldP);
    });
    // The unfactored head in float64.
    std::vector<double> wh, gh, wWr1((size_t)W * d, 0.0), wWo((size_t)d * d, 0.0),
        wR((size_t)d * na, 0.0), gWr1, gWo, gR;
    for (int i = 0; i < B; ++i) {
        std::vector<double> pool(d), dpool(d, 0.0);
        const double *a = &ab[(size_t)i * d], *u = &au[(size_t)i * na], *dhi = &dh[(size_t)i * W];
        for (int x = 0; x < d; ++x) {
            double e = comp[GD::c_eb + x];
            for (int k = 0; k < td; ++k) e += (double)Wt[x * td + k] * u[k];
            for (int k = 0; k < G; ++k) e += (double)Wg[x * G + k] * u[td + k];
            double p = e / T + bo[x];
            for (int j = 0; j < d; ++j) p += a[j] * Wo[x * d + j];
            pool[x] = p;
        }
        for (int m = 0; m < W; ++m) {
            double h = 0, hf = 0;
            for (int x = 0; x < d; ++x) h += pool[x] * Wr1[m * d + x];
            for (int j = 0; j < d; ++j) hf += (double)hc[kC1 + m * d + j] * a[j];
            for (int f = 0; f < na; ++f) hf += (double)hc[kC2 + m * na + f] * u[f];
            wh.push_back(h);
            gh.push_back(hf);
            for (int x = 0; x < d; ++x) dpool[x] += dhi[m] * Wr1[m * d + x];
        }
        for (int m = 0; m < W; ++m)
            for (int x = 0; x < d; ++x) wWr1[(size_t)m * d + x] += dhi[m] * pool[x];
        for (int x = 0; x < d; ++x) {
            for (int j = 0; j < d; ++j) wWo[(size_t)x * d + j] += dpool[x] * a[j];
            for (int f = 0; f < na; ++f) wR[(size_t)x * na + f] += dpool[x] * u[f];
        }
    }
    bool c1t = true;
    for (int m = 0; m < W; ++m)
        for (int j = 0; j < d; ++j) c1t &= hc[kC1T + j * W + m] == hc[kC1 + m * d + j];
    for (int m = 0; m < W; ++m)
        for (int x = 0; x < d; ++x) gWr1.push_back(prod[(size_t)m * ldP + x]);
    for (int x = 0; x < d; ++x) {
        for (int j = 0; j < d; ++j) gWo.push_back(prod[(size_t)(W + x) * ldP + d + j]);
        for (int f = 0; f < na; ++f) gR.push_back(prod[(size_t)(W + x) * ldP + 2 * d + f]);
    }
    const double eh = rel(wh, gh), e1 = rel(wWr1, gWr1), e2 = rel(wWo, gWo), e3 = rel(wR, gR);
    const bool ok = c1t && eh <= 1e-6 && e1 <= 1e-6 && e2 <= 1e-6 && e3 <= 1e-6;
    printf("head B=%d: h = C1 abar + C2 aug %.2e  dWr1 %.2e  dWo %.2e  R %.2e%s  %s\n", B, eh, e1,
           e2, e3, c1t ? "" : "  C1T is not C1's transpose", ok ? "ok" : "FAILED");
    return ok;
}

}  // namespace

int main() {
    bool ok = true;
    ok &= run(7, 1, 11);
    ok &= run(7, 2, 12);  // blocks of 4 and 3 transitions
    ok &= run(7, 3, 13);
    ok &= head(9, 14);
    return ok ? 0 : 1;
}
