// CPU warp emulation of IQN's dWφ kernel (cuda/iqn_dwphi.cu; run by tests/warp_emu/run.sh):
// dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r) from random dφpre and τ, the blocks' partials added
// in double, against float64, at 197 rows (a block's last stage partly filled) in chunks of one,
// two and four 64-row stages (the ring's second slot, and both cosᵀ buffers), and at 300 rows in
// one block of five stages. Each block's 8 warps run together (__syncthreads their barrier),
// since they share the staged rows and features; cp.async copies land at the thread's
// cp_async_wait_all() (inc/stage.cuh), so a slot read before its stage's wait shows. Exit status 1 on an error over 5e-3 (TF32's bound in
// tests/test_cuda_iqn.cpp, which runs the kernel on the GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstddef>
#include <random>
#include <vector>

#include "grid.h"
#include "mma_emu.h"
#include "rel_errors.h"

#include "dwphi_body.h"

using namespace fh::cuda::iqn;

bool check(size_t R, size_t chunk) {
    std::mt19937 rng(5 + (unsigned)R + (unsigned)chunk);
    std::normal_distribution<float> nd(0.0f, 1e-3f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> dphi(R * kHq), tau(R);
    for (float &x : dphi) x = nd(rng);
    for (float &t : tau) t = unit(rng);
    const int blocks = (int)((R + chunk - 1) / chunk);
    std::vector<float> part((size_t)blocks * kDwOut, NAN);
    run_grid(
        blocks, kDwWarps, kDwSmemBytes, [] {},
        [&] { k_iqn_dwphi(dphi.data(), tau.data(), R, chunk, part.data()); }, kDwWarps);
    RelErrors err({"dWphi"});
    for (int j = 0; j < kHq; ++j)
        for (int k = 0; k < kC; ++k) {
            double want = 0.0, got = 0.0;
            for (size_t r = 0; r < R; ++r)
                want += (double)dphi[r * kHq + j] * std::cos(M_PI * k * (double)tau[r]);
            for (int b = 0; b < blocks; ++b) got += part[(size_t)b * kDwOut + j * kC + k];
            err.add(0, got, want);
        }
    char label[96];
    snprintf(label, sizeof label, "R=%zu, chunks of %zu rows (%d blocks)", R, chunk, blocks);
    return err.report(label, 5e-3);
}

int main() {
    bool ok = true;
    for (const size_t chunk : {64, 128, 256}) ok &= check(197, chunk);
    ok &= check(300, 320);
    return ok ? 0 : 1;
}
