// Device pieces shared by IQN's fused tensor-core passes (iqn_target.cu, iqn_online.cu; the
// staging also iqn_backward.cu), TF32 and BF16 modes at iqn_hidden = 128 and iqn_cos = 64
// (SPEC §4: φ(τ)_j = SiLU(Σ_k cos(π k τ) Wφ[j,k] + bφ[j]), m = ψ ⊙ φ, h = m Wmᵀ).
//
// Tiling (both passes), as TF32 runs it. A block of 8 warps stages Wφ [128, 64] and Wm [128, 128]
// in shared memory once (rounded to TF32) and walks through tiles of 128 rows r = i·Nr + n; warp w
// owns rows 16w .. 16w + 15 of a tile, one m16 row tile, and each thread rows g and g + 8 of it
// (g = lane / 4, t = lane % 4; fragment layout in mma_tf32.cuh):
//   cos  [16, 64]   computed into A fragments directly (each thread its 4 entries per k step,
//                   by rotation from one sincospif per sequence: CosRot)
//   φ    [16, 128]  = cos Wφᵀ: 16 column tiles × 8 k steps of m16n8k8, accumulators in registers
//   m    the accumulator fragments times ψ, used as the A fragments of h = m Wmᵀ (the permuted
//        contraction order of mma_tf32.cuh: no shared-memory round trip)
//   h    [16, 128]  = m Wmᵀ in two halves of 8 column tiles (32 accumulators at a time).
// Shared-memory rows are 72 and 136 floats (≡ 8 mod 32): the float2 B-fragment loads of a
// half-warp hit 32 different banks. Deterministic: each row is one warp's, no atomics.
//
// FH_MATH_BF16 runs the same tiling on bfloat16 products (mma_bf16.cuh, m16n8k16, float32
// accumulation; the SmemB16 overloads below): Wφ and Wm staged as bfloat16 (rows of 72 and 136,
// 36 and 68 words ≡ 4 mod 32: the 32-bit B loads of a warp's lanes (g, t) hit banks 4g + t, all
// different; 52 KiB instead of 104), cos packed into A fragments two rotation steps at a time, m's
// accumulator pairs packed into h's A fragments (8 of 4 registers instead of 16 of 4), half the
// instructions of the TF32 products for the same rows. The kernels take the weights' element type
// E (float or __nv_bfloat16); phi_tile, merge_tile and h_tiles have an overload for each, and the
// kernels are otherwise one code.
//
// TF32 mode on Hopper's sm_90a code runs h = m Wmᵀ on the warpgroup tensor cores instead, with
// Wm staged in their swizzled layout (SmemWg below); φ stays mma.sync's.
#pragma once
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "iqn_fused.hpp"
#include "iqn_paths.hpp"
#include "mma_bf16.cuh"
#include "mma_tf32.cuh"
#include "philox.hpp"
#include "stage.cuh"
#include "tile128.cuh"
#include "wgmma.cuh"

