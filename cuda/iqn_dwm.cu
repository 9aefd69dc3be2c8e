// IQN's merge-layer weight gradient (SPEC §5.5 step 3): dWm[j][k] = Σ_r dhpre[r][j] m[r][k] over
// the B·N rows r, with m recomputed rather than read: m_r = ψ_i ⊙ SiLU(cos(π k' τ_r) Wφᵀ + bφ),
// the online pass's own features, φ products and merge (iqn_fused.cuh: CosRot, the same k' for
// each quad lane, the φ tiles summed over the same k steps, silu_fast), so m has the online
// pass's bits. A trial (FOXHUNT_TRIAL_IQN_DWM=1 in iqn.cu, TF32 with the fused backward;
// written without a GPU, checked by tests/warp_emu only): cuBLAS's split-K GEMM reads dhpre and
// m (64 MiB each at B = 16384), and m is stored by the online pass for it alone; this kernel
// reads dhpre, τ and ψ (8 MiB), and the online pass stores no m (m's 64 MiB buffer holds the
// 8 MiB of partials instead; src/iqn_paths.hpp's dwm_kernel). It does the φ products again
// (2.1 GFLOP at the default batch) besides dWm's (4.3).
//
// Tiling. Blocks of 16 warps, one per SM (155.5 KiB of shared memory), each a contiguous
// chunk of rows in stages of 64 rows:
//   dhpre  each stage's rows by cp.async into one of two ring slots (rows of 132 floats), the
//          next stage's copies in flight while this one is multiplied;
//   cos    formed into cosᵀ [64 k'][68] (rows ≡ 4 mod 32: φ's A loads, columns 2t and rows g of a
//          warp, hit 32 banks), four threads a row on the first 256 threads, rounded to TF32;
//   φ, m   warp w the stage's row tile w % 4 and column quarter w / 4 (4 column tiles, 16
//          accumulators), Wφ staged as the online pass stages it; m rounded to TF32 into
//          mᵀ [128 k][72] (float2 B loads of rows 8n + g at rows 2t of the stage hit 32 banks);
//   dWm    warp w owns rows j of tile w % 8 and the 64 columns k of half w / 8: 8 accumulator
//          tiles (32 registers) of m16n8k8 over the stage's 8 row steps, the contraction over
//          rows in mma_tf32.cuh's permuted order, A's four elements single loads of dhpre rows
//          2t and 2t + 1, B one float2 of an mᵀ row.
// Two barriers a stage: after the features and the copies (φ may read them), after mᵀ (dWm may
// read it). Each block writes its 128 × 128 partial in float32; reduce_partials adds them in
// block order in float64 (no atomics, the same bits every run).
#include <algorithm>
#include <cstdint>

#include "aux_common.cuh"
#include "error.hpp"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
#include "launch.cuh"

