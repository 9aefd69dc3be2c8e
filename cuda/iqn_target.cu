// IQN's target pass (SPEC §4, §5.5 step 3: Z̄(x̃', τ'_im) of the target net) fused on tensor
// cores, for TF32 mode at iqn_hidden = 128 and iqn_cos = 64: from ψ̄ = SiLU(x̃' W̄ψᵀ + b̄ψ) [B, 128]
// (a cuBLAS GEMM before it) one kernel draws τ' (Philox purpose 3), forms the cosine features,
// φ̄ = SiLU(cos W̄φᵀ + b̄φ), m̄ = ψ̄ ⊙ φ̄, h̄ = m̄ W̄mᵀ and Z̄ = SiLU(h̄ + b̄m)·w̄_z + b̄_z, and writes
// only Z̄ [B, N']: no cosine, φ̄, m̄ or h̄ buffer goes to memory (the unfused pass writes and reads
// back 64 MiB of each at B = 16384). Strict FP32 and other widths keep the unfused pass (iqn.cu).
//
// Tiling. A block of 8 warps stages W̄φ [128, 64] and W̄m [128, 128] in shared memory once
// (rounded to TF32) and walks through tiles of 128 rows r = i·N' + m; warp w owns rows
// 16w .. 16w + 15 of a tile, one m16 row tile:
//   cos  [16, 64]   computed into A fragments directly (each thread its 4 entries per k step)
//   φ̄    [16, 128]  = cos W̄φᵀ: 16 column tiles × 8 k steps of m16n8k8, accumulators in registers
//   m̄    the accumulator fragments times ψ̄, used as the A fragments of the next product (the
//        permuted contraction order of mma_tf32.cuh: no shared-memory round trip)
//   h̄    [16, 128]  = m̄ W̄mᵀ in two halves of 8 column tiles (32 accumulators at a time), each
//        folded at once into the per-row dot with w̄_z; a quad sums a row.
// Shared-memory rows are 72 and 136 floats (≡ 8 mod 32): the float2 B-fragment loads of a
// half-warp hit 32 different banks. Deterministic: each row is one warp's, no atomics.
#include <algorithm>
#include <cstdint>

#include "aux_common.cuh"
#include "iqn_target.hpp"
#include "mma_tf32.cuh"
#include "philox.hpp"

