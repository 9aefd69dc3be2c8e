// CPU emulation of CQL's head sums in one pass (cuda/cql.cu's k_cql_head_sums; run by
// tests/warp_emu/run.sh): each block's 256 threads at once, meeting at __syncthreads, for every
// branch of the grid's y. The blocks' partial rows [dU_b (A·HB) | de_b (A)] are added in double
// and compared per element with a float64 evaluation of dU_b = dzc_bᵀ g_b and de_b = Σ_i dzc_b
// (within 1e-12 of Σ |terms|: the kernel sums exact float products in double), and every slot
// of the partial rows must be written (they start as NaN). Shapes: 130 chunks of 64 rows on 128
// blocks (blocks 0 and 1 take a third chunk), a last partial chunk, HB > 128 (two column rounds)
// with A = 5 read at run time, A = 3 with HB = 64, and B = 1. Exit status 1 on a failure.
// tests/test_cuda_cql_head.cpp runs the kernel and its final reduction on the GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "grid.h"

#include "cql_head_body.h"

using namespace fh::cuda;

namespace {

struct Case {
    int B, A, HB, NB;
};

bool check(const Case &c, unsigned seed) {
    const int B = c.B, A = c.A, HB = c.HB, NB = c.NB, W = A * HB + A;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> dzc((size_t)NB * B * A), g((size_t)NB * B * HB);
    for (float &v : dzc) v = 1e-5f * nd(rng);
    for (float &v : g) v = std::fabs(nd(rng));
    // The grid cql_head_sums launches (cql_paths.cpp's cql_head_blocks).
    const int P = std::min<int>((B + kHeadRows - 1) / kHeadRows, (int)fh::kCqlHeadBlocks);
    std::vector<double> part((size_t)NB * P * W, NAN);
    gridDim.y = NB;
    for (int z = 0; z < NB; ++z)
        run_grid_concurrent(P, 2 * kHeadCols / 32, kHeadSmemBytes, [] {}, [&] {
            blockIdx.y = z;
            if (A == kHeadMaxA)
                k_cql_head_sums<kHeadMaxA>(dzc.data(), g.data(), B, A, HB, part.data());
            else
                k_cql_head_sums<0>(dzc.data(), g.data(), B, A, HB, part.data());
        });
    gridDim.y = 1;
    bool written = true;
    for (double v : part) written &= !std::isnan(v);
    double worst = 0.0;
    for (int z = 0; z < NB; ++z) {
        const float *dz = dzc.data() + (size_t)z * B * A, *gz = g.data() + (size_t)z * B * HB;
        for (int col = 0; col < W; ++col) {
            const int k = col < A * HB ? col / HB : col - A * HB, j = col % HB;
            double want = 0.0, mag = 0.0, got = 0.0;
            for (int i = 0; i < B; ++i) {
                const double t = (double)dz[(size_t)i * A + k] *
                                 (col < A * HB ? (double)gz[(size_t)i * HB + j] : 1.0);
                want += t;
                mag += std::fabs(t);
            }
            for (int p = 0; p < P; ++p) got += part[((size_t)z * P + p) * W + col];
            const double e = std::fabs(got - want) / (1e-12 * mag + 1e-300);
            worst = std::isfinite(e) ? std::max(worst, e) : 1e30;
        }
    }
    const bool ok = written && worst <= 1.0;
    printf("B=%d A=%d HB=%d NB=%d (%d blocks a branch): worst of the bound %.3g%s  %s\n", B, A,
           HB, NB, P, worst, written ? "" : ", partial slots unwritten", ok ? "ok" : "FAILED");
    return ok;
}

}  // namespace

int main() {
    const Case cases[] = {{8320, 8, 128, 2}, {1000, 8, 128, 1}, {333, 5, 200, 2},
                          {300, 3, 64, 1},   {1, 8, 128, 2}};
    bool ok = true;
    unsigned seed = 5;
    for (const Case &c : cases) ok &= check(c, seed++);
    return ok ? 0 : 1;
}
