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
// is src/iqn_paths.hpp's iqn_wgrad_blocks) taken in stages of 64 rows:
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
//          fragment is one float2 of a cosᵀ row and A's four elements are single loads
//          (iqn_fused.cuh's rows_product, which the dWm trial shares; the features are its
//          cos_column).
// Each block writes its 128 × 64 partial in float32; reduce_partials adds the blocks' partials
// in block order in float64 (no atomics, the same bits every run).
// The bfloat16 instance (FH_MATH_BF16; a trial, FOXHUNT_TRIAL_DWPHI_BF16=1 in iqn.cu, written
// without a GPU and checked by tests/warp_emu only) runs the same tiling on m16n8k16 products:
// the backward's bfloat16 dφpre staged as it is (rows of 136), the features rounded to bfloat16
// as the online pass rounds its cos16, A's pairs of rows 2t, 2t + 1 packed from two 16-bit
// loads, B one 32-bit load of a cosᵀ row.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "aux_common.cuh"
#include "error.hpp"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
#include "launch.cuh"

namespace fh::cuda::iqn {

namespace {

constexpr int kDwWarps = 8, kDwThreads = 32 * kDwWarps;
constexpr int kDwRows = (int)kIqnWgradStageRows;  // rows a stage
constexpr int kDwOut = kHq * kC;                  // a block's partial, floats
static_assert(kDwWarps * 16 == kHq, "a warp's 16 output rows");
static_assert(4 * kDwRows == kDwThreads && kC == 64, "four threads a row, 16 features each");

// The staged rows of dφpre and cosᵀ in elements of E (float, or bfloat16 in FH_MATH_BF16):
// dφpre rows of 132 floats (≡ 4 words mod 32) or 136 bfloat16 (68 words ≡ 4: the 16-bit loads
// of rows 2t and columns g hit words 8t + g / 2, all different or shared), cosᵀ rows of 72
// (72 words ≡ 8 mod 32 for float2 loads, 36 ≡ 4 for 32-bit bfloat16 pairs at words 4g + t).
template <class E>
struct DwLayout {
    static constexpr int kLDD = std::is_same_v<E, float> ? kHq + 4 : kHq + 8;
    static constexpr int kLDT = kDwRows + 8;
    static constexpr size_t kSmem =
        (2 * (size_t)kDwRows * kLDD + 2 * (size_t)kC * kLDT) * sizeof(E);
};

// One 16-bit element of shared memory, for a bfloat16 pair packed from two rows.
__device__ __forceinline__ uint32_t bits16(const __nv_bfloat16 *p) {
    return (uint32_t)*reinterpret_cast<const unsigned short *>(p);
}

// The stage's products into acc: TF32 m16n8k8 over 8 row steps, or (bfloat16) m16n8k16 over 4.
template <class E>
__device__ __forceinline__ void stage_products(const E *slot, const E *cosT,
                                               float (&acc)[kC / 8][4]) {
    constexpr int kLDD = DwLayout<E>::kLDD, kLDT = DwLayout<E>::kLDT;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    if constexpr (std::is_same_v<E, float>) {
        rows_product<kDwRows, kLDD, kLDT>(slot, cosT, 16 * warp, 0, acc);
    } else {
        // a0 = rows 2t, 2t + 1 at column g, a1 at g + 8, a2 and a3 the same 8 rows on: each a
        // pair of 16-bit loads from two rows (mma_bf16.cuh's fragment table, M = j, K = rows).
#pragma unroll 2
        for (int ks = 0; ks < kDwRows / 16; ++ks) {
            const __nv_bfloat16 *d = slot + (16 * ks + 2 * tq) * kLDD + 16 * warp + gi;
            auto pair = [&](int r, int c) {
                return bits16(d + r * kLDD + c) | bits16(d + (r + 1) * kLDD + c) << 16;
            };
            const uint32_t A[4] = {pair(0, 0), pair(0, 8), pair(8, 0), pair(8, 8)};
#pragma unroll
            for (int n = 0; n < kC / 8; ++n) {
                const __nv_bfloat16 *c = cosT + (8 * n + gi) * kLDT + 16 * ks + 2 * tq;
                bmma::mma(acc[n], A, bmma::ld_pair(c), bmma::ld_pair(c + 8));
            }
        }
    }
}

template <class E>
__global__ void __launch_bounds__(kDwThreads, 2)
    k_iqn_dwphi(const E *__restrict__ dphi, const float *__restrict__ tau, size_t R, size_t chunk,
                float *__restrict__ part) {
    pdl_enter();
    using L = DwLayout<E>;
    extern __shared__ float4 sm4[];
    E *const ring = reinterpret_cast<E *>(sm4);
    E *const cosT0 = ring + 2 * kDwRows * L::kLDD;
    const int warp = threadIdx.x >> 5;
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

    stage_rows<kDwRows, L::kLDD, kDwThreads>(ring, dphi, begin, end);
    float t = tau_of(0);
    for (int st = 0; st < stages; ++st) {
        // The stage's features, into the cosᵀ buffer the stage before last used: every warp
        // ended that stage's products before the last barrier. Rounded as the online pass
        // rounds them for its products (TF32), or for its bfloat16 copy (FH_MATH_BF16).
        E *const cosT = cosT0 + (st & 1) * kC * L::kLDT;
        cos_column(cosT, L::kLDT, crow, t, cq, begin + (size_t)st * kDwRows + crow < end);
        if (st + 1 < stages) t = tau_of(st + 1);
        cp_async_wait_all();  // this stage's rows
        __syncthreads();
        // The other slot was read by the products of stage st − 1, which every warp ended
        // before the barrier above.
        if (st + 1 < stages)
            stage_rows<kDwRows, L::kLDD, kDwThreads>(ring + ((st + 1) & 1) * kDwRows * L::kLDD,
                                                     dphi, begin + (size_t)(st + 1) * kDwRows,
                                                     end);
        stage_products(ring + (st & 1) * kDwRows * L::kLDD, cosT, acc);
    }
    store_tiles(part + (size_t)blockIdx.x * kDwOut, kC, 16 * warp, 0, acc);
}

}  // namespace

void dwphi_prepare() {
    aux::allow_smem((const void *)k_iqn_dwphi<float>, DwLayout<float>::kSmem, "IQN dWphi");
    aux::allow_smem((const void *)k_iqn_dwphi<__nv_bfloat16>, DwLayout<__nv_bfloat16>::kSmem,
                    "IQN dWphi (bfloat16)");
}

namespace {
template <class E>
void launch_dwphi(const E *dphi, const float *tau, size_t rows, float *part, size_t part_floats,
                  float *out, cudaStream_t s) {
    const size_t chunk = iqn_wgrad_chunk(rows, kIqnDwphiMaxBlocks),
                 blocks = iqn_wgrad_blocks(rows, kIqnDwphiMaxBlocks);
    if (rows == 0 || blocks * kDwOut > part_floats)
        fail(FH_ERR_INTERNAL, "IQN dWphi: %zu rows, %zu partials of %d floats in %zu", rows,
             blocks, kDwOut, part_floats);
    FH_LAUNCH(k_iqn_dwphi<E>, (unsigned)blocks, kDwThreads, DwLayout<E>::kSmem, s, dphi, tau,
              rows, chunk, part);
    aux::Segs g;
    g.add(out, 0, kDwOut);
    aux::reduce_partials(part, (int)blocks, kDwOut, 1, g, s);
}
}  // namespace

void dwphi(const float *dphi, const float *tau, size_t rows, float *part, size_t part_floats,
           float *out, cudaStream_t s) {
    launch_dwphi(dphi, tau, rows, part, part_floats, out, s);
}
void dwphi(const __nv_bfloat16 *dphi, const float *tau, size_t rows, float *part,
           size_t part_floats, float *out, cudaStream_t s) {
    launch_dwphi(dphi, tau, rows, part, part_floats, out, s);
}

}  // namespace fh::cuda::iqn