namespace fh::cuda::iqn {

namespace {

constexpr int kHq = 128, kC = 64;
constexpr int kLDP = kC + 8, kLDM = kHq + 8;
constexpr int kWarps = 8, kRowsPerTile = 16 * kWarps;
constexpr int kSmemFloats = kHq * kLDP + kHq * kLDM + 3 * kHq;

// SiLU in TF32 mode (the products feeding it carry 2^-11 rounding already).
__device__ __forceinline__ float silu_fast(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

__global__ void __launch_bounds__(kWarps * 32, 2) k_iqn_target(TargetArgs a) {
    extern __shared__ float4 sm4[];
    float *Wphi = reinterpret_cast<float *>(sm4);  // [128][kLDP]
    float *Wm = Wphi + kHq * kLDP;                 // [128][kLDM]
    float *bphi = Wm + kHq * kLDM, *bm = bphi + kHq, *wz = bm + kHq;
    for (int e = threadIdx.x; e < kHq * kC; e += blockDim.x) {
        const int n = e / kC, k = e - n * kC;
        Wphi[n * kLDP + k] = mma::stored<false>(__ldg(a.Wphi + e));
    }
    for (int e = threadIdx.x; e < kHq * kHq; e += blockDim.x) {
        const int n = e / kHq, k = e - n * kHq;
        Wm[n * kLDM + k] = mma::stored<false>(__ldg(a.Wm + e));
    }
    for (int e = threadIdx.x; e < kHq; e += blockDim.x) {
        bphi[e] = __ldg(a.bphi + e);
        bm[e] = __ldg(a.bm + e);
        wz[e] = __ldg(a.wz + e);
    }
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const uint32_t st = (uint32_t)*a.step;
    const float bz = __ldg(a.bz);
    const size_t R = (size_t)a.B * a.Nt;
    const size_t ntiles = (R + kRowsPerTile - 1) / kRowsPerTile;
    for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const size_t r0 = tile * kRowsPerTile + (size_t)warp * 16 + gi, r1 = r0 + 8;
        // τ'_im for the thread's two rows (purpose 3, c0 = row0 + i, c1 = m, c2 = step).
        // i0, i1 index this rank's ψ̄; the draw's c0 is the global row row0 + i.
        const uint32_t i0 = (uint32_t)(r0 / a.Nt), m0 = (uint32_t)(r0 % a.Nt);
        const uint32_t i1 = (uint32_t)(r1 / a.Nt), m1 = (uint32_t)(r1 % a.Nt);
        const float t0 = r0 < R ? uniform24(philox(a.seed, a.row0 + i0, m0, st, PURPOSE_IQN_TARGET).w[0]) : 0.0f;
        const float t1 = r1 < R ? uniform24(philox(a.seed, a.row0 + i1, m1, st, PURPOSE_IQN_TARGET).w[0]) : 0.0f;
        // φ̄ = cos W̄φᵀ; cos(π k τ) straight into A fragments (k = 8κ + 2t' and + 1).
        float acc[kHq / 8][4];
#pragma unroll
        for (int nu = 0; nu < kHq / 8; ++nu)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nu][e] = 0.0f;
#pragma unroll
        for (int ka = 0; ka < kC / 8; ++ka) {
            const float f0 = (float)(8 * ka + 2 * tq), f1 = f0 + 1.0f;
            mma::Op A[4];
            A[0] = mma::op<false>(cospif(f0 * t0));
            A[1] = mma::op<false>(cospif(f0 * t1));
            A[2] = mma::op<false>(cospif(f1 * t0));
            A[3] = mma::op<false>(cospif(f1 * t1));
#pragma unroll
            for (int nu = 0; nu < kHq / 8; ++nu) {
                const float2 w = *reinterpret_cast<const float2 *>(Wphi + (8 * nu + gi) * kLDP + 8 * ka + 2 * tq);
                const mma::Op B[2] = {mma::loaded<false>(w.x), mma::loaded<false>(w.y)};
                mma::mma<false>(acc[nu], A, B);
            }
        }
        // m̄ = ψ̄_i ⊙ SiLU(φ̄ + b̄φ), as the A fragments of h̄ = m̄ W̄mᵀ.
        const size_t ii0 = r0 < R ? i0 : 0, ii1 = r1 < R ? i1 : 0;
        mma::Op M[kHq / 8][4];
#pragma unroll
        for (int nu = 0; nu < kHq / 8; ++nu) {
            const int u = 8 * nu + 2 * tq;
            const float2 p0 = __ldg(reinterpret_cast<const float2 *>(a.psi + ii0 * kHq + u));
            const float2 p1 = __ldg(reinterpret_cast<const float2 *>(a.psi + ii1 * kHq + u));
            float m[4];
            m[0] = p0.x * silu_fast(acc[nu][0] + bphi[u]);
            m[1] = p0.y * silu_fast(acc[nu][1] + bphi[u + 1]);
            m[2] = p1.x * silu_fast(acc[nu][2] + bphi[u]);
            m[3] = p1.y * silu_fast(acc[nu][3] + bphi[u + 1]);
            mma::a_from_acc<false>(M[nu], m);
        }
        // h̄ in two halves of 8 column tiles, each folded into Z̄'s row dot at once.
        float z0 = 0.0f, z1 = 0.0f;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float h[8][4];
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) h[n][e] = 0.0f;
#pragma unroll
            for (int ka = 0; ka < kHq / 8; ++ka)
#pragma unroll
                for (int n = 0; n < 8; ++n) {
                    const int nu = 8 * half + n;
                    const float2 w = *reinterpret_cast<const float2 *>(Wm + (8 * nu + gi) * kLDM + 8 * ka + 2 * tq);
                    const mma::Op B[2] = {mma::loaded<false>(w.x), mma::loaded<false>(w.y)};
                    mma::mma<false>(h[n], M[ka], B);
                }
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                const int u = 8 * (8 * half + n) + 2 * tq;
                z0 = fmaf(silu_fast(h[n][0] + bm[u]), wz[u], z0);
                z0 = fmaf(silu_fast(h[n][1] + bm[u + 1]), wz[u + 1], z0);
                z1 = fmaf(silu_fast(h[n][2] + bm[u]), wz[u], z1);
                z1 = fmaf(silu_fast(h[n][3] + bm[u + 1]), wz[u + 1], z1);
            }
        }
        z0 += __shfl_xor_sync(0xffffffffu, z0, 1);
        z0 += __shfl_xor_sync(0xffffffffu, z0, 2);
        z1 += __shfl_xor_sync(0xffffffffu, z1, 1);
        z1 += __shfl_xor_sync(0xffffffffu, z1, 2);
        if (tq == 0) {
            if (r0 < R) a.zt[r0] = z0 + bz;
            if (r1 < R) a.zt[r1] = z1 + bz;
        }
    }
}

}  // namespace

bool target_fused_fits(const Dims &d) { return d.Hq == (uint32_t)kHq && d.C == (uint32_t)kC; }

int target_fused_blocks(size_t rows) {
    int dev = 0, sms = 0;
    FH_CUDA(cudaGetDevice(&dev));
    FH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const size_t tiles = (rows + kRowsPerTile - 1) / kRowsPerTile;
    return (int)std::max<size_t>(1, std::min<size_t>(tiles, 2 * (size_t)std::max(sms, 1)));
}

void target_fused_prepare() {
    aux::allow_smem((const void *)k_iqn_target, kSmemFloats * sizeof(float), "IQN target pass");
}

void target_fused(const TargetArgs &a, int blocks, cudaStream_t s) {
    k_iqn_target<<<blocks, kWarps * 32, kSmemFloats * sizeof(float), s>>>(a);
    FH_LAUNCHED("k_iqn_target");
}

}  // namespace fh::cuda::iqn
