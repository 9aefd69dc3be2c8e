#pragma once
// One IQN net for the emulations of IQN's fused passes (iqn_online.cpp, iqn_target.cpp,
// iqn_backward.cpp): random weights at the widths the kernels are written for, and SPEC §4's
// forward of one row in float64.
#include <cmath>
#include <random>
#include <vector>

#include "iqn_fused.cuh"

inline double silu(double z) { return z / (1.0 + std::exp(-z)); }

struct IqnNet {
    static constexpr int Hq = fh::cuda::iqn::kHq, C = fh::cuda::iqn::kC;
    std::vector<float> psi, Wphi, bphi, Wm, bm, wz, bz;  // ψ [B, Hq] of B transitions, then the net
    // Drawn from rng in this order (standard normals times a scale that gives Z structure).
    IqnNet(int B, std::mt19937 &rng) {
        std::normal_distribution<float> nd(0.f, 1.f);
        auto vec = [&](size_t n, float s) {
            std::vector<float> v(n);
            for (auto &x : v) x = s * nd(rng);
            return v;
        };
        psi = vec((size_t)B * Hq, 0.8f);
        Wphi = vec((size_t)Hq * C, 0.25f);
        bphi = vec(Hq, 0.3f);
        Wm = vec((size_t)Hq * Hq, 0.12f);
        bm = vec(Hq, 0.3f);
        wz = vec(Hq, 0.3f);
        bz = vec(1, 0.5f);
    }

    // Row (transition i, quantile fraction τ): cos(π k τ), φraw = cos Wφᵀ, m = ψ_i ⊙ SiLU(φraw +
    // bφ), the pre-activations h + bm and Z = SiLU(h + bm)·w_z + b_z.
    struct Row {
        std::vector<double> cos, phi, m, pre;
        double z;
    };
    Row forward(size_t i, double tau) const {
        Row r{std::vector<double>(C), std::vector<double>(Hq), std::vector<double>(Hq),
              std::vector<double>(Hq), bz[0]};
        for (int k = 0; k < C; ++k) r.cos[k] = std::cos(M_PI * k * tau);
        for (int j = 0; j < Hq; ++j) {
            double s = 0;
            for (int k = 0; k < C; ++k) s += r.cos[k] * Wphi[(size_t)j * C + k];
            r.phi[j] = s;
            r.m[j] = psi[i * Hq + j] * silu(s + bphi[j]);
        }
        for (int j = 0; j < Hq; ++j) {
            double h = bm[j];
            for (int k = 0; k < Hq; ++k) h += r.m[k] * Wm[(size_t)j * Hq + k];
            r.pre[j] = h;
            r.z += silu(h) * wz[j];
        }
        return r;
    }
};
