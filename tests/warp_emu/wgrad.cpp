// CPU warp emulation of the weight-gradient kernel (cuda/wgrad.cu; run by tests/warp_emu/run.sh):
// dW = Gᵀ X over K rows, each block's warps run together (its cp.async ring and __syncthreads
// are block-wide), the chunk partials then added in chunk order (reduce_partials' sum, tested
// on its own by tests/test_cuda_reduce.cpp). Cases: both tile widths (64 and 128 columns),
// partial tiles in both dimensions, strided rows, chunks that end inside a stage and a last
// chunk of a few rows. Against float64: relative L2 error within 5e-3 (TF32 operands), and every
// element within 2.5e-3 of Σ_k |g x| (the bound of tests/test_cuda_gemm.cpp on the GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "mma_emu.h"
#include "rel_errors.h"

#include "wgrad_body.h"

using namespace fh::cuda;

namespace {

// Every block of `grid`, its `threads` threads together.
template <class Kernel>
void run_blocks(Dim3 grid, int threads, size_t smem_bytes, Kernel &&kernel) {
    gridDim = grid;
    blockDim = Dim3{(unsigned)threads, 1, 1};
    std::vector<float4> sm(smem_bytes / 16 + 1);
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                for (auto &f : sm) f = make_float4(NAN, NAN, NAN, NAN);
                gSmem = sm.data();
                std::vector<Warp> W((threads + 31) / 32);
                BlockBar bar(threads);
                std::vector<std::thread> th;
                for (int l = 0; l < threads; ++l)
                    th.emplace_back([&, l] {
                        threadIdx = Dim3{(unsigned)l, 0, 0};
                        blockIdx = Dim3{x, y, z};
                        gW = &W[l / 32];
                        gBlock = &bar;
                        kernel();
                    });
                for (auto &t : th) t.join();
            }
}

struct Case {
    int M, N, K, ldg, ldx, chunk_rows;
};

template <int BN>
bool run_case(const Case &t, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> G((size_t)t.K * t.ldg), X((size_t)t.K * t.ldx);
    for (float &v : G) v = u(rng);
    for (float &v : X) v = u(rng);
    const int chunks = (t.K + t.chunk_rows - 1) / t.chunk_rows;
    std::vector<float> part((size_t)chunks * t.M * t.N, NAN);
    const WgradArgs a{G.data(), X.data(), t.ldg, t.ldx, t.M, t.N, t.K, t.chunk_rows, part.data()};
    using Gm = Geom<BN>;
    run_blocks(Dim3{(unsigned)((t.N + BN - 1) / BN), (unsigned)((t.M + kBM - 1) / kBM),
                    (unsigned)chunks},
               Gm::kThreads, Gm::kSmem, [&] { k_wgrad<BN>(a); });
    // The chunks in order, as reduce_partials adds them (in float64).
    std::vector<double> C((size_t)t.M * t.N, 0.0);
    for (int c = 0; c < chunks; ++c)
        for (size_t e = 0; e < C.size(); ++e) C[e] += part[(size_t)c * C.size() + e];

    RelErrors err({"dW"});
    double worst = 0;
    for (int i = 0; i < t.M; ++i)
        for (int j = 0; j < t.N; ++j) {
            double want = 0, mag = 0;
            for (int k = 0; k < t.K; ++k) {
                const double p = (double)G[(size_t)k * t.ldg + i] * X[(size_t)k * t.ldx + j];
                want += p;
                mag += std::fabs(p);
            }
            const double got = C[(size_t)i * t.N + j];
            err.add(0, got, want);
            const double e = std::fabs(got - want) / mag;
            worst = std::isfinite(e) ? std::max(worst, e) : 1e30;
        }
    char label[128];
    snprintf(label, sizeof label, "BN=%3d M=%3d N=%3d K=%3d chunk %3d (worst %.1e of Σ|gx|)", BN,
             t.M, t.N, t.K, t.chunk_rows, worst);
    return err.report(label, 5e-3) && worst <= 2.5e-3;
}

}  // namespace

int main() {
    bool ok = true;
    // 64-wide tiles: N = 64 one tile; M = 192 two row tiles, the second half empty; chunks of
    // 128 rows (two stages), the last of 12 rows; then N = 40, a partial tile.
    ok &= run_case<64>({192, 64, 140, 196, 64, 128}, 1);
    ok &= run_case<64>({128, 40, 100, 128, 44, 64}, 2);
    // 128-wide tiles: N = 100 (a partial tile), strided rows, chunks of one stage; then a chunk
    // longer than the rows.
    ok &= run_case<128>({64, 100, 77, 72, 108, 64}, 3);
    ok &= run_case<128>({128, 256, 40, 128, 256, 192}, 4);
    return ok ? 0 : 1;
}