namespace fh::cuda::iqn {

constexpr int kHq = 128, kC = 64;
static_assert(kHq == (int)kIqnFusedHidden && kC == (int)kIqnFusedCos,
              "src/iqn_paths.hpp names the widths these kernels are written for");
// Shared-memory row lengths of Wφ and Wm, in elements (floats, or bfloat16 in FH_MATH_BF16).
constexpr int kLDP = kC + 8, kLDM = kHq + 8;
constexpr int kWarps = 8, kRowsPerTile = 16 * kWarps;
static_assert(kRowsPerTile == kFusedRowsPerTile, "iqn_fused.hpp's tile size");
// The shared memory of the target and online passes with weights of element type E: Wφ, Wm,
// then bφ, bm, w_z as float32.
template <class E>
constexpr size_t kSmemBytes = ((size_t)kHq * kLDP + (size_t)kHq * kLDM) * sizeof(E) +
                              3 * kHq * sizeof(float);

// The default config's N = N' = 8, compiled into an instance of each kernel (the row → transition
// divisions become shifts, the loops over a transition's rows and over N' get fixed trip counts);
// other values run the instance that reads them at run time. The two compute the same
// operations in the same order (IQN lane 0.494 → 0.474 ms single-stream at B = 16384,
// bench/results/h200-2026-12-02-iqn-fixed-n-before-after.json).
constexpr int kFixedN = 8;
inline bool fixed_n(int n) { return n == kFixedN; }

using tile::colsum_quarter;
using tile::dsilu_fast;
using tile::dsilu_of;
using tile::owned_col;
using tile::quad_sum;
using tile::sigmoid_fast;
using tile::silu_fast;
using tile::st2;
using tile::tf32x4;

// Two adjacent float32 inputs.
__device__ __forceinline__ float2 ld2(const float *p) {
    return __ldg(reinterpret_cast<const float2 *>(p));
}

// The float32 or the bfloat16 pointer of an output, by B16 (FH_MATH_BF16's operands).
template <bool B16, class F, class H>
__device__ __forceinline__ std::conditional_t<B16, H *, F *> pick(F *f, H *h) {
    if constexpr (B16)
        return h;
    else
        return f;
}

// One net's Wφ and Wm in shared memory as E (float32 holding TF32 values, or bfloat16), then bφ,
// bm and w_z as float32.
template <class E>
struct SmemOf {
    E *Wphi, *Wm;
    float *bphi, *bm, *wz;
};
using Smem = SmemOf<float>;

// Stage one net's Wφ, Wm (rounded: TF32, or bfloat16 for FH_MATH_BF16's products), bφ, bm and
// w_z; ends with __syncthreads(). The matrices go as float4s, 8 loads per thread in flight
// (stage.cuh; Wφ and Wm are 16-byte aligned: the IQN buffer starts 256-byte aligned and every
// tensor before them has a multiple of 128 floats at iqn_hidden = 128). The fused kernels'
// prologue was 11 to 37 % of their stall samples with one load at a time: IQN lane 0.559 →
// 0.496 ms single-stream, wall 1.936 → 1.895 ms multi-stream at B = 16384
// (bench/results/h200-2026-12-02-stage-batched-before-after.json).
//
// Four adjacent elements of a row, rounded for the products.
__device__ __forceinline__ void store4(float *dst, float4 v) {
    *reinterpret_cast<float4 *>(dst) = tf32x4(v);
}
__device__ __forceinline__ void store4(__nv_bfloat16 *dst, float4 v) {
    *reinterpret_cast<uint2 *>(dst) = make_uint2(bmma::pack(v.x, v.y), bmma::pack(v.z, v.w));
}
// Row-major [ROWS, COLS] src into dst rows of ld elements (cols % 4 == 0).
template <int ROWS, int COLS, class E>
__device__ __forceinline__ void stage_matrix(E *dst, int ld, const float *src) {
    const float4 *s4 = reinterpret_cast<const float4 *>(src);
    stage_batched<8, float4>(
        ROWS * COLS / 4, [&](int e) { return __ldg(s4 + e); },
        [&](int e, float4 v) {
            const int n = e / (COLS / 4), k = 4 * (e - n * (COLS / 4));
            store4(dst + n * ld + k, v);
        });
}
// bφ, bm and w_z into their float32 places of s.
template <class E>
__device__ __forceinline__ void stage_vectors(const SmemOf<E> &s, const float *bphi,
                                              const float *bm, const float *wz) {
    for (int e = threadIdx.x; e < kHq; e += blockDim.x) {
        s.bphi[e] = __ldg(bphi + e);
        s.bm[e] = __ldg(bm + e);
        s.wz[e] = __ldg(wz + e);
    }
}
// Rows of kLDP and kLDM elements for Wφ and Wm.
template <class E>
__device__ __forceinline__ SmemOf<E> stage_weights(float4 *sm, const float *Wphi,
                                                   const float *bphi, const float *Wm,
                                                   const float *bm, const float *wz) {
    SmemOf<E> s;
    s.Wphi = reinterpret_cast<E *>(sm);
    s.Wm = s.Wphi + kHq * kLDP;
    s.bphi = reinterpret_cast<float *>(s.Wm + kHq * kLDM);
    s.bm = s.bphi + kHq;
    s.wz = s.bm + kHq;
    stage_matrix<kHq, kC>(s.Wphi, kLDP, Wphi);
    stage_matrix<kHq, kHq>(s.Wm, kLDM, Wm);
    stage_vectors(s, bphi, bm, wz);
    __syncthreads();
    return s;
}

// The quantile fraction of row r = i·Nr + n of this rank (Philox c0 = row0 + i, c1 = n,
// c2 = step; SPEC §3); 0 for rows past R.
__device__ __forceinline__ float draw_tau(uint64_t seed, uint32_t row0, size_t r, size_t R, int Nr,
                                          uint32_t step, uint32_t purpose) {
    if (r >= R) return 0.0f;
    const uint32_t i = (uint32_t)(r / Nr), n = (uint32_t)(r % Nr);
    return uniform24(philox(seed, row0 + i, n, step, purpose).w[0]);
}

// The cosine features of one row, cos(π k τ) at the thread's k = 8κ + 2t + e (e = 0, 1) for
// κ = 0, 1, ...: the first pair from sincospif, each next pair by a rotation through the angle
// 8πτ (two products and two multiply-adds per feature instead of a cospif's ~30 instructions;
// IQN lane 0.597 → 0.589 ms single-stream, aux child 1.187 → 1.174 ms multi-stream at
// B = 16384, bench/results/h200-2026-12-02-iqn-cos-rotation-before-after.json). The rotation's
// rounding grows by about an ulp per step, 7 steps at iqn_cos = 64 (2.1e-7 against float64 in
// test_cuda_iqn): far below the TF32 rounding (2^-11) the features get as MMA operands.
struct CosRot {
    float c[2], s[2], C8, S8;
    __device__ __forceinline__ void start(float t, int tq) {
        sincospif((float)(2 * tq) * t, &s[0], &c[0]);
        sincospif((float)(2 * tq + 1) * t, &s[1], &c[1]);
        sincospif(8.0f * t, &S8, &C8);
    }
    __device__ __forceinline__ void next() {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float ce = c[e], se = s[e];
            c[e] = fmaf(ce, C8, -se * S8);
            s[e] = fmaf(se, C8, ce * S8);
        }
    }
};

