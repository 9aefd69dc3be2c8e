// IQL's value nets V_hi, V_lo (Kostrikov et al. 2021; SPEC §4, §5.5 step 2) fused on tensor
// cores: TF32 mma.sync m16n8k8 (mma_tf32.cuh), iql_hidden = 128, D = obs + goal ≤ 128, D % 8 = 0.
// One kernel per step does, for every row of x̃ and both nets,
//   z1 = x̃ W1ᵀ + b1,  h1 = SiLU(z1)                                           -> h1
//   z2 = h1 W2ᵀ + b2,  V = SiLU(z2)·w3 + b3,  ũ = Q̄sa − V,  L_τ terms |τ − [ũ<0]| ũ²
//   dV = −2 |τ − [ũ<0]| ũ / (W·B),  dpre2 = dV w3 ⊙ SiLU'(z2)                  -> V, ω, dpre2
//   dh1 = dpre2 W2,  dpre1 = dh1 ⊙ SiLU'(z1)                                   -> dpre1
// with per-block column sums of db2 = Σ dpre2, dw3 = Σ dV SiLU(z2), db1 = Σ dpre1, db3 = Σ dV
// and the loss terms. It replaces the unfused path's three GEMMs F1, F2 and B2x, its two
// bias_silu passes, the warp-per-row head and dsilu_colsum (cuda/iql.cu), and their round trips
// of pre1, pre2 and h2 through memory. The weight gradients, contractions over the batch, stay
// cuBLAS GEMMs on what it writes.
//
// Tiling. grid (blocks, 2 nets), 8 warps; a block walks tiles of 128 rows, warp w owns rows
// 16w .. 16w + 15 of a tile (one m16 tile; thread (g, t) rows g and g + 8). W1 and W2 of the
// block's net sit in shared memory for the whole kernel, TF32-rounded once. Each warp has 16
// shared rows of its own that hold, in turn, the A operands of its three products: x̃ (copied
// with cp.async at the end of the previous tile, while the warp finishes it), h1, then dpre2
// (both TF32-rounded and in fragment order as they are written: put_a). The accumulators z1 (then SiLU'(z1)), z2 and dh1 stay
// in registers. Going through shared memory lets the loops over the contraction stay rolled: with
// every loop unrolled and the A operands taken from the accumulators, the kernel was 8480
// instructions and a third of its stall samples were instruction fetch (ncu on the H200).
// dh1 = dpre2 W2 reads W2 by columns where the forward reads it by rows: the shared copies are
// XOR-swizzled (swz below) so that both reads, and the A-operand reads, hit 32 different banks.
// 3 × 64 KiB + 1.5 KiB of shared memory: one block per SM.
//
// Deterministic: a row is one warp's, the column sums go through tile128.cuh's fixed butterfly,
// across tiles in each lane's registers, across warps in warp order and across blocks in
// reduce_partials' block order. No atomics.
#include <algorithm>

#include "aux_common.cuh"
#include "iql_fused.hpp"
#include "iql_paths.hpp"
#include "mma_tf32.cuh"
#include "stage.cuh"
#include "tile128.cuh"
#include "launch.cuh"

