// IQN's φ-layer weight gradient (SPEC §5.5 step 3): dWφ[j][k] = Σ_r dφpre[r][j] cos(π k τ_r)
// over the B·N rows r, on tensor cores, wherever the backward is fused (iqn_backward.cu writes
// dφpre; src/iqn_paths.hpp). cuBLAS's split-K GEMM over stored cosines read dφpre (64 MiB at
// B = 16384) and cos (32 MiB), which the online pass had to write first; this kernel reads
// dφpre and τ (0.5 MiB) and forms the features from τ with the online pass's own rotation
// (iqn_fused.cuh's CosRot, the same k for each quad lane, so the same bits), and the online
// pass writes no cosines. Side by side with cuBLAS's GEMM on an
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
//          (rows_product below; the features are cos_column's).
// Each block writes its 128 × 64 partial in float32; reduce_partials adds the blocks' partials
// in block order in float64 (no atomics, the same bits every run).
// The bfloat16 instance (FH_MATH_BF16) runs the same tiling on m16n8k16 products: the
// backward's bfloat16 dφpre staged as it is (rows of 136), the features rounded to bfloat16
// (nearest even), A's pairs of rows 2t, 2t + 1 packed from two 16-bit loads, B one 32-bit load
// of a cosᵀ row. Against cuBLAS's bfloat16 GEMM over cosines the online pass stored as
// bfloat16, on an H100 at B = 16384, both orders: wall within the spread (1.252 / 1.260 against
// 1.256 / 1.258 ms multi-stream, 1.516 / 1.514 against 1.515 / 1.509 single-stream), 8 MiB
// less memory (bench/results/h100-2026-12-07-dwphi-bf16-before-after-*.json).
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

// The 16 features k = 8κ + 2q + e of one row with fraction t, as quad lane q of the online pass
// forms them (CosRot), rounded for the products (TF32, or bfloat16 with E = __nv_bfloat16) into
// column `row` of the transposed [64, ld] layout cosT; zeros where !valid.
template <class E>
__device__ __forceinline__ void cos_column(E *cosT, int ld, int row, float t, int q, bool valid) {
    CosRot c;
    c.start(t, q);
#pragma unroll
    for (int ka = 0; ka < kC / 8; ++ka) {
        if (ka > 0) c.next();
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float v = valid ? c.c[e] : 0.0f;
            E *dst = cosT + (8 * ka + 2 * q + e) * ld + row;
            if constexpr (std::is_same_v<E, float>)
                *dst = mma::rounded<false>(v);
            else
                *dst = __float2bfloat16_rn(v);
        }
    }
}

// Rows [r0, r0 + ROWS) of a row-major [*, 128] matrix src, up to `end`, into shared-memory rows
// of LD elements by 16-byte cp.async copies of the block's THREADS threads (wait with
// cp_async_wait_all() and a barrier); rows at or past `end` are zeros, since a NaN left there
// would survive a zero operand.
template <int ROWS, int LD, int THREADS, class E>
__device__ __forceinline__ void stage_rows(E *dst, const E *src, size_t r0, size_t end) {
    constexpr int kPer = 16 / sizeof(E);  // elements a 16-byte copy
    for (int c = threadIdx.x; c < ROWS * (kHq / kPer); c += THREADS) {
        const int rr = c / (kHq / kPer), cc = c % (kHq / kPer);
        E *d = dst + rr * LD + kPer * cc;
        if (r0 + rr < end)
            cp_async16(d, src + (r0 + rr) * kHq + kPer * cc);
        else
            *reinterpret_cast<float4 *>(d) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// A warp's accumulator tiles (mma_tf32.cuh's C layout: rows j0 + g and j0 + g + 8, columns
// k0 + 8n + 2t and + 1) into its place of a row-major partial `out` with rows of ld floats.
template <int NT>
__device__ __forceinline__ void store_tiles(float *out, int ld, int j0, int k0,
                                            const float (&acc)[NT][4]) {
    const int gi = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3, j = j0 + gi;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const int k = k0 + 8 * n + 2 * tq;
        *reinterpret_cast<float2 *>(out + (size_t)j * ld + k) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2 *>(out + (size_t)(j + 8) * ld + k) =
            make_float2(acc[n][2], acc[n][3]);
    }
}

// acc[n] += Σ_r X[r][j0 + i] Y[r][k0 + 8n + c] over the ROWS rows r of a stage, the warp's 16
// rows i of the output and its NT column tiles: X staged row-major (rows of LDX floats, float32,
// rounded to TF32 here), Y transposed (rows of LDY floats holding TF32 values), the contraction
// over rows in mma_tf32.cuh's permuted order (logical t ↔ row 2t, t + 4 ↔ 2t + 1), so that A's
// elements are single loads and a B fragment one float2.
template <int ROWS, int LDX, int LDY, int NT>
__device__ __forceinline__ void rows_product(const float *X, const float *YT, int j0, int k0,
                                             float (&acc)[NT][4]) {
    const int gi = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
#pragma unroll 2
    for (int ks = 0; ks < ROWS / 8; ++ks) {
        const float *d = X + (8 * ks + 2 * tq) * LDX + j0 + gi;
        const mma::Op A[4] = {mma::op<false>(d[0]), mma::op<false>(d[8]),
                              mma::op<false>(d[LDX]), mma::op<false>(d[LDX + 8])};
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const float2 y = *reinterpret_cast<const float2 *>(
                YT + (k0 + 8 * n + gi) * LDY + 8 * ks + 2 * tq);
            const mma::Op B[2] = {mma::loaded<false>(y.x), mma::loaded<false>(y.y)};
            mma::mma<false>(acc[n], A, B);
        }
    }
}

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