// The cosine features of the thread's rows g (τ t0) and g + 8 (τ t1), rotation step by step,
// after acc is zeroed: step(ka, c0, c1) gets step ka's features at k = 8ka + 2t and + 1 (c0 row
// g's, c1 row g + 8's). When `cosr0` / `cosr1` are given, the features are stored there too
// (for cuBLAS's dWφ where the backward is not fused). acc: NT column tiles.
template <int NT, class F>
__device__ __forceinline__ void cos_steps(float t0, float t1, float (&acc)[NT][4], float *cosr0,
                                          float *cosr1, F &&step) {
    const int tq = threadIdx.x & 3;
#pragma unroll
    for (int nu = 0; nu < NT; ++nu)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nu][e] = 0.0f;
    CosRot q0, q1;
    q0.start(t0, tq);
    q1.start(t1, tq);
#pragma unroll
    for (int ka = 0; ka < kC / 8; ++ka) {
        if (ka > 0) {
            q0.next();
            q1.next();
        }
        if (cosr0) st2(cosr0 + 8 * ka + 2 * tq, q0.c[0], q0.c[1]);
        if (cosr1) st2(cosr1 + 8 * ka + 2 * tq, q1.c[0], q1.c[1]);
        step(ka, q0.c, q1.c);
    }
}

