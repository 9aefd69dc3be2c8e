// CPU warp emulation of IQN's dWφ kernel (cuda/iqn_dwphi.cu; run by tests/warp_emu/run.sh):
// dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r) from random dφpre and τ, the blocks' partials added
// in double, against float64, at 197 rows (a block's last stage partly filled) in chunks of 64
// and 128 rows (one and two stages a block: the ring's second slot) and at 300 rows in one
// block of five stages. Each block's 8 warps run together (__syncthreads their barrier), since
// they share the staged rows and features; cp.async copies land at the thread's
// cp_async_wait_all() (inc/stage.cuh). Exit status 1 on an error over 5e-3 (TF32's bound in
// tests/test_cuda_iqn.cpp, which runs the kernel on the GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "grid.h"
#include "mma_emu.h"
#include "rel_errors.h"

#include "dwphi_body.h"

using namespace fh::cuda::iqn;

int main() {
    bool ok = true;
    struct Case {
        size_t R, chunk;
    };
    for (const Case c : {Case{197, 64}, Case{197, 128}, Case{300, 320}}) {
        std::mt19937 rng(5 + (unsigned)c.R + (unsigned)c.chunk);
        std::normal_distribution<float> nd(0.0f, 1e-3f);
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        std::vector<float> dphi(c.R * kHq), tau(c.R);
        for (float &x : dphi) x = nd(rng);
        for (float &t : tau) t = unit(rng);
        const int blocks = (int)((c.R + c.chunk - 1) / c.chunk);
        std::vector<float> part((size_t)blocks * kDwOut, NAN);
        run_grid(
            blocks, kDwWarps, kDwSmemBytes, [] {},
            [&] { k_iqn_dwphi(dphi.data(), tau.data(), c.R, c.chunk, part.data()); }, kDwWarps);
        RelErrors err({"dWphi"});
        for (int j = 0; j < kHq; ++j)
            for (int k = 0; k < kC; ++k) {
                double want = 0.0, got = 0.0;
                for (size_t r = 0; r < c.R; ++r)
                    want += (double)dphi[r * kHq + j] * std::cos(M_PI * k * (double)tau[r]);
                for (int b = 0; b < blocks; ++b) got += part[(size_t)b * kDwOut + j * kC + k];
                err.add(0, got, want);
            }
        char label[96];
        snprintf(label, sizeof label, "R=%zu, chunks of %zu rows (%d blocks)", c.R, c.chunk,
                 blocks);
        ok &= err.report(label, 5e-3);
    }
    return ok ? 0 : 1;
}
