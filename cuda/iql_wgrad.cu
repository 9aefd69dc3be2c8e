// IQL's weight gradients on the fused path (SPEC §5.5 step 2, after cuda/iql_fused.cu):
//   dW2[z] = dpre2[z]ᵀ h1[z]  [128 × 128],   dW1[z] = dpre1[z]ᵀ x̃  [128 × D]
// for both nets z, contractions over the B rows of the batch, in one launch of TF32 mma.sync
// (mma_tf32.cuh; operands rounded to TF32 as they are read), each block summing one chunk of
// kWgradChunk rows in float32; reduce_partials then adds the chunks in chunk order, in float64.
// Deterministic, no atomics. cuBLAS took a split-K GEMM and a reduction kernel for each of the
// four products, 53 µs in all at B = 16384 on the H200 (Nsight, warm caches); its batched and
// grouped calls were slower still (IQL 0.40 and 0.81 ms against 0.12,
// bench/results/h200-2026-12-02-iql-gemm-fused.json).
//
// Tiling. grid (chunks, 4 products: dW2 hi, dW2 lo, dW1 hi, dW1 lo), 8 warps; warp w owns output
// rows 16w .. 16w + 15 (hidden units) and all N = 128 or D columns (N / 8 tiles of m16n8k8,
// accumulators in registers). The chunk's rows stream through shared memory 32 at a time,
// double-buffered with cp.async: the gradient rows [32 × 128] and the input rows [32 × N], rows
// of 136 floats (≡ 8 mod 32), so that the fragment loads A[t][16w + g] and B[t][8ν + g] of a warp
// hit 32 different banks. Rows past the batch are zeros.
#include "aux_common.cuh"
#include "iql_fused.hpp"
#include "mma_tf32.cuh"
#include "stage.cuh"

namespace fh::cuda::iql {

namespace {

constexpr int kH = 128, kWarps = 8, kRows = 32, kLd = kH + 8;
constexpr int kStage = 2 * kRows * kLd;  // the gradient rows, then the input rows
constexpr size_t kSmemBytes = 2 * kStage * sizeof(float);
static_assert(kWgradChunk % kRows == 0, "whole stages per chunk");

// Rows rs .. rs + 31 of src (width w floats, w % 4 == 0) into dst (rows of kLd), zeros past r1.
__device__ __forceinline__ void stage_rows(float *dst, const float *src, int w, int rs, int r1) {
    const int q = w / 4;
    for (int e = threadIdx.x; e < kRows * q; e += blockDim.x) {
        const int rr = e / q, c = 4 * (e - rr * q), r = rs + rr;
        if (r < r1) cp_async16(dst + rr * kLd + c, src + (size_t)r * w + c);
        else *reinterpret_cast<float4 *>(dst + rr * kLd + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

__global__ void __launch_bounds__(kWarps * 32) k_iql_wgrad(WgradArgs a) {
    extern __shared__ float4 sm4[];
    float *sm = reinterpret_cast<float *>(sm4);
    const int kind = blockIdx.y >> 1, net = blockIdx.y & 1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const int N = kind ? a.D : kH, NT = N / 8;
    const size_t plane = (size_t)net * a.B * kH;
    const float *G = (kind ? a.dpre1 : a.dpre2) + plane;
    const float *X = kind ? a.x : a.h1 + plane;
    const int r0 = blockIdx.x * kWgradChunk, r1 = min(a.B, r0 + kWgradChunk);
    const int S = (r1 - r0 + kRows - 1) / kRows;
    auto issue = [&](int st) {
        float *buf = sm + (st & 1) * kStage;
        stage_rows(buf, G, kH, r0 + st * kRows, r1);
        stage_rows(buf + kRows * kLd, X, N, r0 + st * kRows, r1);
        cp_async_commit();
    };
    float acc[kH / 8][4];
#pragma unroll
    for (int nu = 0; nu < kH / 8; ++nu)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nu][e] = 0.0f;
    issue(0);
    for (int st = 0; st < S; ++st) {
        if (st + 1 < S) {
            issue(st + 1);
            cp_async_wait_group<1>();
        } else {
            cp_async_wait_group<0>();
        }
        __syncthreads();
        const float *As = sm + (st & 1) * kStage, *Bs = As + kRows * kLd;
#pragma unroll
        for (int kk = 0; kk < kRows / 8; ++kk) {
            // A(m = hidden unit, k = row) = G[row][unit]; B(k = row, n = column) = X[row][column].
            const float *Ak = As + (8 * kk + tq) * kLd + 16 * warp + gi;
            const mma::Op A[4] = {mma::op<false>(Ak[0]), mma::op<false>(Ak[8]),
                                  mma::op<false>(Ak[4 * kLd]), mma::op<false>(Ak[4 * kLd + 8])};
            const float *Bk = Bs + (8 * kk + tq) * kLd + gi;
#pragma unroll
            for (int nu = 0; nu < kH / 8; ++nu) {
                if (nu >= NT) break;
                const mma::Op Bf[2] = {mma::op<false>(Bk[8 * nu]), mma::op<false>(Bk[4 * kLd + 8 * nu])};
                mma::mma<false>(acc[nu], A, Bf);
            }
        }
        __syncthreads();
    }
    float *P = (kind ? a.part_w1 : a.part_w2) + ((size_t)net * gridDim.x + blockIdx.x) * kH * N;
    float *p0 = P + (size_t)(16 * warp + gi) * N, *p1 = p0 + 8 * (size_t)N;
#pragma unroll
    for (int nu = 0; nu < kH / 8; ++nu) {
        if (nu >= NT) break;
        const int c = 8 * nu + 2 * tq;
        *reinterpret_cast<float2 *>(p0 + c) = make_float2(acc[nu][0], acc[nu][1]);
        *reinterpret_cast<float2 *>(p1 + c) = make_float2(acc[nu][2], acc[nu][3]);
    }
}

}  // namespace

void wgrad_prepare() {
    aux::allow_smem((const void *)k_iql_wgrad, kSmemBytes, "IQL weight gradients");
}

void wgrad(const WgradArgs &a, cudaStream_t s) {
    k_iql_wgrad<<<dim3(wgrad_chunks(a.B), 4), kWarps * 32, kSmemBytes, s>>>(a);
    FH_LAUNCHED("k_iql_wgrad");
}

}  // namespace fh::cuda::iql