// φraw = cos(π k τ) Wφᵀ for the thread's rows g (τ t0) and g + 8 (τ t1), into acc, the features
// stored as cos_steps says. acc[n] is column tile nu0 + n (all 16 by default; a tile's products
// are the same whichever others are computed beside it).
template <int NT>
__device__ __forceinline__ void phi_tile(const Smem &s, float t0, float t1, float (&acc)[NT][4],
                                         float *cosr0, float *cosr1, int nu0 = 0) {
    const int gi = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
    cos_steps(t0, t1, acc, cosr0, cosr1, [&](int ka, const float (&c0)[2], const float (&c1)[2]) {
        mma::Op A[4];
        A[0] = mma::op<false>(c0[0]);
        A[1] = mma::op<false>(c1[0]);
        A[2] = mma::op<false>(c0[1]);
        A[3] = mma::op<false>(c1[1]);
#pragma unroll
        for (int nu = 0; nu < NT; ++nu) {
            const float2 w = *reinterpret_cast<const float2 *>(
                s.Wphi + (8 * (nu0 + nu) + gi) * kLDP + 8 * ka + 2 * tq);
            const mma::Op B[2] = {mma::loaded<false>(w.x), mma::loaded<false>(w.y)};
            mma::mma<false>(acc[nu], A, B);
        }
    });
}

// m = ψ_i ⊙ SiLU(φraw + bφ) of the thread's two rows, column tile by column tile, handed to
// emit(nu, m) (m[0], m[1] row g's columns 8ν + 2t and + 1, m[2], m[3] row g + 8's); psi0 / psi1
// are the ψ rows of the thread's two rows. When phir*/mr* are given, φraw and m are stored there
// too (m as T: float, or bfloat16 for FH_MATH_BF16's GEMM).
template <class S, class T, class F>
__device__ __forceinline__ void merge_rows(const S &s, const float (&acc)[kHq / 8][4],
                                           const float *psi0, const float *psi1, float *phir0,
                                           float *phir1, T *mr0, T *mr1, F &&emit) {
    const int tq = threadIdx.x & 3;
#pragma unroll
    for (int nu = 0; nu < kHq / 8; ++nu) {
        const int u = 8 * nu + 2 * tq;
        const float2 p0 = __ldg(reinterpret_cast<const float2 *>(psi0 + u));
        const float2 p1 = __ldg(reinterpret_cast<const float2 *>(psi1 + u));
        float m[4];
        m[0] = p0.x * silu_fast(acc[nu][0] + s.bphi[u]);
        m[1] = p0.y * silu_fast(acc[nu][1] + s.bphi[u + 1]);
        m[2] = p1.x * silu_fast(acc[nu][2] + s.bphi[u]);
        m[3] = p1.y * silu_fast(acc[nu][3] + s.bphi[u + 1]);
        if (phir0) *reinterpret_cast<float2 *>(phir0 + u) = make_float2(acc[nu][0], acc[nu][1]);
        if (phir1) *reinterpret_cast<float2 *>(phir1 + u) = make_float2(acc[nu][2], acc[nu][3]);
        if (mr0) st2(mr0 + u, m[0], m[1]);
        if (mr1) st2(mr1 + u, m[2], m[3]);
        emit(nu, m);
    }
}

// m as the A fragments of h = m Wmᵀ (TF32, the permuted contraction order).
template <class T>
__device__ __forceinline__ void merge_tile(const Smem &s, const float (&acc)[kHq / 8][4],
                                           const float *psi0, const float *psi1,
                                           mma::Op (&M)[kHq / 8][4], float *phir0, float *phir1,
                                           T *mr0, T *mr1) {
    merge_rows(s, acc, psi0, psi1, phir0, phir1, mr0, mr1,
               [&](int nu, const float (&m)[4]) { mma::a_from_acc<false>(M[nu], m); });
}

// Column tiles nu0 .. nu0 + NT − 1 of h = m Wmᵀ (no bias): h[n] is tile nu0 + n.
template <int NT>
__device__ __forceinline__ void h_tiles(const Smem &s, const mma::Op (&M)[kHq / 8][4], int nu0,
                                        float (&h)[NT][4]) {
    const int lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) h[n][e] = 0.0f;