namespace fh::cuda::iql {

namespace {

constexpr int kH = 128, kWarps = 8, kTileRows = 16 * kWarps;
static_assert(kH == (int)kIqlFusedHidden && kH == (int)kIqlFusedMaxInput,
              "src/iql_paths.hpp names the widths this kernel is written for");
static_assert(kTileRows == kFusedRowsPerTile, "iql_fused.hpp's tile size");
constexpr int kHeadW = 2 * kH + 2;  // db2 | dw3 | db3 | Σ loss terms
constexpr int kRedW = kHeadW + kH;  // ... | db1
constexpr int kMat = kH * kH;
// W1, W2, the warps' x̃ rows [8 × 16, 128], then b1, b2, w3.
constexpr int kSmemFloats = 3 * kMat + 3 * kH;
static_assert(2 * kWarps * kRedW <= kMat, "the warps' partial rows (doubles) fit over x̃'s rows");

// W1, W2 and the warps' rows in shared memory as mma::swz<128> lays them out (mma_tf32.cuh).
__device__ __forceinline__ int swz(int r, int c) { return mma::swz<kH>(r, c); }

// Row-major W [128, K] (K % 4 == 0) into dst, rounded to TF32, 8 loads per thread in flight.
__device__ __forceinline__ void stage_w(float *dst, const float *src, int K) {
    const float4 *s4 = reinterpret_cast<const float4 *>(src);
    const int q = K / 4;
    stage_batched<8, float4>(
        kH * q, [&](int e) { return __ldg(s4 + e); },
        [&](int e, float4 v) {
            const int r = e / q, c = 4 * (e - r * q);
            *reinterpret_cast<float4 *>(dst + swz(r, c)) = tile::tf32x4(v);
        });
}

// x̃ rows row0 .. row0 + 15 (clamped to B − 1: rows past the batch compute on a real row and
// are masked) into the warp's rows xw, asynchronously; the warp waits with cp_async_wait_all()
// and __syncwarp() before it reads them.
__device__ __forceinline__ void fetch_x(float *xw, const float *x, size_t row0, int B, int D) {
    const int lane = threadIdx.x & 31, q = D / 4;
    for (int e = lane; e < 16 * q; e += 32) {
        const int rr = e / q, c = 4 * (e - rr * q);
        const size_t r = min(row0 + (size_t)rr, (size_t)B - 1);
        cp_async16(xw + swz(rr, c), x + r * D + c);
    }
}

__device__ __forceinline__ float2 ld2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
using tile::st2;
// With R16, FH_MATH_BF16's h1, dpre2 and dpre1 go out as bfloat16 values (their only readers are
// dW2's and dW1's GEMMs on bfloat16 operands).
using tile::st2_round;

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[n][e] = 0.0f;
}

// h1 and dpre2 wait in the warp's rows in fragment order: each thread writes the A fragment of
// contraction step ka (its accumulator tile ka, a_from_acc's order, TF32-rounded) as one float4
// at [ka][lane] and reads back only its own: one 128-bit access each way, and the four values
// land in the register quad the mma reads (row-major reads of two float2 cost 4 moves per mma).
__device__ __forceinline__ void put_a(float *xw, int ka, const float (&c)[4]) {
    *reinterpret_cast<float4 *>(xw + (ka * 32 + (threadIdx.x & 31)) * 4) =
        make_float4(mma::stored<false>(c[0]), mma::stored<false>(c[2]), mma::stored<false>(c[1]),
                    mma::stored<false>(c[3]));
}
__device__ __forceinline__ void get_a(mma::Op (&A)[4], const float *xw, int ka) {
    const float4 v = *reinterpret_cast<const float4 *>(xw + (ka * 32 + (threadIdx.x & 31)) * 4);
    A[0] = mma::loaded<false>(v.x);
    A[1] = mma::loaded<false>(v.y);
    A[2] = mma::loaded<false>(v.z);
    A[3] = mma::loaded<false>(v.w);
}

// The head of one row: ũ = Q̄sa − V, its loss term (li) and dV; V and ω written by the quad's
// first thread. Rows past the batch give dV = li = 0.
__device__ __forceinline__ float head_row(const FusedArgs &a, int net, bool valid, size_t r,
                                          float V, float tau, float &li) {
    li = 0.0f;
    if (!valid) return 0.0f;
    const float q = __ldg(a.qsa + r);
    const float u = __fadd_rn(q, -V);
    const float w = u < 0.0f ? __fadd_rn(1.0f, -tau) : tau;  // |τ − [ũ < 0]|
    li = __fmul_rn(__fmul_rn(w, u), u);
    if ((threadIdx.x & 3) == 0) {
        (net ? a.v_out[1] : a.v_out[0])[r] = V;
        if (net == 0) a.omega[r] = fminf(expf(__fmul_rn(a.awr_beta, __fadd_rn(q, -V))), a.awr_max);
    }
    return __fdiv_rn(__fmul_rn(__fmul_rn(-2.0f, w), u), a.rows);
}

// kD: D compiled in (the default config's 128: the x̃ copy's row and column of each element are
// shifts and masks, layer 1's loop a fixed count), or 0, read from a.D. The same operations in
// the same order: IQL 0.117 → 0.112 ms single-stream at B = 16384, TF32, wall 1.700 → 1.690 ms
// multi-stream (bench/results/h200-2026-12-02-iql-fixed-d-before-after.json).
template <int kD, bool R16>
__global__ void __launch_bounds__(kWarps * 32, 1) k_iql_fused(FusedArgs a) {
    pdl_enter();
    extern __shared__ float4 sm4[];
    float *W1s = reinterpret_cast<float *>(sm4), *W2s = W1s + kMat, *Xs = W2s + kMat;
    float *b1s = Xs + kMat, *b2s = b1s + kH, *w3s = b2s + kH;
    const int net = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gi = lane >> 2, tq = lane & 3, B = a.B, D = kD ? kD : a.D, KD = D / 8;
    const float *p = a.params + (size_t)net * a.total;
    const size_t ntiles = ((size_t)B + kTileRows - 1) / kTileRows;
    float *xw = Xs + warp * 16 * kH;
    size_t tile = blockIdx.x;
    if (tile < ntiles) fetch_x(xw, a.x, tile * kTileRows + warp * 16, B, D);
    stage_w(W1s, p + a.off_W1, D);
    stage_w(W2s, p + a.off_W2, kH);
    for (int e = threadIdx.x; e < kH; e += blockDim.x) {
        b1s[e] = __ldg(p + a.off_b1 + e);
        b2s[e] = __ldg(p + a.off_b2 + e);
        w3s[e] = __ldg(p + a.off_w3 + e);
    }
    __syncthreads();
    // dh1's B operand W2[8κ + 2t + e][8ν + g] is swz's element at w2c[e][ν % 4][1024 κ + 32 ⌊ν/4⌋]:
    // row 8κ + r (r = 2t + e < 8) has f(r), and (8ν + g) XOR 8 f = 32 ⌊ν/4⌋ + 8 ((ν % 4) XOR f) + g.
    const float *w2c[2][4];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int r = 2 * tq + e, f = (r & 3) ^ ((r >> 2) & 1);
#pragma unroll
        for (int j = 0; j < 4; ++j) w2c[e][j] = W2s + r * kH + 8 * (j ^ f) + gi;
    }
    const float b3 = __ldg(p + a.off_b3);
    const float tau = net ? a.tau[1] : a.tau[0];  // (no dynamic indexing of the params)
    const size_t base = (size_t)net * B * kH;
    // Column sums, tile128.cuh's colsum_quarter layout: db2 (k = 0, 1), dw3 (2, 3); db1 (0, 1).
    float acc_h[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    float acc_b1[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    double acc_loss = 0.0, acc_db3 = 0.0;
    for (; tile < ntiles; tile += gridDim.x) {
        const size_t r0 = tile * kTileRows + warp * 16 + gi, r1 = r0 + 8;
        const bool v0 = r0 < (size_t)B, v1 = r1 < (size_t)B;
        cp_async_wait_all();
        __syncwarp();
        // Layer 1: z1 = x̃ W1ᵀ, K = D in steps of 8 (x̃ rounded to TF32 as it is read).
        float z1[kH / 8][4];
        zero(z1);
#pragma unroll 2
        for (int ka = 0; ka < KD; ++ka) {
            const float2 x0 = ld2(xw + swz(gi, 8 * ka + 2 * tq));
            const float2 x1 = ld2(xw + swz(gi + 8, 8 * ka + 2 * tq));
            const mma::Op A[4] = {mma::op<false>(x0.x), mma::op<false>(x1.x),
                                  mma::op<false>(x0.y), mma::op<false>(x1.y)};
            mma::mma_rows<kH>(z1, A, W1s, ka);
        }
        __syncwarp();

        // h1 = SiLU(z1 + b1): stored, and into the warp's rows (TF32) as layer 2's A operand;
        // SiLU'(z1 + b1) kept for the backward.
        float *h1r0 = v0 ? a.h1 + base + r0 * kH : nullptr;
        float *h1r1 = v1 ? a.h1 + base + r1 * kH : nullptr;
#pragma unroll
        for (int nu = 0; nu < kH / 8; ++nu) {
            const int u = 8 * nu + 2 * tq;
            const float2 bb = ld2(b1s + u);
            float h[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float z = z1[nu][e] + ((e & 1) ? bb.y : bb.x);
                const float sg = tile::sigmoid_fast(z);
                h[e] = z * sg;
                z1[nu][e] = tile::dsilu_of(z, sg);
            }
            if (h1r0) st2_round<R16>(h1r0 + u, h[0], h[1]);
            if (h1r1) st2_round<R16>(h1r1 + u, h[2], h[3]);
            put_a(xw, nu, h);
        }
        float (&ds1)[kH / 8][4] = z1;
        __syncwarp();

        // Layer 2: z2 = h1 W2ᵀ (+ b2 below).
        float z2[kH / 8][4];
        zero(z2);
#pragma unroll 2
        for (int ka = 0; ka < kH / 8; ++ka) {
            mma::Op A[4];
            get_a(A, xw, ka);
            mma::mma_rows<kH>(z2, A, W2s, ka);
        }
        __syncwarp();

        // The head: V of the thread's rows (a quad sums a row), ũ, the loss terms and dV.
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int nu = 0; nu < kH / 8; ++nu) {
            const int u = 8 * nu + 2 * tq;
            const float2 bb = ld2(b2s + u), ww = ld2(w3s + u);
            z2[nu][0] += bb.x;
            z2[nu][1] += bb.y;
            z2[nu][2] += bb.x;
            z2[nu][3] += bb.y;
            s0 = fmaf(tile::silu_fast(z2[nu][0]), ww.x, s0);
            s0 = fmaf(tile::silu_fast(z2[nu][1]), ww.y, s0);
            s1 = fmaf(tile::silu_fast(z2[nu][2]), ww.x, s1);
            s1 = fmaf(tile::silu_fast(z2[nu][3]), ww.y, s1);
        }
        float li0, li1;
        const float dV0 = head_row(a, net, v0, r0, tile::quad_sum(s0) + b3, tau, li0);
        const float dV1 = head_row(a, net, v1, r1, tile::quad_sum(s1) + b3, tau, li1);
        if (tq == 0) {
            acc_loss += (double)li0 + (double)li1;
            acc_db3 += (double)dV0 + (double)dV1;
        }

        // dpre2 = dV w3 ⊙ SiLU'(z2): stored, and into the warp's rows (TF32) as dh1's A operand,
        // with the column sums of db2 and dw3.
        float *d2r0 = v0 ? a.dpre2 + base + r0 * kH : nullptr;
        float *d2r1 = v1 ? a.dpre2 + base + r1 * kH : nullptr;
        float pend[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float v[4][4];  // [db2 u, db2 u + 1, dw3 u, dw3 u + 1][column tile]
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const int nu = 4 * q + n, u = 8 * nu + 2 * tq;
                const float2 ww = ld2(w3s + u);
                float sg[4], d[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) sg[e] = tile::sigmoid_fast(z2[nu][e]);
                d[0] = dV0 * ww.x * tile::dsilu_of(z2[nu][0], sg[0]);
                d[1] = dV0 * ww.y * tile::dsilu_of(z2[nu][1], sg[1]);
                d[2] = dV1 * ww.x * tile::dsilu_of(z2[nu][2], sg[2]);
                d[3] = dV1 * ww.y * tile::dsilu_of(z2[nu][3], sg[3]);
                if (d2r0) st2_round<R16>(d2r0 + u, d[0], d[1]);
                if (d2r1) st2_round<R16>(d2r1 + u, d[2], d[3]);
                put_a(xw, nu, d);
                v[0][n] = d[0] + d[2];
                v[1][n] = d[1] + d[3];
                v[2][n] = fmaf(dV0, z2[nu][0] * sg[0], dV1 * (z2[nu][2] * sg[2]));
                v[3][n] = fmaf(dV0, z2[nu][1] * sg[1], dV1 * (z2[nu][3] * sg[3]));
            }
            tile::colsum_quarter<4>(q, v, pend, acc_h);
        }
        __syncwarp();

        // dh1 = dpre2 W2 (W2 read by columns), then the next tile's x̃ into the warp's rows.
        float dh[kH / 8][4];
        zero(dh);
#pragma unroll 2
        for (int ka = 0; ka < kH / 8; ++ka) {
            mma::Op A[4];
            get_a(A, xw, ka);
#pragma unroll
            for (int nu = 0; nu < kH / 8; ++nu) {
                const int m = 32 * (nu >> 2) + kH * 8 * ka;
                const mma::Op Bf[2] = {mma::loaded<false>(w2c[0][nu & 3][m]),
                                       mma::loaded<false>(w2c[1][nu & 3][m])};
                mma::mma<false>(dh[nu], A, Bf);
            }
        }
        __syncwarp();
        if (tile + gridDim.x < ntiles)
            fetch_x(xw, a.x, (tile + gridDim.x) * kTileRows + warp * 16, B, D);

        // dpre1 = dh1 ⊙ SiLU'(z1 + b1), stored, with the column sums of db1.
        float *d1r0 = v0 ? a.dpre1 + base + r0 * kH : nullptr;
        float *d1r1 = v1 ? a.dpre1 + base + r1 * kH : nullptr;
        float pb[2];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float v[2][4];
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const int nu = 4 * q + n, u = 8 * nu + 2 * tq;
                float d[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) d[e] = dh[nu][e] * ds1[nu][e];
                if (d1r0) st2_round<R16>(d1r0 + u, d[0], d[1]);
                if (d1r1) st2_round<R16>(d1r1 + u, d[2], d[3]);
                v[0][n] = d[0] + d[2];
                v[1][n] = d[1] + d[3];
            }
            tile::colsum_quarter<2>(q, v, pb, acc_b1);
        }
    }

    // The block's partial rows: the warps' rows in shared memory (over x̃'s), summed in warp order.
    acc_loss = warp_sum(acc_loss);
    acc_db3 = warp_sum(acc_db3);
    __syncthreads();
    double *red = reinterpret_cast<double *>(Xs);
    double *mine = red + (size_t)warp * kRedW;
