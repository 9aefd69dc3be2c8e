// CPU warp emulation of IQN's dWφ kernel (cuda/iqn_dwphi.cu; run by tests/warp_emu/run.sh):
// dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r) from random dφpre and τ, the blocks' partials added
// in double, against float64, in its TF32 and bfloat16 instances, at 197 rows (a block's last
// stage partly filled) in chunks of one, two and four 64-row stages (the ring's second slot, and
// both cosᵀ buffers), and at 300 rows in one block of five stages. Each block's 8 warps run
// together (__syncthreads their barrier), since they share the staged rows and features;
// cp.async copies land at the thread's cp_async_wait_all() (inc/stage.cuh), so a slot read
// before its stage's wait shows. Exit status 1 on an error over 5e-3 (TF32) or 2e-2
// (bfloat16), the bounds of tests/test_cuda_iqn.cpp, which runs the kernel on the GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstddef>
#include <random>
#include <type_traits>
#include <vector>

#include "grid.h"
#include "mma_emu.h"
#include "rel_errors.h"

#include "dwphi_body.h"

using namespace fh::cuda::iqn;

// E: float (TF32 products) or __nv_bfloat16 (FH_MATH_BF16's instance, on dφpre rounded to
// bfloat16, against the float64 sums of the rounded values).
template <class E>
bool check(size_t R, size_t chunk) {
    constexpr bool b16 = !std::is_same_v<E, float>;
    std::mt19937 rng(5 + (unsigned)R + (unsigned)chunk);
    std::normal_distribution<float> nd(0.0f, 1e-3f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> dphi(R * kHq), tau(R);
    std::vector<E> in(R * kHq);
    for (size_t k = 0; k < dphi.size(); ++k) {
        if constexpr (b16) {
            in[k] = __float2bfloat16_rn(nd(rng));
            dphi[k] = bf16_to_f(in[k].x);
        } else {
            dphi[k] = in[k] = nd(rng);
        }
    }
    for (float &t : tau) t = unit(rng);
    const int blocks = (int)((R + chunk - 1) / chunk);
    std::vector<float> part((size_t)blocks * kDwOut, NAN);
    run_grid(
        blocks, kDwWarps, DwLayout<E>::kSmem, [] {},
        [&] { k_iqn_dwphi<E>(in.data(), tau.data(), R, chunk, part.data()); }, kDwWarps);
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
    snprintf(label, sizeof label, "%s R=%zu, chunks of %zu rows (%d blocks)",
             b16 ? "bf16" : "tf32", R, chunk, blocks);
    return err.report(label, b16 ? 2e-2 : 5e-3);
}

int main() {
    bool ok = true;
    for (const size_t chunk : {64, 128, 256}) {
        ok &= check<float>(197, chunk);
        ok &= check<__nv_bfloat16>(197, chunk);
    }
    ok &= check<float>(300, 320);
    ok &= check<__nv_bfloat16>(300, 320);
    return ok ? 0 : 1;
}
