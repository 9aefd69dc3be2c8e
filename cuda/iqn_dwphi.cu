// IQN's φ-layer weight gradient (SPEC §5.5 step 3): dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r)
// over the B·N rows r, on TF32 tensor cores, in TF32 mode with the fused backward
// (iqn_backward.cu writes dφpre; src/iqn_paths.hpp's dwphi_kernel). cuBLAS's split-K GEMM over
// stored cosines read dφpre (64 MiB at B = 16384) and cos (32 MiB), which the online pass had
// to write first; this kernel reads dφpre and τ (0.5 MiB) and forms the features from τ with
// the online pass's own rotation (iqn_fused.cuh's CosRot, the same k for each quad lane, so the
// same bits), and the online pass writes no cosines: IQN lane 0.418 / 0.421 → 0.403 / 0.403 ms
// single-stream, wall 1.587 / 1.586 → 1.570 / 1.569 ms single-stream and 1.307 / 1.319 →
// 1.303 / 1.307 multi-stream on an H100 (bench/results/h100-2026-12-07-dwphi-before-after*).
//
// Tiling. Blocks of 8 warps, two per SM, each a contiguous chunk of rows (whole stages; the grid
// is src/iqn_paths.hpp's iqn_dwphi_blocks) taken in stages of ROWS rows:
//   dφpre  each stage's rows by cp.async into a ring of SLOTS slots, SLOTS − 1 stages in flight
//          ahead of the one being multiplied; rows of 132 floats (≡ 4 mod 32: the A-fragment
//          loads below, rows 2t and columns g of a warp, hit 32 banks);
//   cos    formed into cosᵀ [64 k][ROWS + 8] (rows ≡ 8 mod 32), four threads a row, each the 16
//          features k = 8κ + 2q + e of CosRot's quad lane q, rounded to TF32 once; two cosᵀ
//          buffers, so one barrier a stage orders both the ring and the features;
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
constexpr int kDwOut = kHq * kC;   // a block's partial, floats
constexpr int kLDD = kHq + 4;      // dφpre's staged rows, floats
static_assert(kDwWarps * 16 == kHq, "a warp's 16 output rows");

// The ring and the features of one kernel shape: ROWS rows a stage, SLOTS ring slots.
template <int ROWS, int SLOTS>
struct DwShape {
    static_assert(4 * ROWS <= kDwThreads && kC == 64, "four threads a row, 16 features each");
    static_assert(ROWS % 8 == 0 && SLOTS >= 2, "whole row steps; a slot in flight");
    static constexpr int kLDT = ROWS + 8;  // cosᵀ's rows, floats (≡ 8 mod 32)
    static constexpr size_t kSmem =
        ((size_t)SLOTS * ROWS * kLDD + 2 * (size_t)kC * kLDT) * sizeof(float);
};