#pragma unroll
    for (int pp = 0; pp < 2; ++pp)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = tile::owned_col(pp, e);
            mine[c] = (double)acc_h[pp][e];
            mine[kH + c] = (double)acc_h[pp][2 + e];
            mine[kHeadW + c] = (double)acc_b1[pp][e];
        }
    if (lane == 0) {
        mine[2 * kH] = acc_db3;
        mine[2 * kH + 1] = acc_loss;
    }
    __syncthreads();
    const size_t prow = (size_t)net * gridDim.x + blockIdx.x;
    for (int c = threadIdx.x; c < kRedW; c += blockDim.x) {
        double s = 0.0;
        for (int w = 0; w < kWarps; ++w) s += red[(size_t)w * kRedW + c];
        if (c < kHeadW) a.part_head[prow * kHeadW + c] = s;
        else a.part_b1[prow * kH + (c - kHeadW)] = s;
    }
}

}  // namespace

int fused_blocks(int B) {
    const int tiles = (B + kTileRows - 1) / kTileRows;
    return std::max(1, std::min(tiles, std::max(1, sm_count() / 2)));
}

void fused_prepare() {
    for (const void *k : {(const void *)k_iql_fused<0, false>, (const void *)k_iql_fused<kH, false>,
                          (const void *)k_iql_fused<0, true>, (const void *)k_iql_fused<kH, true>})
        aux::allow_smem(k, kSmemFloats * sizeof(float), "IQL fused pass");
}

namespace {
template <bool R16>
void launch(const FusedArgs &a, int blocks, cudaStream_t s) {
    const dim3 grid(blocks, 2);
    const size_t smem = kSmemFloats * sizeof(float);
    if (a.D == kH)
        FH_LAUNCH((k_iql_fused<kH, R16>), grid, kWarps * 32, smem, s, a);
    else
        FH_LAUNCH((k_iql_fused<0, R16>), grid, kWarps * 32, smem, s, a);
}
}  // namespace

void fused(const FusedArgs &a, int blocks, cudaStream_t s) {
    if (a.bf16_stores)
        launch<true>(a, blocks, s);
    else
        launch<false>(a, blocks, s);
}

}  // namespace fh::cuda::iql
