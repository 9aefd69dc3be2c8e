// IQN's φ-layer weight gradient (SPEC §5.5 step 3): dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r)
// over the B·N rows r, on TF32 tensor cores, in TF32 mode with the fused backward
// (iqn_backward.cu writes dφpre; src/iqn_paths.hpp's dwphi_kernel). cuBLAS's split-K GEMM over
// stored cosines read dφpre (64 MiB at B = 16384) and cos (32 MiB), which the online pass had
// to write first; this kernel reads dφpre and τ (0.5 MiB) and forms the features from τ with
// the online pass's own rotation (iqn_fused.cuh's CosRot, the same k for each quad lane, so the
// same bits), and the online pass writes no cosines. Side by side with cuBLAS's GEMM on an
// H100, B = 16384, both orders: aux child 0.688 / 0.690 → 0.668 / 0.671 ms and wall 1.309 /
// 1.320 → 1.297 / 1.307 ms multi-stream TF32, IQN lane 0.416 / 0.419 → 0.402 / 0.399 ms
// single-stream; 24 MiB less memory (bench/results/h100-2026-12-07-dwphi-*).
//
// Tiling. Blocks of 8 warps, two per SM, each a contiguous chunk of rows (whole stages; the grid
// is src/iqn_paths.hpp's iqn_dwphi_blocks) taken in stages of 64 rows:
//   dφpre  each stage's rows by cp.async into one of two ring slots, the next stage's copies in
//          flight while this one is multiplied; rows of 132 floats (≡ 4 mod 32: the A-fragment
//          loads below, rows 2t and columns g of a warp, hit 32 banks). A ring of four 32-row
//          stages, three in flight, was no faster (34.4 against 32.6 µs single-stream on an
//          H100): at 2 TB/s the kernel is not held by its copies' latency (not profiled);
//   cos    formed into cosᵀ [64 k][72] (rows ≡ 8 mod 32), four threads a row, each the 16
//          features k = 8κ + 2q + e of CosRot's quad lane q, rounded to TF32 once, a warp's
//          threads 32 consecutive rows of one q (its stores hit 32 banks); two cosᵀ buffers, so
//          one barrier a stage orders both the ring and the features;
//   dWφ    warp w owns output rows j = 16w .. 16w + 15 and all 64 k: 8 accumulator tiles
//          (32 registers) of m16n8k8 over the stage's row steps, the contraction over rows in
//          mma_tf32.cuh's permuted order (logical t ↔ row 2t, t + 4 ↔ 2t + 1), so that a B
//          fragment is one float2 of a cosᵀ row and A's four elements are single loads.
// Each block writes its 128 × 64 partial in float32; reduce_partials adds the blocks' partials
// in block order in float64 (no atomics, the same bits every run).
#include <algorithm>
#include <cstdint>

#include "aux_common.cuh"
#include "error.hpp"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
#include "launch.cuh"

namespace fh::cuda::iqn {

namespace {

constexpr int kDwWarps = 8, kDwThreads = 32 * kDwWarps;
constexpr int kDwRows = (int)kIqnDwphiStageRows;  // rows a stage
constexpr int kDwOut = kHq * kC;                  // a block's partial, floats
constexpr int kLDD = kHq + 4;                     // dφpre's staged rows, floats
constexpr int kLDT = kDwRows + 8;                 // cosᵀ's rows, floats
constexpr size_t kDwSmemBytes =
    (2 * (size_t)kDwRows * kLDD + 2 * (size_t)kC * kLDT) * sizeof(float);
static_assert(kDwWarps * 16 == kHq, "a warp's 16 output rows");
static_assert(4 * kDwRows == kDwThreads && kC == 64, "four threads a row, 16 features each");

// dφpre rows [r0, r0 + kDwRows) of the block's chunk (up to `end`) into a ring slot; rows at or
// past `end` are zeros (a NaN left there would survive a zero feature).
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
    float *const cosT0 = ring + 2 * kDwRows * kLDD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const size_t begin = blockIdx.x * chunk, end = R < begin + chunk ? R : begin + chunk;
    const int stages = (int)((end - begin + kDwRows - 1) / kDwRows);
    // The row and quad lane whose features this thread forms.
    const int crow = threadIdx.x % kDwRows, cq = threadIdx.x / kDwRows;
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
        // The stage's features, into the cosᵀ buffer the stage before last used: every warp
        // ended that stage's products before the last barrier.
        float *const cosT = cosT0 + (st & 1) * kC * kLDT;
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
        cp_async_wait_all();  // this stage's rows
        __syncthreads();
        // The other slot was read by the products of stage st − 1, which every warp ended
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
                const float2 c = *reinterpret_cast<const float2 *>(
                    cosT + (8 * n + gi) * kLDT + 8 * ks + 2 * tq);
                const mma::Op Bf[2] = {mma::loaded<false>(c.x), mma::loaded<false>(c.y)};
                mma::mma<false>(acc[n], A, Bf);
            }
        }
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

}  // namespace

void dwphi_prepare() { aux::allow_smem((const void *)k_iqn_dwphi, kDwSmemBytes, "IQN dWphi"); }

void dwphi(const float *dphi, const float *tau, size_t rows, float *part, size_t part_floats,
           float *out, cudaStream_t s) {
    const size_t chunk = iqn_dwphi_chunk(rows), blocks = iqn_dwphi_blocks(rows);
    if (rows == 0 || blocks * kDwOut > part_floats)
        fail(FH_ERR_INTERNAL, "IQN dWphi: %zu rows, %zu partials of %d floats in %zu", rows,
             blocks, kDwOut, part_floats);
    FH_LAUNCH(k_iqn_dwphi, (unsigned)blocks, kDwThreads, kDwSmemBytes, s, dphi, tau, rows, chunk,
              part);
    aux::Segs g;
    g.add(out, 0, kDwOut);
    aux::reduce_partials(part, (int)blocks, kDwOut, 1, g, s);
}

}  // namespace fh::cuda::iqn
