// CPU warp emulation of IQN's fused backward through m (cuda/iqn_backward.cu; run by
// tests/warp_emu/run.sh): on 37 transitions (a partly filled last tile) at N = 8 (compiled in,
// the ψ and ψpre rows staged by cp.async) and 4, 16, 2, 1 (read at run time: every shape of the Σ_n
// sums), TF32 and bfloat16 products, on 2 blocks (so a block walks more than one tile): dφpre,
// dψpre and the warps' column sums of dbφ and dbψ (each warp's row as the kernel's
// store_colsums writes it, added over the warps) against a float64 evaluation of
//   φraw = cos(π k τ) Wφᵀ,  dm = dhpre Wm,  dφpre = dm ⊙ ψ ⊙ SiLU'(φraw + bφ),
//   dψpre_i = (Σ_n dm_in ⊙ SiLU(φraw_in + bφ)) ⊙ SiLU'(ψpre_i + bψ).
// Each block is staged thread by thread, then its warps run one after another; cp.async copies
// land at the thread's cp_async_wait_all() (inc/stage.cuh). Exit status 1 on an error over its
// bound: 5e-3 in TF32, 3e-2 in bfloat16 (tests/test_cuda_iqn.cpp's, which runs the kernel on the
// GPU).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "grid.h"
#include "iqn_ref.h"
#include "mma_emu.h"
#include "rel_errors.h"

#include "backward_body.h"

std::vector<double> gRows;  // [blocks · warps, 2·kHq]: each warp's dbφ | dbψ row
void sim_record(const float (&acc)[2][4]) {
    using namespace fh::cuda::iqn;
    const size_t thread = blockIdx.x * blockDim.x + threadIdx.x;
    store_colsums(gRows.data() + thread / 32 * (2 * kHq), acc);
}

using namespace fh::cuda::iqn;

namespace {

struct Out {
    std::vector<float> dphi, dpsi;  // dφpre [R, Hq] (TF32: a.phi; BF16: dphi16), dψpre [B, Hq]
    std::vector<double> sums;       // [dbφ | dbψ], the warps' rows added
    bool phi_touched = false;       // BF16 wrote the float32 dφpre buffer
};

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double dsilu(double z) { return sigmoid(z) * (1.0 + z * (1.0 - sigmoid(z))); }

template <int NC, bool B16>
Out run(BackwardArgs a, const std::vector<float> &dh, int blocks) {
    using E = std::conditional_t<B16, __nv_bfloat16, float>;
    const size_t R = (size_t)a.B * a.N;
    Out o;
    std::vector<float> phi(R * kHq, NAN);  // dφpre out (TF32); BF16 must leave it
    std::vector<uint16_t> dh16(R * kHq), dphi16(R * kHq, 0xffff);
    for (size_t k = 0; k < dh16.size(); ++k) dh16[k] = bf16_rne(dh[k]);
    o.dpsi.assign((size_t)a.B * kHq, NAN);
    a.phi = phi.data();
    a.dpsi = o.dpsi.data();
    a.dh = dh.data();
    if (B16) {
        a.dh16 = reinterpret_cast<const __nv_bfloat16 *>(dh16.data());
        a.dphi16 = reinterpret_cast<__nv_bfloat16 *>(dphi16.data());
    }
    gRows.assign((size_t)blocks * kBwdWarps * 2 * kHq, 0.0);
    run_grid(
        blocks, kBwdWarps, kBwdSmemBytes,
        [&] {
            float *WmT = reinterpret_cast<float *>(gSmem);
            stage_wmT<E, kLDM>(reinterpret_cast<E *>(WmT), a.Wm);
            for (int e = threadIdx.x; e < kHq; e += blockDim.x) WmT[kHq * kLDM + e] = a.bphi[e];
            stage_matrix<kHq, kC>(reinterpret_cast<E *>(WmT + kHq * kLDM + kHq), kLDP, a.Wphi);
            // bψ after the warps' ψ and ψpre rows (N = 8 reads it there)
            float *bps = WmT + kHq * kLDM + kHq + kHq * kLDP + kBwdWarps * 4 * kHq;
            for (int e = threadIdx.x; e < kHq; e += blockDim.x) bps[e] = a.bpsi[e];
        },
        [&] { k_iqn_backward<NC, B16>(a); });
    o.dphi.resize(R * kHq);
    for (size_t k = 0; k < R * kHq; ++k) o.dphi[k] = B16 ? bf16_to_f(dphi16[k]) : phi[k];
    o.phi_touched = B16 && std::any_of(phi.begin(), phi.end(), [](float x) { return x == x; });
    o.sums.assign(2 * kHq, 0.0);
    for (size_t r = 0; r < gRows.size(); ++r) o.sums[r % (2 * kHq)] += gRows[r];
    return o;
}

}  // namespace

