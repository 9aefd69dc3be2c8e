// The step's weight gradients, dW[M, N] = G[K, M]ᵀ X[K, N] over the batch's K rows (G the
// layer's output gradient, X its input; both row-major with the rows outermost), in TF32.
//
// Why our own kernel: cuBLAS runs these shapes (K = 16384 to 131072 rows into outputs of 64 to
// 256 squared) as split-K sm80 GEMMs with 64- or 128-wide tiles, each tile column re-reading its
// operand, then a separate splitKreduce kernel: on the H100 about a fifth of a serialized step
// (bench/results/h100-2026-12-05-iqn-wgmma-ncu-warm.txt: the weight-gradient GEMMs 284 µs and
// 18 reductions 92 µs of 1864). Here a block owns a whole 128 × BN output tile (the widths of
// most of the step's layers), so each operand row is read once per tile, and the chunks'
// partials are summed by reduce_partials (reduce.cuh), one light pass.
//
// Tiling. grid (N tiles, M tiles, row chunks), about one block per SM; a block of 2 × BN/32 warps
// computes the 128 × BN tile of one chunk of rows, each warp a 64 × 32 sub-tile with mma.sync
// m16n8k8 TF32 (16 tiles of 16 × 8, 64 float accumulators per thread). The chunk's rows stream
// through shared memory 64 at a time in a ring of three stages filled by cp.async (two stages in
// flight while one is multiplied: 128 KiB per SM at BN = 128), G's rows [64 × 128] and X's rows
// [64 × BN] in rows of 136 and BN + 8 floats (≡ 8 mod 32). After a stage lands, each thread
// rounds the elements it copied to TF32 in place (once per block, not once per warp that reads
// them); then the warps read each k step's fragments while the previous step's products issue.
// (The first version, 32 rows a stage, two blocks per SM and a sum kernel of its own, took
// 1.52 → 1.74 ms per step on the H100: bench/results/README.md.)
//
// Fragment order. The contraction index k is the row; the output's row m (G's column) and
// column n (X's column) may be numbered in any order inside a warp's sub-tile as long as the
// stores undo it. Row r of 16-row tile i is sub-tile row 4r + i for r < 8 and 32 + 4(r − 8) + i
// for r ≥ 8; column c of 8-column tile j is sub-tile column 4c + j. Then a thread's four A
// fragments of one k step are two float4 loads per k row (its rows g and g + 8 of the four tiles
// lie at 4g .. 4g + 3 and 32 + 4g .. 32 + 4g + 3), its four B fragments one float4 per k row, and
// with rows ≡ 8 mod 32 floats apart the eight lanes of each quarter-warp read 32 different banks.
// A thread's accumulators of one row hold sub-tile columns 8t .. 8t + 7: two float4 stores.
//
// Determinism: no atomics. The chunking depends on the shape only; each chunk's sums are one
// block's fixed sequence of products; reduce_partials adds the chunks in a fixed order in float64.
#include "wgrad.hpp"

#include <algorithm>
#include <cstdint>

#include "aux_common.cuh"
#include "common.hpp"
#include "launch.cuh"
#include "mma_tf32.cuh"
#include "reduce.cuh"
#include "stage.cuh"

