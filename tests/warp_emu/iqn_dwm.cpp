// CPU warp emulation of IQN's dWm kernel (cuda/iqn_dwm.cu, the FOXHUNT_TRIAL_IQN_DWM trial; run
// by tests/warp_emu/run.sh): dWm[j][k] = Σ_r dhpre[r][j] m[r][k] with m recomputed from τ, ψ,
// Wφ and bφ, the blocks' partials added in double, against float64
// (m = ψ_i ⊙ SiLU(cos(π k' τ) Wφᵀ + bφ) evaluated in double), at N = 8 and 3 (a transition's
// rows across a row tile), 197 rows (a partly filled last stage) in chunks of one, two and four
// 64-row stages, and 300 rows in one block. Each block's 16 warps run together (__syncthreads
// their barrier); cp.async copies land at the thread's cp_async_wait_all() (inc/stage.cuh).
// Exit status 1 on an error over 5e-3 (TF32 operands on both products).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <random>
#include <vector>

#include "grid.h"
#include "mma_emu.h"
#include "rel_errors.h"

#include "dwm_body.h"

using namespace fh::cuda::iqn;

bool check(int N, size_t R, size_t chunk) {
    std::mt19937 rng(11 + (unsigned)R + (unsigned)chunk + (unsigned)N);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    const int B = (int)((R + N - 1) / N);
    std::vector<float> dh(R * kHq), tau(R), psi((size_t)B * kHq), Wphi(kHq * kC), bphi(kHq);
    for (float &x : dh) x = 1e-3f * nd(rng);
    for (float &t : tau) t = unit(rng);
    for (float &x : psi) x = 0.8f * nd(rng);
    for (float &x : Wphi) x = 0.25f * nd(rng);
    for (float &x : bphi) x = 0.3f * nd(rng);
    const int blocks = (int)((R + chunk - 1) / chunk);
    std::vector<float> part((size_t)blocks * kMwOut, NAN);
    run_grid(
        blocks, kMwWarps, kMwSmemBytes, [] {},
        [&] {
            k_iqn_dwm(dh.data(), tau.data(), psi.data(), Wphi.data(), bphi.data(), N, R, chunk,
                      part.data());
        },
        kMwWarps);
    std::vector<double> m(R * kHq);
    for (size_t r = 0; r < R; ++r)
        for (int j = 0; j < kHq; ++j) {
            double z = bphi[j];
            for (int k = 0; k < kC; ++k)
                z += std::cos(M_PI * k * (double)tau[r]) * Wphi[(size_t)j * kC + k];
            m[r * kHq + j] = psi[(r / N) * kHq + j] * z / (1.0 + std::exp(-z));
        }
    RelErrors err({"dWm"});
    for (int j = 0; j < kHq; ++j)
        for (int k = 0; k < kHq; ++k) {
            double want = 0.0, got = 0.0;
            for (size_t r = 0; r < R; ++r) want += (double)dh[r * kHq + j] * m[r * kHq + k];
            for (int b = 0; b < blocks; ++b) got += part[(size_t)b * kMwOut + j * kHq + k];
            err.add(0, got, want);
        }
    char label[96];
    snprintf(label, sizeof label, "N=%d R=%zu, chunks of %zu rows (%d blocks)", N, R, chunk,
             blocks);
    return err.report(label, 5e-3);
}

int main() {
    bool ok = true;
    for (const size_t chunk : {64, 128, 256}) ok &= check(8, 197, chunk);
    ok &= check(3, 197, 128);
    ok &= check(8, 300, 320);
    return ok ? 0 : 1;
}