int main() {
    const int Hq = kHq, B = 37;
    bool ok = true;
    for (int N : {8, 4, 16, 2, 1}) {
        const size_t R = (size_t)B * N;
        std::mt19937 rng(11 + N);
        const IqnNet net(B, rng);  // ψ, Wφ, bφ and Wm (its bm, w_z and b_z unused)
        std::normal_distribution<float> nd(0.f, 1.f);
        auto vec = [&](size_t n, float s) {
            std::vector<float> v(n);
            for (auto &x : v) x = s * nd(rng);
            return v;
        };
        const std::vector<float> &Wm = net.Wm, &bphi = net.bphi, &psi = net.psi;
        const std::vector<float> psi_pre = vec((size_t)B * Hq, 1.0f), bpsi = vec(Hq, 0.3f),
                                 dh = vec(R * Hq, 0.01f);
        std::uniform_real_distribution<float> ud(0.f, 1.f);
        std::vector<float> tau(R);
        for (auto &t : tau) t = ud(rng);
        BackwardArgs a{};
        a.Wm = Wm.data();
        a.bphi = bphi.data();
        a.psi = psi.data();
        a.psi_pre = psi_pre.data();
        a.bpsi = bpsi.data();
        a.B = B;
        a.N = N;
        a.tau = tau.data();
        a.Wphi = net.Wphi.data();
        // The float64 evaluation, φraw = cos(π k τ) Wφᵀ first (iqn_ref.h's forward).
        std::vector<double> phi(R * Hq);
        for (size_t r = 0; r < R; ++r) {
            const IqnNet::Row row = net.forward(r / N, tau[r]);
            std::copy(row.phi.begin(), row.phi.end(), phi.begin() + r * Hq);
        }
        std::vector<double> dphi(R * Hq), dpsi((size_t)B * Hq, 0.0), dbphi(Hq, 0.0),
            dbpsi(Hq, 0.0);
        for (size_t r = 0; r < R; ++r) {
            const size_t i = r / N;
            for (int j = 0; j < Hq; ++j) {
                double dm = 0;
                for (int k = 0; k < Hq; ++k) dm += (double)dh[r * Hq + k] * Wm[(size_t)k * Hq + j];
                const double z = phi[r * Hq + j] + bphi[j];
                dphi[r * Hq + j] = dm * psi[i * Hq + j] * dsilu(z);
                dbphi[j] += dphi[r * Hq + j];
                dpsi[i * Hq + j] += dm * z * sigmoid(z);
            }
        }
        for (size_t i = 0; i < (size_t)B; ++i)
            for (int j = 0; j < Hq; ++j) {
                dpsi[i * Hq + j] *= dsilu((double)psi_pre[i * Hq + j] + bpsi[j]);
                dbpsi[j] += dpsi[i * Hq + j];
            }
        for (const bool b16 : {false, true}) {
            const Out got = b16 ? (N == kFixedN ? run<kFixedN, true>(a, dh, 2)
                                                : run<0, true>(a, dh, 2))
                                : (N == kFixedN ? run<kFixedN, false>(a, dh, 2)
                                                : run<0, false>(a, dh, 2));
            RelErrors err({"dphi", "dpsi", "dbphi", "dbpsi"});
            auto add = [&](int k, double g, double w) { err.add(k, g, w); };
            for (size_t k = 0; k < R * Hq; ++k) add(0, got.dphi[k], dphi[k]);
            for (size_t k = 0; k < (size_t)B * Hq; ++k) add(1, got.dpsi[k], dpsi[k]);
            for (int j = 0; j < Hq; ++j) {
                add(2, got.sums[j], dbphi[j]);
                add(3, got.sums[Hq + j], dbpsi[j]);
            }
            char label[64];
            snprintf(label, sizeof label, "N=%2d %s backward vs float64", N, b16 ? "bf16" : "tf32");
            ok &= err.report(label, b16 ? 3e-2 : 5e-3);
            if (got.phi_touched) {
                printf("%s: the bfloat16 instance wrote the float32 phi buffer\n", label);
                ok = false;
            }
        }
    }
    return ok ? 0 : 1;
}