namespace fh::cuda {

namespace {

constexpr int kBM = 128, kRows = 64, kStages = 3;
constexpr int kMinK = 8192;          // smaller batches stay on cuBLAS
constexpr int kMinChunkRows = 256;   // rows per block at least: partials stay small beside the operands
constexpr int kTargetBlocks = 132;   // one block per SM on the H100 and H200

template <int BN>
struct Geom {
    static constexpr int kWarpsN = BN / 32, kWarps = 2 * kWarpsN, kThreads = 32 * kWarps;
    static constexpr int kLdA = kBM + 8, kLdB = BN + 8;
    static constexpr int kStageFloats = kRows * (kLdA + kLdB);
    static constexpr size_t kSmem = (size_t)kStages * kStageFloats * sizeof(float);
};

struct WgradArgs {
    const float *G;  // [K, ldg]: columns 0..M-1
    const float *X;  // [K, ldx]: columns 0..N-1
    int ldg, ldx, M, N, K, chunk_rows;
    float *part;     // [chunks, M, N]
};

__device__ __forceinline__ float4 ld4(const float *p) {
    return *reinterpret_cast<const float4 *>(p);
}

// Stage `st` of the block's chunk: rows r0 + 32·st .. of G (tile columns m0..) and X (n0..) into
// ring slot st % kStages, by cp.async; zeros past the chunk's rows and the matrices' columns.
// Every thread commits one group per call, empty or not, so that the waits count stages.
template <int BN>
__device__ __forceinline__ void issue_stage(float *sm, const WgradArgs &a, int m0, int n0, int r0,
                                            int r1, int st) {
    using Gm = Geom<BN>;
    const int rs = r0 + st * kRows;
    if (rs < r1) {
        float *As = sm + (st % kStages) * Gm::kStageFloats, *Bs = As + kRows * Gm::kLdA;
        for (int e = threadIdx.x; e < kRows * kBM / 4; e += Gm::kThreads) {
            const int rr = e / (kBM / 4), c = 4 * (e % (kBM / 4)), r = rs + rr;
            float *dst = As + rr * Gm::kLdA + c;
            if (r < r1 && m0 + c < a.M) cp_async16(dst, a.G + (size_t)r * a.ldg + m0 + c);
            else *reinterpret_cast<float4 *>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        for (int e = threadIdx.x; e < kRows * BN / 4; e += Gm::kThreads) {
            const int rr = e / (BN / 4), c = 4 * (e % (BN / 4)), r = rs + rr;
            float *dst = Bs + rr * Gm::kLdB + c;
            if (r < r1 && n0 + c < a.N) cp_async16(dst, a.X + (size_t)r * a.ldx + n0 + c);
            else *reinterpret_cast<float4 *>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    cp_async_commit();
}

// The elements this thread copied into ring slot st % kStages (issue_stage's), rounded to TF32
// in place once they have landed.
template <int BN>
__device__ __forceinline__ void round_stage(float *sm, int st) {
    using Gm = Geom<BN>;
    float *As = sm + (st % kStages) * Gm::kStageFloats, *Bs = As + kRows * Gm::kLdA;
    auto round4 = [](float *p) {
        float4 v = *reinterpret_cast<float4 *>(p);
        v = make_float4(mma::stored<false>(v.x), mma::stored<false>(v.y),
                        mma::stored<false>(v.z), mma::stored<false>(v.w));
        *reinterpret_cast<float4 *>(p) = v;
    };
    for (int e = threadIdx.x; e < kRows * kBM / 4; e += Gm::kThreads)
        round4(As + (e / (kBM / 4)) * Gm::kLdA + 4 * (e % (kBM / 4)));
    for (int e = threadIdx.x; e < kRows * BN / 4; e += Gm::kThreads)
        round4(Bs + (e / (BN / 4)) * Gm::kLdB + 4 * (e % (BN / 4)));
}

// One k step's fragments of a warp: a[0], a[1] its A elements of k row t (sub-tile rows
// 4g .. 4g + 3 and 32 + 4g ..), a[2], a[3] those of k row t + 4; b[0], b[1] its B elements of k
// rows t and t + 4 (sub-tile columns 4g .. 4g + 3).
struct Frag {
    float4 a[4], b[2];
};
template <int BN>
__device__ __forceinline__ void load_frag(Frag &f, const float *As, const float *Bs, int kk,
                                          int wm, int wn, int g, int t) {
    using Gm = Geom<BN>;
    const float *ar = As + (8 * kk + t) * Gm::kLdA + 64 * wm + 4 * g;
    f.a[0] = ld4(ar);
    f.a[1] = ld4(ar + 32);
    f.a[2] = ld4(ar + 4 * Gm::kLdA);
    f.a[3] = ld4(ar + 4 * Gm::kLdA + 32);
    const float *br = Bs + (8 * kk + t) * Gm::kLdB + 32 * wn + 4 * g;
    f.b[0] = ld4(br);
    f.b[1] = ld4(br + 4 * Gm::kLdB);
}

template <int BN>
__global__ void __launch_bounds__(Geom<BN>::kThreads, 1) k_wgrad(WgradArgs a) {
    pdl_enter();
    using Gm = Geom<BN>;
    extern __shared__ float4 sm4[];
    float *sm = reinterpret_cast<float *>(sm4);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / Gm::kWarpsN, wn = warp % Gm::kWarpsN;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * BN;
    const int r0 = blockIdx.z * a.chunk_rows, r1 = min(a.K, r0 + a.chunk_rows);
    const int S = (r1 - r0 + kRows - 1) / kRows;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) issue_stage<BN>(sm, a, m0, n0, r0, r1, st);
    for (int st = 0; st < S; ++st) {
        cp_async_wait_group<kStages - 2>();
        round_stage<BN>(sm, st);
        __syncthreads();
        // The slot this refills was multiplied in the previous trip, which every warp has left.
        issue_stage<BN>(sm, a, m0, n0, r0, r1, st + kStages - 1);
        const float *As = sm + (st % kStages) * Gm::kStageFloats, *Bs = As + kRows * Gm::kLdA;
        // The next k step's fragments are read while this one's products issue.
        Frag f[2];
        load_frag<BN>(f[0], As, Bs, 0, wm, wn, g, t);
#pragma unroll
        for (int kk = 0; kk < kRows / 8; ++kk) {
            if (kk + 1 < kRows / 8) load_frag<BN>(f[(kk + 1) & 1], As, Bs, kk + 1, wm, wn, g, t);
            const Frag &c = f[kk & 1];
            const float A0[4] = {c.a[0].x, c.a[0].y, c.a[0].z, c.a[0].w},
                        A1[4] = {c.a[1].x, c.a[1].y, c.a[1].z, c.a[1].w},
                        A2[4] = {c.a[2].x, c.a[2].y, c.a[2].z, c.a[2].w},
                        A3[4] = {c.a[3].x, c.a[3].y, c.a[3].z, c.a[3].w},
                        B0[4] = {c.b[0].x, c.b[0].y, c.b[0].z, c.b[0].w},
                        B1[4] = {c.b[1].x, c.b[1].y, c.b[1].z, c.b[1].w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    mma::mma1(acc[i][j], __float_as_uint(A0[i]), __float_as_uint(A1[i]),
                              __float_as_uint(A2[i]), __float_as_uint(A3[i]),
                              __float_as_uint(B0[j]), __float_as_uint(B1[j]));
        }
    }

    // Accumulator e of tile (i, j): row g (e < 2) or g + 8, column 2t + (e & 1); in sub-tile
    // terms row 4g + i (+ 32), column 8t + j (+ 4).
    float *P = a.part + (size_t)blockIdx.z * a.M * a.N;
    const int n = n0 + 32 * wn + 8 * t;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + 64 * wm + 32 * h + 4 * g + i;
            if (m >= a.M) continue;
            float *row = P + (size_t)m * a.N;
            if (n < a.N)
                *reinterpret_cast<float4 *>(row + n) = make_float4(
                    acc[i][0][2 * h], acc[i][1][2 * h], acc[i][2][2 * h], acc[i][3][2 * h]);
            if (n + 4 < a.N)
                *reinterpret_cast<float4 *>(row + n + 4) =
                    make_float4(acc[i][0][2 * h + 1], acc[i][1][2 * h + 1], acc[i][2][2 * h + 1],
                                acc[i][3][2 * h + 1]);
        }
}

struct Plan {
    int M, N, K, bn, chunk_rows, chunks;
    size_t part_bytes;
};

// The chunking, from the shape alone (never the device): about kTargetBlocks blocks, at least
// kMinChunkRows rows each, chunks of whole stages, and their partials within the workspace.
bool plan(const GemmDesc &g, size_t ws_bytes, Plan &p) {
    p.M = g.n;
    p.N = g.m;
    p.K = g.k;
    p.bn = p.N > 64 ? 128 : 64;
    const size_t plane = (size_t)p.M * p.N * sizeof(float);
    const int tiles = ((p.M + kBM - 1) / kBM) * ((p.N + p.bn - 1) / p.bn);
    int chunks = std::max(1, std::min((kTargetBlocks + tiles - 1) / tiles, p.K / kMinChunkRows));
    chunks = std::min<size_t>(chunks, ws_bytes / plane);
    if (chunks < 1) return false;
    p.chunk_rows = ((p.K + chunks - 1) / chunks + kRows - 1) / kRows * kRows;
    p.chunks = (p.K + p.chunk_rows - 1) / p.chunk_rows;
    p.part_bytes = p.chunks * plane;
    return p.part_bytes <= ws_bytes;
}

template <int BN>
void launch(const Plan &p, const WgradArgs &a, cudaStream_t s) {
    using Gm = Geom<BN>;
    aux::allow_smem((const void *)k_wgrad<BN>, Gm::kSmem, "weight-gradient");
    const dim3 grid((p.N + BN - 1) / BN, (p.M + kBM - 1) / kBM, p.chunks);
    FH_LAUNCH(k_wgrad<BN>, grid, Gm::kThreads, Gm::kSmem, s, a);
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

}  // namespace

bool wgrad_fits(const GemmDesc &g, float beta, size_t ws_bytes) {
    const int M = g.n, N = g.m;
    Plan p;
    return g.opa == CUBLAS_OP_N && g.opb == CUBLAS_OP_T && g.k >= kMinK && M >= 64 &&
           M <= 1024 && N >= 64 && N <= 1024 && M % 4 == 0 && N % 4 == 0 && g.lda % 4 == 0 &&
           g.ldb % 4 == 0 && aligned16(g.a) && aligned16(g.b) && beta == 0.0f && g.ldc == N &&
           plan(g, ws_bytes, p);
}

void wgrad(const Blas &bl, const GemmDesc &g, float beta, cudaStream_t s) {
    Plan p;
    if (!wgrad_fits(g, beta, bl.ws_bytes) || !plan(g, bl.ws_bytes, p))
        fail(FH_ERR_INTERNAL, "wgrad: GEMM m=%d n=%d k=%d not for this kernel", g.m, g.n, g.k);
    float *part = static_cast<float *>(bl.ws);
    const WgradArgs a{g.b, g.a, g.ldb, g.lda, p.M, p.N, p.K, p.chunk_rows, part};
    if (p.bn == 128)
        launch<128>(p, a, s);
    else
        launch<64>(p, a, s);
    // The chunks in order, in float64, into C (packed: ldc = N).
    Segs out;
    out.add(g.c, 0, p.M * p.N);
    reduce_partials(part, p.chunks, p.M * p.N, 1, out, s);
}

}  // namespace fh::cuda