#pragma unroll
    for (int ka = 0; ka < kHq / 8; ++ka)
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const int nu = nu0 + n;
            const float2 w = *reinterpret_cast<const float2 *>(s.Wm + (8 * nu + gi) * kLDM + 8 * ka + 2 * tq);
            const mma::Op B[2] = {mma::loaded<false>(w.x), mma::loaded<false>(w.y)};
            mma::mma<false>(h[n], M[ka], B);
        }
}

// Z's row dots of column tiles nu0 .. nu0 + NT − 1 (from h_tiles<NT>): z0 / z1 += Σ SiLU(h + bm)
// w_z over the thread's columns (a quad sums a row afterwards).
template <class S, int NT>
__device__ __forceinline__ void z_part(const S &s, const float (&h)[NT][4], int nu0, float &z0,
                                       float &z1) {
    const int tq = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const int u = 8 * (nu0 + n) + 2 * tq;
        z0 = fmaf(silu_fast(h[n][0] + s.bm[u]), s.wz[u], z0);
        z0 = fmaf(silu_fast(h[n][1] + s.bm[u + 1]), s.wz[u + 1], z0);
        z1 = fmaf(silu_fast(h[n][2] + s.bm[u]), s.wz[u], z1);
        z1 = fmaf(silu_fast(h[n][3] + s.bm[u + 1]), s.wz[u + 1], z1);
    }
}

// Σ over a transition's rows of v (row g's value) and w (row g + 8's): the N rows are lanes
// g .. g + N − 1 of one half (N ≤ 8) or both halves (N = 16, returned in v).
__device__ __forceinline__ void transition_sum(int N, float &v, float &w) {
    if (N == 16) v += w;
    for (int o = 4; o < 4 * N && o < 32; o <<= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
        w += __shfl_xor_sync(0xffffffffu, w, o);
    }
}

using SmemB16 = SmemOf<__nv_bfloat16>;

// phi_tile on bfloat16 products: k16 step s packs the features of rotation steps 2s and 2s + 1
// (columns 16s + 2t, + 1 and 16s + 8 + 2t, + 1: the A fragment's natural order).
template <int NT>
__device__ __forceinline__ void phi_tile(const SmemB16 &s, float t0, float t1,
                                         float (&acc)[NT][4], float *cosr0, float *cosr1,
                                         int nu0 = 0) {
    const int gi = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
    uint32_t A[4];
    cos_steps(t0, t1, acc, cosr0, cosr1, [&](int ka, const float (&c0)[2], const float (&c1)[2]) {
        const int h = ka & 1, ks = ka >> 1;
        A[2 * h] = bmma::pack(c0[0], c0[1]);
        A[2 * h + 1] = bmma::pack(c1[0], c1[1]);
        if (!h) return;
#pragma unroll
        for (int nu = 0; nu < NT; ++nu) {
            const __nv_bfloat16 *w = s.Wphi + (8 * (nu0 + nu) + gi) * kLDP + 16 * ks + 2 * tq;
            bmma::mma(acc[nu], A, bmma::ld_pair(w), bmma::ld_pair(w + 8));
        }
    });
}

// h_tiles on bfloat16 products, from m's packed A fragments M[s] (columns 16s .. 16s + 15).
template <int NT>
__device__ __forceinline__ void h_tiles(const SmemB16 &s, const uint32_t (&M)[kHq / 16][4],
                                            int nu0, float (&h)[NT][4]) {
    const int lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) h[n][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kHq / 16; ++ks)
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const __nv_bfloat16 *w = s.Wm + (8 * (nu0 + n) + gi) * kLDM + 16 * ks + 2 * tq;
            bmma::mma(h[n], M[ks], bmma::ld_pair(w), bmma::ld_pair(w + 8));
        }
}

// m as the A fragments of h = m Wmᵀ on bfloat16 products: tiles 2s and 2s + 1 of m make A
// fragment s, (c0, c1) and (c2, c3) of the even tile in registers 0 and 1, of the odd one in 2
// and 3.
template <class T>
__device__ __forceinline__ void merge_tile(const SmemB16 &s, const float (&acc)[kHq / 8][4],
                                           const float *psi0, const float *psi1,
                                           uint32_t (&M)[kHq / 16][4], float *phir0, float *phir1,
                                           T *mr0, T *mr1) {
    merge_rows(s, acc, psi0, psi1, phir0, phir1, mr0, mr1, [&](int nu, const float (&m)[4]) {
        M[nu >> 1][2 * (nu & 1)] = bmma::pack(m[0], m[1]);
        M[nu >> 1][2 * (nu & 1) + 1] = bmma::pack(m[2], m[3]);
    });
}

