// IQN's φ-layer weight gradient (SPEC §5.5 step 3): dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r)
// over the B·N rows r, on TF32 tensor cores, in TF32 mode with the fused backward
// (iqn_backward.cu writes dφpre). A trial (FOXHUNT_TRIAL_IQN_DWPHI, iqn.cu): cuBLAS's split-K
// GEMM over the online pass's stored cosines reads dφpre (64 MiB at B = 16384) and cos (32 MiB),
// which the online pass must write first; this kernel reads dφpre and τ (0.5 MiB) and forms the
// features from τ with the online pass's own rotation (iqn_fused.cuh's CosRot, the same k to
// each quad lane, so the same bits), so the online pass writes no cosines.
//
// Tiling. Blocks of 8 warps, two per SM (84 KiB of shared memory each), each a contiguous
// chunk of rows (a multiple of 64) taken in stages of 64 rows:
//   dφpre  the stage's rows by cp.async into one of two ring slots, rows of 132 floats (≡ 4 mod
//          32: the A-fragment loads below, rows 2t and columns g of a warp, hit 32 banks); the
//          next stage's copy flies while this stage's products run;
//   cos    formed into cosᵀ [64 k][72] (rows ≡ 8 mod 32), four threads a row, each the 16
//          features k = 8κ + 2q + e of CosRot's quad lane q, rounded to TF32 once: a warp's
//          32 threads are 32 consecutive rows of one q, so the stores hit 32 banks;
//   dWφ    warp w owns output rows j = 16w .. 16w + 15 and all 64 k: 8 accumulator tiles
//          (32 registers) of m16n8k8 over the stage's 8 row steps, the contraction over rows in
//          mma_tf32.cuh's permuted order (logical t ↔ row 2t, t + 4 ↔ 2t + 1), so that a B
//          fragment is one float2 of a cosᵀ row and A's four elements are single loads.
// Each block writes its 128 × 64 partial in float32; reduce_partials adds the blocks' partials
// in block order in float64 (no atomics, the same bits every run).
#include <algorithm>
#include <cstdint>

#include "aux_common.cuh"
#include "common.hpp"
#include "error.hpp"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
#include "launch.cuh"