namespace fh::cuda::iqn {

namespace {

constexpr int kMwWarps = 16, kMwThreads = 32 * kMwWarps;
constexpr int kMwRows = (int)kIqnWgradStageRows;  // rows a stage
constexpr int kMwOut = kHq * kHq;              // a block's partial, floats
constexpr int kLDH = kHq + 4;                  // dhpre's staged rows
constexpr int kLDC = kMwRows + 4;              // cosᵀ's rows
constexpr int kLDMT = kMwRows + 8;             // mᵀ's rows
// Wφ (rows of kLDP, as the online pass stages it), bφ, the ring, cosᵀ, mᵀ.
constexpr size_t kMwSmemBytes = ((size_t)kHq * kLDP + kHq + 2 * (size_t)kMwRows * kLDH +
                                 (size_t)kC * kLDC + (size_t)kHq * kLDMT) *
                                sizeof(float);
static_assert(4 * kMwRows <= kMwThreads && kC == 64, "four threads a row form its features");
static_assert(kMwWarps == 4 * (kHq / 32) && kMwRows == 64, "a warp a row tile and quarter");

__global__ void __launch_bounds__(kMwThreads, 1)
    k_iqn_dwm(const float *__restrict__ dh, const float *__restrict__ tau,
              const float *__restrict__ psi, const float *__restrict__ Wphi,
              const float *__restrict__ bphi, int N, size_t R, size_t chunk,
              float *__restrict__ part) {
    pdl_enter();
    extern __shared__ float4 sm4[];
    float *const wphi = reinterpret_cast<float *>(sm4);
    float *const sbphi = wphi + kHq * kLDP;
    float *const ring = sbphi + kHq;
    float *const cosT = ring + 2 * kMwRows * kLDH;
    float *const mT = cosT + kC * kLDC;
    stage_matrix<kHq, kC>(wphi, kLDP, Wphi);
    for (int e = threadIdx.x; e < kHq; e += blockDim.x) sbphi[e] = __ldg(bphi + e);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const size_t begin = blockIdx.x * chunk, end = R < begin + chunk ? R : begin + chunk;
    const int stages = (int)((end - begin + kMwRows - 1) / kMwRows);
    // The features: thread (row, quad lane) on the first 4·kMwRows threads.
    const bool forms = threadIdx.x < 4 * kMwRows;
    const int crow = threadIdx.x % kMwRows, cq = threadIdx.x / kMwRows;
    auto tau_of = [&](int st) {
        const size_t r = begin + (size_t)st * kMwRows + crow;
        return forms && r < end ? __ldg(tau + r) : 0.0f;
    };
    // φ and m: this warp's row tile and column quarter.
    const int rt = warp & 3, nq = warp >> 2;
    // dWm: this warp's output row tile and column half.
    const int jt = warp & 7, kh = warp >> 3;
    float acc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

    stage_rows<kMwRows, kLDH, kMwThreads>(ring, dh, begin, end);
    float t = tau_of(0);
    for (int st = 0; st < stages; ++st) {
        const size_t r0 = begin + (size_t)st * kMwRows;
        // The stage's features (cosᵀ was last read before the previous stage's second barrier).
        if (forms) {
            cos_column(cosT, kLDC, crow, t, cq, r0 + crow < end);
            if (st + 1 < stages) t = tau_of(st + 1);
        }
        cp_async_wait_all();  // this stage's rows
        __syncthreads();
        // The other slot was read by the previous stage's dWm products, before the barrier
        // above; so was mᵀ, which the φ phase below rewrites.
        if (st + 1 < stages)
            stage_rows<kMwRows, kLDH, kMwThreads>(ring + ((st + 1) & 1) * kMwRows * kLDH, dh,
                                                  r0 + kMwRows, end);
        {
            // φraw of row tile rt, column tiles 4nq .. 4nq + 3, over the k' steps in order (the
            // online pass's sums), then m = ψ_i ⊙ SiLU(φraw + bφ) into mᵀ.
            float ph[4][4];
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) ph[n][e] = 0.0f;
#pragma unroll
            for (int ka = 0; ka < kC / 8; ++ka) {
                const float *c = cosT + (8 * ka + 2 * tq) * kLDC + 16 * rt + gi;
                const mma::Op A[4] = {mma::loaded<false>(c[0]), mma::loaded<false>(c[8]),
                                      mma::loaded<false>(c[kLDC]),
                                      mma::loaded<false>(c[kLDC + 8])};
#pragma unroll
                for (int n = 0; n < 4; ++n) {
                    const float2 w = *reinterpret_cast<const float2 *>(
                        wphi + (8 * (4 * nq + n) + gi) * kLDP + 8 * ka + 2 * tq);
                    const mma::Op B[2] = {mma::loaded<false>(w.x), mma::loaded<false>(w.y)};
                    mma::mma<false>(ph[n], A, B);
                }
            }
            const int ra = 16 * rt + gi, rb = ra + 8;  // the thread's rows in the stage
            const bool va = r0 + ra < end, vb = r0 + rb < end;
            const float *psa = psi + (va ? (r0 + ra) / N : 0) * kHq;
            const float *psb = psi + (vb ? (r0 + rb) / N : 0) * kHq;
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const int u = 8 * (4 * nq + n) + 2 * tq;
                const float2 pa = __ldg(reinterpret_cast<const float2 *>(psa + u));
                const float2 pb = __ldg(reinterpret_cast<const float2 *>(psb + u));
                const float m0 = va ? pa.x * silu_fast(ph[n][0] + sbphi[u]) : 0.0f;
                const float m1 = va ? pa.y * silu_fast(ph[n][1] + sbphi[u + 1]) : 0.0f;
                const float m2 = vb ? pb.x * silu_fast(ph[n][2] + sbphi[u]) : 0.0f;
                const float m3 = vb ? pb.y * silu_fast(ph[n][3] + sbphi[u + 1]) : 0.0f;
                mT[u * kLDMT + ra] = mma::rounded<false>(m0);
                mT[(u + 1) * kLDMT + ra] = mma::rounded<false>(m1);
                mT[u * kLDMT + rb] = mma::rounded<false>(m2);
                mT[(u + 1) * kLDMT + rb] = mma::rounded<false>(m3);
            }
        }
        __syncthreads();
        rows_product<kMwRows, kLDH, kLDMT>(ring + (st & 1) * kMwRows * kLDH, mT, 16 * jt,
                                           64 * kh, acc);
    }
    store_tiles(part + (size_t)blockIdx.x * kMwOut, kHq, 16 * jt, 64 * kh, acc);
}

}  // namespace

void dwm_prepare() { aux::allow_smem((const void *)k_iqn_dwm, kMwSmemBytes, "IQN dWm"); }

void dwm(const DwmArgs &a, float *part, size_t part_floats, float *out, cudaStream_t s) {
    const size_t rows = (size_t)a.B * a.N;
    const size_t chunk = iqn_wgrad_chunk(rows, kIqnDwmMaxBlocks),
                 blocks = iqn_wgrad_blocks(rows, kIqnDwmMaxBlocks);
    if (rows == 0 || blocks * kMwOut > part_floats)
        fail(FH_ERR_INTERNAL, "IQN dWm: %zu rows, %zu partials of %d floats in %zu", rows,
             blocks, kMwOut, part_floats);
    FH_LAUNCH(k_iqn_dwm, (unsigned)blocks, kMwThreads, kMwSmemBytes, s, a.dh, a.tau, a.psi,
              a.Wphi, a.bphi, a.N, rows, chunk, part);
    aux::Segs g;
    g.add(out, 0, kMwOut);
    aux::reduce_partials(part, (int)blocks, kMwOut, 1, g, s);
}

}  // namespace fh::cuda::iqn