// m's fragments for the products on E: TF32 operands, or packed bfloat16 pairs.
template <class E>
using Frags = std::conditional_t<std::is_same_v<E, float>, mma::Op[kHq / 8][4],
                                 uint32_t[kHq / 16][4]>;

// TF32 mode on sm_90a code (Hopper): h = m Wmᵀ on the warpgroup tensor cores (wgmma.cuh)
// instead of mma.sync. m's A fragments stay in registers as they are (wgmma's register A layout
// is mma.sync's); Wm is staged once per block as the B operand, K-major in the 128-byte swizzled
// layout, 4 chunks of 32 columns (128 rows of 128 bytes each), its columns within each group of
// 8 in the permuted contraction order of mma_tf32.cuh (column 2t at position t, 2t + 1 at
// t + 4), so that the same registers multiply the same weights as in h_tiles above. A
// warpgroup's 4 warps (64 rows) issue each k step of 8 as one instruction for a quarter's 32
// columns, instead of 4 mma.sync per warp with a shared-memory load each (16 accumulators beside
// m's 64 registers at two blocks per SM; ptxas serializes the products for registers, C7512, in
// the target pass and in the online pass's run-time-N instance, with halves as with quarters,
// and issues them back to back in the default N = 8 online instance). Wφ
// stays as SmemOf<float> stages it (φ is still mma.sync's). Side by side on an H100 at
// B = 16384: IQN lane 0.506 / 0.507 → 0.499 / 0.497 ms single-stream, multi-stream within the
// spread (bench/results/h100-2026-12-05-iqn-wgmma-before-after*.json): the passes are bound by
// their stores and loads more than by these products.
struct SmemWg : SmemOf<float> {
    uint32_t wm;  // shared-state-space address of Wm's swizzled copy (1024-byte aligned)
};
constexpr int kWmChunkFloats = kHq * 32;
constexpr size_t kSmemBytesWg =
    1024 + ((size_t)kHq * kHq + (size_t)kHq * kLDP + 3 * kHq) * sizeof(float);

// Where Wm[n][k] sits in SmemWg's copy, in floats from its base.
__device__ __forceinline__ int wm_swizzled(int n, int k) {
    const int j = k & 7, p = (k & 24) | ((j >> 1) + 4 * (j & 1));
    return (k >> 5) * kWmChunkFloats + n * 32 + ((((p >> 2) ^ (n & 7)) << 2) | (p & 3));
}

// stage_weights<float> for SmemWg: Wm swizzled from the first 1024-byte boundary (kSmemBytesWg
// has the slack), then Wφ, bφ, bm and w_z as there.
__device__ __forceinline__ SmemWg stage_weights_wg(float4 *sm, const float *Wphi,
                                                   const float *bphi, const float *Wm,
                                                   const float *bm, const float *wz) {
    SmemWg s;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(sm);
    const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
    float *wm = reinterpret_cast<float *>(reinterpret_cast<char *>(sm) + pad);
    s.wm = raw + pad;
    s.Wm = wm;
    s.Wphi = wm + kHq * kHq;
    s.bphi = s.Wphi + kHq * kLDP;
    s.bm = s.bphi + kHq;
    s.wz = s.bm + kHq;
    stage_matrix<kHq, kC>(s.Wphi, kLDP, Wphi);
    const float4 *w4 = reinterpret_cast<const float4 *>(Wm);
    stage_batched<8, float4>(
        kHq * kHq / 4, [&](int e) { return __ldg(w4 + e); },
        [&](int e, float4 v) {
            const int n = e / (kHq / 4), k = 4 * (e - n * (kHq / 4));
            const float4 r = tf32x4(v);
            wm[wm_swizzled(n, k)] = r.x;
            wm[wm_swizzled(n, k + 1)] = r.y;
            wm[wm_swizzled(n, k + 2)] = r.z;
            wm[wm_swizzled(n, k + 3)] = r.w;
        });
    stage_vectors(s, bphi, bm, wz);
#ifdef FH_HAVE_WGMMA
    wg::fence_proxy_shared();
#endif
    __syncthreads();
    return s;
}