// dφpre rows [r0, r0 + ROWS) of the block's chunk (up to `end`) into a ring slot; rows at or
// past `end` are zeros (a NaN left there would survive a zero feature).
template <int ROWS>
__device__ __forceinline__ void stage_rows(float *slot, const float *dphi, size_t r0,
                                           size_t end) {
    for (int c = threadIdx.x; c < ROWS * (kHq / 4); c += kDwThreads) {
        const int rr = c / (kHq / 4), c4 = c % (kHq / 4);
        float *dst = slot + rr * kLDD + 4 * c4;
        if (r0 + rr < end)
            cp_async16(dst, dphi + (r0 + rr) * kHq + 4 * c4);
        else
            *reinterpret_cast<float4 *>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

template <int ROWS, int SLOTS>
__global__ void __launch_bounds__(kDwThreads, 2)
    k_iqn_dwphi(const float *__restrict__ dphi, const float *__restrict__ tau, size_t R,
                size_t chunk, float *__restrict__ part) {
    pdl_enter();
    using S = DwShape<ROWS, SLOTS>;
    constexpr int kAhead = SLOTS - 1;  // stages in flight beyond the current one
    extern __shared__ float4 sm4[];
    float *const ring = reinterpret_cast<float *>(sm4);
    float *const cosT0 = ring + SLOTS * ROWS * kLDD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const size_t begin = blockIdx.x * chunk, end = R < begin + chunk ? R : begin + chunk;
    const int stages = (int)((end - begin + ROWS - 1) / ROWS);
    // The row and quad lane whose features this thread forms (the first 4·ROWS threads).
    const int crow = threadIdx.x % ROWS, cq = threadIdx.x / ROWS;
    const bool forms = threadIdx.x < 4 * ROWS;
    auto tau_of = [&](int st) {
        const size_t r = begin + (size_t)st * ROWS + crow;
        return r < end ? __ldg(tau + r) : 0.0f;
    };
    auto slot_of = [&](int st) { return ring + (st % SLOTS) * ROWS * kLDD; };
    float acc[kC / 8][4];
#pragma unroll
    for (int n = 0; n < kC / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

    // One group per stage, empty past the last, so that the wait below counts stages.
#pragma unroll
    for (int p = 0; p < kAhead; ++p) {
        if (p < stages) stage_rows<ROWS>(slot_of(p), dphi, begin + (size_t)p * ROWS, end);
        cp_async_commit();
    }
    float t = forms ? tau_of(0) : 0.0f;
    for (int st = 0; st < stages; ++st) {
        // The stage's features, into the cosᵀ buffer the stage before last used: every warp
        // ended that stage's products before the last barrier.
        float *const cosT = cosT0 + (st & 1) * kC * S::kLDT;
        if (forms) {
            const bool valid = begin + (size_t)st * ROWS + crow < end;
            CosRot q;
            q.start(t, cq);
#pragma unroll
            for (int ka = 0; ka < kC / 8; ++ka) {
                if (ka > 0) q.next();
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    cosT[(8 * ka + 2 * cq + e) * S::kLDT + crow] =
                        valid ? mma::rounded<false>(q.c[e]) : 0.0f;
            }
            if (st + 1 < stages) t = tau_of(st + 1);
        }
        cp_async_wait<kAhead - 1>();  // this stage's rows
        __syncthreads();
        // The slot kAhead stages on was read by the products of stage st − 1, which every warp
        // ended before the barrier above.
        if (st + kAhead < stages)
            stage_rows<ROWS>(slot_of(st + kAhead), dphi, begin + (size_t)(st + kAhead) * ROWS,
                             end);
        cp_async_commit();
        const float *slot = slot_of(st);
#pragma unroll 2
        for (int ks = 0; ks < ROWS / 8; ++ks) {
            const float *d = slot + (8 * ks + 2 * tq) * kLDD + 16 * warp + gi;
            const mma::Op A[4] = {mma::op<false>(d[0]), mma::op<false>(d[8]),
                                  mma::op<false>(d[kLDD]), mma::op<false>(d[kLDD + 8])};
#pragma unroll
            for (int n = 0; n < kC / 8; ++n) {
                const float2 c = *reinterpret_cast<const float2 *>(
                    cosT + (8 * n + gi) * S::kLDT + 8 * ks + 2 * tq);
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

// The kernel shapes: 64-row stages in a ring of 2 (one stage in flight), or, a trial
// (FOXHUNT_TRIAL_DWPHI_RING=1), 32-row stages in a ring of 4 (three in flight).
using Ring64 = DwShape<64, 2>;
using Ring32 = DwShape<32, 4>;

}  // namespace

void dwphi_prepare() {
    aux::allow_smem((const void *)k_iqn_dwphi<64, 2>, Ring64::kSmem, "IQN dWphi");
    aux::allow_smem((const void *)k_iqn_dwphi<32, 4>, Ring32::kSmem, "IQN dWphi (ring of 4)");
}

void dwphi(const float *dphi, const float *tau, size_t rows, float *part, size_t part_floats,
           float *out, cudaStream_t s, bool ring32) {
    const size_t chunk = iqn_dwphi_chunk(rows), blocks = iqn_dwphi_blocks(rows);
    if (rows == 0 || blocks * kDwOut > part_floats)
        fail(FH_ERR_INTERNAL, "IQN dWphi: %zu rows, %zu partials of %d floats in %zu", rows,
             blocks, kDwOut, part_floats);
    if (ring32)
        FH_LAUNCH((k_iqn_dwphi<32, 4>), (unsigned)blocks, kDwThreads, Ring32::kSmem, s, dphi,
                  tau, rows, chunk, part);
    else
        FH_LAUNCH((k_iqn_dwphi<64, 2>), (unsigned)blocks, kDwThreads, Ring64::kSmem, s, dphi,
                  tau, rows, chunk, part);
    aux::Segs g;
    g.add(out, 0, kDwOut);
    aux::reduce_partials(part, (int)blocks, kDwOut, 1, g, s);
}

}  // namespace fh::cuda::iqn