namespace fh::cuda::iqn {

namespace {

constexpr int kDwWarps = 8, kDwThreads = 32 * kDwWarps;
constexpr int kDwRows = 64;          // rows a stage
constexpr int kLDD = kHq + 4;        // dφpre's staged rows, floats
constexpr int kLDT = kDwRows + 8;    // cosᵀ's rows, floats
constexpr int kDwOut = kHq * kC;     // a block's partial, floats
constexpr size_t kDwSmemBytes =
    (2 * (size_t)kDwRows * kLDD + (size_t)kC * kLDT) * sizeof(float);
static_assert(kDwThreads == 4 * kDwRows, "a stage's features: four threads a row");
static_assert(kDwWarps * 16 == kHq, "a warp's 16 output rows");

// dφpre rows [r0, r0 + kDwRows) of the block's chunk (up to `end`) into ring slot `slot`;
// rows at or past `end` are zeros (a NaN left there would survive a zero feature).
__device__ __forceinline__ void stage_rows(float *slot, const float *dphi, size_t r0,
                                           size_t end) {
    for (int c = threadIdx.x; c < kDwRows * (kHq / 4); c += kDwThreads) {
        const int rr = c / (kHq / 4), c4 = c % (kHq / 4);
        float *dst = slot + rr * kLDD + 4 * c4;
        if (r0 + rr < end)
            cp_async16(dst, dphi + (r0 + rr) * kHq + 4 * c4);
        else
            *reinterpret_cast<float4 *>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

__global__ void __launch_bounds__(kDwThreads, 2)
    k_iqn_dwphi(const float *__restrict__ dphi, const float *__restrict__ tau, size_t R,
                size_t chunk, float *__restrict__ part) {
    pdl_enter();
    extern __shared__ float4 sm4[];
    float *const ring = reinterpret_cast<float *>(sm4);
    float *const cosT = ring + 2 * kDwRows * kLDD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const size_t begin = blockIdx.x * chunk, end = R < begin + chunk ? R : begin + chunk;
    const int stages = (int)((end - begin + kDwRows - 1) / kDwRows);
    // The row and quad lane whose features this thread forms.
    const int crow = threadIdx.x & (kDwRows - 1), cq = threadIdx.x / kDwRows;
    auto tau_of = [&](int st) {
        const size_t r = begin + (size_t)st * kDwRows + crow;
        return r < end ? __ldg(tau + r) : 0.0f;
    };
    float acc[kC / 8][4];
#pragma unroll
    for (int n = 0; n < kC / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

    stage_rows(ring, dphi, begin, end);
    float t = tau_of(0);
    for (int st = 0; st < stages; ++st) {
        // The stage's features (cosᵀ is free: the last stage's products ended at the barrier).
        {
            const bool valid = begin + (size_t)st * kDwRows + crow < end;
            CosRot q;
            q.start(t, cq);
#pragma unroll
            for (int ka = 0; ka < kC / 8; ++ka) {
                if (ka > 0) q.next();
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    cosT[(8 * ka + 2 * cq + e) * kLDT + crow] =
                        valid ? mma::rounded<false>(q.c[e]) : 0.0f;
            }
        }
        if (st + 1 < stages) t = tau_of(st + 1);
        cp_async_wait_all();
        __syncthreads();
        // The other slot's rows were read by the last stage's products, which every warp ended
        // before the barrier above.
        if (st + 1 < stages)
            stage_rows(ring + ((st + 1) & 1) * kDwRows * kLDD, dphi,
                       begin + (size_t)(st + 1) * kDwRows, end);
        const float *slot = ring + (st & 1) * kDwRows * kLDD;
#pragma unroll 2
        for (int ks = 0; ks < kDwRows / 8; ++ks) {
            const float *d = slot + (8 * ks + 2 * tq) * kLDD + 16 * warp + gi;
            const mma::Op A[4] = {mma::op<false>(d[0]), mma::op<false>(d[8]),
                                  mma::op<false>(d[kLDD]), mma::op<false>(d[kLDD + 8])};
#pragma unroll
            for (int n = 0; n < kC / 8; ++n) {
                const float2 c =
                    *reinterpret_cast<const float2 *>(cosT + (8 * n + gi) * kLDT + 8 * ks + 2 * tq);
                const mma::Op Bf[2] = {mma::loaded<false>(c.x), mma::loaded<false>(c.y)};
                mma::mma<false>(acc[n], A, Bf);
            }
        }
        __syncthreads();
    }
    float *out = part + (size_t)blockIdx.x * kDwOut;
    const int j = 16 * warp + gi;
#pragma unroll
    for (int n = 0; n < kC / 8; ++n) {
        const int k = 8 * n + 2 * tq;
        *reinterpret_cast<float2 *>(out + (size_t)j * kC + k) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2 *>(out + (size_t)(j + 8) * kC + k) =
            make_float2(acc[n][2], acc[n][3]);
    }
}

// Rows a block and blocks for R rows: two blocks per SM at most, chunks a whole number of
// stages, and no more partials than `max_blocks`.
struct DwPlan {
    size_t chunk;
    int blocks;
};
DwPlan dw_plan(size_t R, size_t max_blocks, int per_sm = 2) {
    const size_t stages = std::max<size_t>(1, (R + kDwRows - 1) / kDwRows);
    const size_t want = std::max<size_t>(
        1, std::min({stages, per_sm * (size_t)sm_count(), std::max<size_t>(1, max_blocks)}));
    const size_t chunk = (stages + want - 1) / want * kDwRows;
    return DwPlan{chunk, (int)std::max<size_t>(1, (R + chunk - 1) / chunk)};
}

}  // namespace

size_t dwphi_partial_floats(size_t rows) {
    return (size_t)dw_plan(rows, SIZE_MAX).blocks * kDwOut;
}

void dwphi_prepare() {
    aux::allow_smem((const void *)k_iqn_dwphi, kDwSmemBytes, "IQN dWphi");
}

void dwphi(const float *dphi, const float *tau, size_t rows, float *part, size_t part_floats,
           float *out, cudaStream_t s, int blocks_per_sm) {
    if (rows == 0) fail(FH_ERR_INTERNAL, "IQN dWphi: no rows");
    const DwPlan p = dw_plan(rows, part_floats / kDwOut, blocks_per_sm);
    if ((size_t)p.blocks * kDwOut > part_floats)
        fail(FH_ERR_INTERNAL, "IQN dWphi: %d partials of %d floats do not fit in %zu", p.blocks,
             kDwOut, part_floats);
    FH_LAUNCH(k_iqn_dwphi, p.blocks, kDwThreads, kDwSmemBytes, s, dphi, tau, rows, p.chunk,
              part);
    aux::Segs g;
    g.add(out, 0, kDwOut);
    aux::reduce_partials(part, p.blocks, kDwOut, 1, g, s);
}

}  // namespace fh::cuda::iqn