// The weights for the kernels' products: SmemWg (WG), else SmemOf<E>.
template <bool WG, class E>
__device__ __forceinline__ auto stage_for(float4 *sm, const float *Wphi, const float *bphi,
                                          const float *Wm, const float *bm, const float *wz) {
    if constexpr (WG)
        return stage_weights_wg(sm, Wphi, bphi, Wm, bm, wz);
    else
        return stage_weights<E>(sm, Wphi, bphi, Wm, bm, wz);
}

// h_tiles on the warpgroup's products: column tiles nu0 .. nu0 + 3 (a quarter, n32), 16 k steps
// issued back to back, then waited for. Every thread of the warpgroup must call it (the
// instructions are warpgroup-wide).
template <int NT>
__device__ __forceinline__ void h_tiles(const SmemWg &s, const mma::Op (&M)[kHq / 8][4], int nu0,
                                       float (&h)[NT][4]) {
    static_assert(NT == 4, "quarters: wgmma.cuh's m64n32k8");
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) h[n][e] = 0.0f;
#ifdef FH_HAVE_WGMMA
    // The descriptors from an address the compiler cannot hoist out of the tile loop, so that it
    // does not keep each call's 16 live across it in the registers the products need.
    uint32_t base;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(base) : "r"(s.wm + (uint32_t)(nu0 * 8 * 128)));
    const uint64_t d0 = wg::sw128_desc(base);
    wg::pin(h);
    wg::fence();
#pragma unroll
    for (int ka = 0; ka < kHq / 8; ++ka)
        wg::mma_rs(h, M[ka][0].hi, M[ka][1].hi, M[ka][2].hi, M[ka][3].hi,
                   d0 + (uint64_t)(((ka >> 2) * kWmChunkFloats * 4 + (ka & 3) * 32) >> 4));
    wg::commit();
    wg::wait_all();
    wg::pin(h);
#else
    __trap();  // the host launches these instances only where sm_90a code was loaded
#endif
}

// Z's row dots without b_z, Σ_u SiLU(h_u + bm_u) w_z,u over all kHq columns of the thread's
// rows g (z0) and g + 8 (z1), h = m Wmᵀ from the m fragments M NT column tiles at a time
// (h_tiles<NT>, z_part; a half with mma.sync, a quarter on the warpgroup products, whose
// accumulators sit beside M in registers); every lane of the quad returns the row's sum.
// The target and online passes share it. S: the staged weights (SmemOf<E>, or SmemWg), F: m's
// fragments for them (Frags<E>).
template <class S, class F>
__device__ __forceinline__ void z_rows(const S &s, const F &M, float &z0, float &z1) {
    constexpr int NT = std::is_same_v<S, SmemWg> ? 4 : 8;
    z0 = 0.0f;
    z1 = 0.0f;
#pragma unroll
    for (int part = 0; part < kHq / 8 / NT; ++part) {
        float h[NT][4];
        h_tiles<NT>(s, M, NT * part, h);
        z_part(s, h, NT * part, z0, z1);
    }
    z0 = quad_sum(z0);
    z1 = quad_sum(z1);
}

// A warp's row of its block's partial sums: kinds 0, 1 of acc (colsum_quarter) at row[c], kinds
// 2, 3 at row[kHq + c].
__device__ __forceinline__ void store_colsums(double *row, const float (&acc)[2][4]) {
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = owned_col(p, e);
            row[c] = (double)acc[p][e];
            row[kHq + c] = (double)acc[p][2 + e];
        }
}

}  // namespace fh::cuda::iqn
