// IQN's backward through the merge layer (SPEC §5.5 step 3, the chain rule through m = ψ ⊙ φ)
// fused on tensor cores, for TF32 and BF16 modes at iqn_hidden = 128, iqn_cos = 64 and
// 16 % iqn_n == 0.
// From the online pass's dhpre and τ (iqn_online.cu), per row r = i·N + n:
//   φraw_r = cos(π k τ_r) Wφᵀ                             (recomputed: the online pass's products)
//   dm_r   = dhpre_r Wm                                   (K = 128, on tensor cores)
//   dφpre_r = (dm_r ⊙ ψ_i) ⊙ SiLU'(φraw_r + bφ)           -> phi
//   dψpre_i = (Σ_n dm_in ⊙ SiLU(φraw_in + bφ)) ⊙ SiLU'(ψpre_i)  -> dpsi
// with per block the column sums of dbφ = Σ_r dφpre and dbψ = Σ_i dψpre. In FH_MATH_BF16 (the
// B16 instances) φraw and dm are bfloat16 products (mma_bf16.cuh, Wφ and Wmᵀ staged as bfloat16),
// dhpre comes from the online pass's bfloat16 copy, dφpre goes out as bfloat16 to its own
// buffer, the operand of the dWφ kernel's bfloat16 instance, and dψpre is stored rounded to
// bfloat16 values for dWψ's GEMM, its only reader (the sums use it unrounded). dm never goes to
// memory: this replaces the cuBLAS GEMM dm = dh Wm and the ψ/φ backward kernel of the unfused
// path (iqn.cu), which wrote dm (64 MiB at B = 16384) and read it back. dWm and dWψ stay
// cuBLAS GEMMs over all rows; dWφ is iqn_dwphi.cu's kernel.
//
// φraw is recomputed, not read: the online pass used to store it (64 MiB at B = 16384) and this
// kernel read it back. It forms φraw from τ with Wφ staged as the online pass stages it and the
// same phi_tile (iqn_fused.cuh), so the bits are the online pass's (the state digests of all six
// modes were bitwise equal either way): IQN lane 0.498 / 0.499 → 0.469 / 0.466 ms single-stream,
// wall 1.521 / 1.501 → 1.491 / 1.484 ms multi-stream TF32 and 1.413 / 1.409 → 1.373 / 1.393 BF16
// on an H100 (bench/results/h100-2026-12-06-iqn-phi-recompute-before-after*.json). Two earlier
// forms of it lost: φ from stored cosines (2026-12-01), and 12-warp blocks holding all of φraw
// (2026-12-03); this one keeps 16 warps at 128 registers by taking the columns in two halves.
//
// Tiling. A block of 16 warps (one per SM: 137 KiB of shared memory, 128 registers a thread)
// stages Wmᵀ [128, 128] in shared memory once (rounded to TF32, rows of 136 floats, ≡ 8 mod 32, so
// the float2 B-fragment loads of a half-warp hit 32 banks; in BF16 bfloat16, rows of 136, 68
// words ≡ 4 mod 32, so the 32-bit loads of a warp hit 32 banks) and Wφ [128, 64] as the online
// pass does, and walks through tiles of 256 rows; warp w owns rows 16w .. 16w + 15, each thread
// rows g and g + 8 (g = lane / 4, t = lane % 4). A tile is taken in two halves of 8 column tiles:
// φraw's and dm's accumulators of the half in registers (32 + 32), then the half's two quarters
// of the epilogue. dhpre's A fragments come from memory (float2 per row and k step, whole
// 32-byte sectors; in the B16 instance two bfloat16 pairs per row and k16 step), once per half
// (the second read hits the caches); staged ahead through a ring of cp.async stages instead (tried
// twice, 2026-12-06), they left the step no faster, though the second ring's kernel was 5 % faster
// run alone (docs/cuda.md, Findings). At N = 8 (the kFixedN instance, SPSI) the warp starts
// cp.async copies of the ψ rows of its two transitions at the tile's start, which land while the
// products run; read from global memory at their use, each load waited behind the stores of dφpre
// and dψ before it (IQN lane 0.468 / 0.468 → 0.461 / 0.462 ms single-stream, the same bits,
// bench/results/h200-2026-12-03-iqn-bwd-psi-before-after*.json; preloading them into registers
// instead spilled). The ψpre rows of the same two transitions (and bψ, once) are staged the same
// way: dψpre's SiLU' needs them on the transition's first row group only, whose loads from memory
// at their use, four lanes waiting with the warp behind each column tile's shuffles, had left about
// 5 % of the IQN lane in latency (IQN lane 0.445 / 0.447 → 0.421 / 0.421 ms single-stream, wall
// 1.439 / 1.436 → 1.420 / 1.421 ms multi-stream, the same bits; H100,
// bench/results/h100-2026-12-06-iqn-bwd-psipre-before-after.json). Because 16 % N == 0 a
// transition's rows are lanes of one warp: Σ_n is a fixed-order shuffle sum, written by the
// transition's first row group. Column sums: colsum_quarter (iqn_fused.cuh), then the block's warps
// in order. No atomics.
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

constexpr int kBwdW = 2 * kHq;
constexpr int kBwdWarps = 16, kBwdTile = 16 * kBwdWarps;
// Wmᵀ, bφ, Wφ (rows of kLDP), then (N = 8) the ψ rows and the ψpre rows of a warp's two
// transitions, and bψ: 137 KiB, one block per SM.
constexpr size_t kBwdSmemBytes = ((size_t)kHq * kLDM + kHq + (size_t)kHq * kLDP +
                                  (size_t)kBwdWarps * 4 * kHq + kHq) *
                                 sizeof(float);

// Row state of one thread in a tile: its rows g and g + 8, their transitions, and whether it
// writes dψ for them.
struct Rows {
    size_t r0, r1, i0, i1;
    bool v0, v1, lead0, lead1;
};

// ψ's pre-activations of transition i at columns u, u + 1 (x̃ Wψᵀ + bψ): from the staged row
// pre (and bψ in shared memory, bps) where the kernel stages them, else from memory.
__device__ __forceinline__ float2 psi_pre_pair(const BackwardArgs &a, size_t i, int u,
                                               const float *pre, const float *bps) {
    const float2 pp = pre ? *reinterpret_cast<const float2 *>(pre + u)
                          : __ldg(reinterpret_cast<const float2 *>(a.psi_pre + i * kHq + u));
    const float b0 = pre ? bps[u] : __ldg(a.bpsi + u);
    const float b1 = pre ? bps[u + 1] : __ldg(a.bpsi + u + 1);
    return make_float2(__fadd_rn(pp.x, b0), __fadd_rn(pp.y, b1));
}

// The epilogue of column tiles 4q .. 4q + 3 from their dm accumulators: dφpre, dψpre on the
// transitions' first row groups, and the column sums into acc.
// phi(n, f0, f1) gives φraw of the thread's rows at its two columns of the quarter's column tile
// n (0 for rows past the batch). B16: dφpre goes to a.dphi16 as bfloat16 (FH_MATH_BF16), else to
// a.phi. SPSI: ps0, ps1 (pp0, pp1) are the staged ψ (ψpre) rows of the thread's transitions, bps
// bψ in shared memory.
template <bool SPSI, bool B16, class Phi>
__device__ __forceinline__ void epilogue_quarter(const BackwardArgs &a, const float *bphi,
                                                 const Rows &w, int N, int q,
                                                 const float (&dm)[4][4], Phi &&phi,
                                                 const float *ps0, const float *ps1,
                                                 const float *pp0, const float *pp1,
                                                 const float *bps, float (&pend)[4],
                                                 float (&acc)[2][4]) {
    const int tq = threadIdx.x & 3;
    auto *const out = pick<B16>(a.phi, a.dphi16);
    auto *ph0 = out + w.r0 * kHq, *ph1 = out + w.r1 * kHq;
    float v[4][4];  // [dbφ u, dbφ u + 1, dbψ u, dbψ u + 1][column tile]
#pragma unroll
    for (int n = 0; n < 4; ++n) {
        const int u = 8 * (4 * q + n) + 2 * tq;
        float2 f0, f1;
        phi(n, f0, f1);
        // Staged ψ rows exist only for rows in the batch (the others' products are 0 and must
        // not meet stale shared memory).
        const float2 z2 = make_float2(0.0f, 0.0f);
        const float2 p0 = SPSI ? (w.v0 ? *reinterpret_cast<const float2 *>(ps0 + u) : z2)
                               : __ldg(reinterpret_cast<const float2 *>(a.psi + w.i0 * kHq + u));
        const float2 p1 = SPSI ? (w.v1 ? *reinterpret_cast<const float2 *>(ps1 + u) : z2)
                               : __ldg(reinterpret_cast<const float2 *>(a.psi + w.i1 * kHq + u));
        const float b0 = bphi[u], b1 = bphi[u + 1];
        const float z00 = f0.x + b0, z01 = f0.y + b1, z10 = f1.x + b0, z11 = f1.y + b1;
        const float s00 = sigmoid_fast(z00), s01 = sigmoid_fast(z01);
        const float s10 = sigmoid_fast(z10), s11 = sigmoid_fast(z11);
        const float d00 = dm[n][0] * p0.x * dsilu_of(z00, s00);
        const float d01 = dm[n][1] * p0.y * dsilu_of(z01, s01);
        const float d10 = dm[n][2] * p1.x * dsilu_of(z10, s10);
        const float d11 = dm[n][3] * p1.y * dsilu_of(z11, s11);
        if (w.v0) st2(ph0 + u, d00, d01);
        if (w.v1) st2(ph1 + u, d10, d11);
        v[0][n] = d00 + d10;
        v[1][n] = d01 + d11;
        // Σ_n dm ⊙ φ over each transition, then dψpre on its first row group's lanes.
        float e0 = dm[n][0] * (z00 * s00), e1 = dm[n][1] * (z01 * s01);
        float e2 = dm[n][2] * (z10 * s10), e3 = dm[n][3] * (z11 * s11);
        transition_sum(N, e0, e2);
        transition_sum(N, e1, e3);
        float q00 = 0.0f, q01 = 0.0f, q10 = 0.0f, q11 = 0.0f;
        if (w.lead0 && w.v0) {
            const float2 pp = psi_pre_pair(a, w.i0, u, SPSI ? pp0 : nullptr, bps);
            q00 = e0 * dsilu_fast(pp.x);
            q01 = e1 * dsilu_fast(pp.y);
            tile::st2_round<B16>(a.dpsi + w.i0 * kHq + u, q00, q01);
        }
        if (w.lead1 && w.v1) {
            const float2 pp = psi_pre_pair(a, w.i1, u, SPSI ? pp1 : nullptr, bps);
            q10 = e2 * dsilu_fast(pp.x);
            q11 = e3 * dsilu_fast(pp.y);
            tile::st2_round<B16>(a.dpsi + w.i1 * kHq + u, q10, q11);
        }
        v[2][n] = q00 + q10;
        v[3][n] = q01 + q11;
    }
    colsum_quarter<4>(q, v, pend, acc);
}

// Wmᵀ into shared memory as E, rounded for the products (TF32 in float32, or bfloat16 for
// FH_MATH_BF16's: rows of LD = kLDM floats or bfloat16, ≡ 8 or 4 words mod 32 so that the
// B-fragment loads hit 32 banks, the file comment says how; the bfloat16 copy in the float32
// one's space):
// Wm's row j as float4s along k, lanes along j, so that the transposed stores of a warp go to
// 32 consecutive elements of a WmT row (no bank conflicts); 16 loads per thread in flight
// (stage.cuh). Out of line: inlined, it shifted the main loop's register allocation into a
// spill.
__device__ __forceinline__ float rounded_as(float *, float x) { return mma::stored<false>(x); }
__device__ __forceinline__ __nv_bfloat16 rounded_as(__nv_bfloat16 *, float x) {
    return __float2bfloat16_rn(x);
}
template <class E, int LD>
__device__ __noinline__ void stage_wmT(E *WmT, const float *Wm) {
    const float4 *w4 = reinterpret_cast<const float4 *>(Wm);
    stage_batched<16, float4>(
        kHq * kHq / 4, [&](int e) {
            const int j = e % kHq, k4 = e / kHq;
            return __ldg(w4 + j * (kHq / 4) + k4);
        },
        [&](int e, float4 v) {
            const int j = e % kHq, k = 4 * (e / kHq);
            WmT[k * LD + j] = rounded_as(WmT, v.x);
            WmT[(k + 1) * LD + j] = rounded_as(WmT, v.y);
            WmT[(k + 2) * LD + j] = rounded_as(WmT, v.z);
            WmT[(k + 3) * LD + j] = rounded_as(WmT, v.w);
        });
}

// dm = dhpre Wm of the thread's rows, column tiles nu0 .. nu0 + NT − 1: A from memory (dh0, dh1:
// the rows' dhpre, float32 or bfloat16), B from Wmᵀ (TF32: k = 8κ + 2t and + 1, the permuted
// order; bfloat16: the natural order of mma_bf16.cuh). A tile's products do not depend on which
// others are computed beside it.
template <bool B16, int NT, class D>
__device__ __forceinline__ void dm_tiles(const float *WmT, const D *dh0, const D *dh1, bool v0,
                                         bool v1, int nu0, float (&dm)[NT][4]) {
    const int gi = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
#pragma unroll
    for (int nu = 0; nu < NT; ++nu)
#pragma unroll
        for (int e = 0; e < 4; ++e) dm[nu][e] = 0.0f;
    if constexpr (B16) {
        // k16 step s: dhpre's columns 16s + 2t, + 1 and 16s + 8 + 2t, + 1 (bfloat16 pairs).
        const __nv_bfloat16 *WmTb = reinterpret_cast<const __nv_bfloat16 *>(WmT);
#pragma unroll 2
        for (int ks = 0; ks < kHq / 16; ++ks) {
            const int k = 16 * ks + 2 * tq;
            const uint32_t A[4] = {v0 ? bmma::ldg_pair(dh0 + k) : 0u,
                                   v1 ? bmma::ldg_pair(dh1 + k) : 0u,
                                   v0 ? bmma::ldg_pair(dh0 + k + 8) : 0u,
                                   v1 ? bmma::ldg_pair(dh1 + k + 8) : 0u};
#pragma unroll
            for (int nu = 0; nu < NT; ++nu) {
                const __nv_bfloat16 *wp = WmTb + (8 * (nu0 + nu) + gi) * kLDM + k;
                bmma::mma(dm[nu], A, bmma::ld_pair(wp), bmma::ld_pair(wp + 8));
            }
        }
    } else {
#pragma unroll 4
        for (int ka = 0; ka < kHq / 8; ++ka) {
            const int k = 8 * ka + 2 * tq;
            const float2 x0 = v0 ? ld2(dh0 + k) : make_float2(0.0f, 0.0f);
            const float2 x1 = v1 ? ld2(dh1 + k) : make_float2(0.0f, 0.0f);
            const mma::Op A[4] = {mma::op<false>(x0.x), mma::op<false>(x1.x),
                                  mma::op<false>(x0.y), mma::op<false>(x1.y)};
#pragma unroll
            for (int nu = 0; nu < NT; ++nu) {
                const float2 wv =
                    *reinterpret_cast<const float2 *>(WmT + (8 * (nu0 + nu) + gi) * kLDM + k);
                const mma::Op B[2] = {mma::loaded<false>(wv.x), mma::loaded<false>(wv.y)};
                mma::mma<false>(dm[nu], A, B);
            }
        }
    }
}

// A block of kBwdWarps warps. NC: N compiled in (kFixedN), or 0 to read it from a; only the
// kFixedN instance stages ψ. B16 (FH_MATH_BF16): dhpre read from a.dh16, dφpre written to
// a.dphi16, both bfloat16, and dm on bfloat16 products (mma_bf16.cuh) with Wmᵀ staged as
// bfloat16.
template <int NC, bool B16>
__global__ void __launch_bounds__(kBwdWarps * 32, 1) k_iqn_backward(BackwardArgs a) {
    pdl_enter();
    constexpr bool SPSI = NC == kFixedN;
    static_assert(!SPSI || NC == 8, "ψ staged for two transitions a warp");
    using E = std::conditional_t<B16, __nv_bfloat16, float>;
    extern __shared__ float4 sm4[];
    float *WmT = reinterpret_cast<float *>(sm4);  // [k'][j] = Wm[j][k']
    float *bphi = WmT + kHq * kLDM;
    float *wphi = bphi + kHq;  // Wφ as the online pass stages it (iqn_fused.cuh's stage_matrix)
    stage_wmT<E, kLDM>(reinterpret_cast<E *>(WmT), a.Wm);
    stage_matrix<kHq, kC>(reinterpret_cast<E *>(wphi), kLDP, a.Wphi);
    // After Wφ: every warp's two ψ rows, then every warp's two ψpre rows, then bψ (N = 8).
    float *const rows = wphi + (size_t)kHq * kLDP, *const bps = rows + kBwdWarps * 4 * kHq;
    for (int e = threadIdx.x; e < kHq; e += blockDim.x) {
        bphi[e] = __ldg(a.bphi + e);
        if (SPSI) bps[e] = __ldg(a.bpsi + e);
    }
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2;
    const int N = NC ? NC : a.N;
    const size_t R = (size_t)a.B * N;
    const size_t ntiles = (R + kBwdTile - 1) / kBwdTile;
    float *const pss = rows + warp * 2 * kHq;                  // the warp's ψ rows
    float *const pps = rows + (kBwdWarps + warp) * 2 * kHq;    // and its ψpre rows
    SmemOf<E> sphi{};  // Wφ for phi_tile
    sphi.Wphi = reinterpret_cast<E *>(wphi);
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};  // dbφ k=0,1; dbψ k=2,3
    for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const size_t rw = tile * kBwdTile + (size_t)warp * 16;  // the warp's first row
        if (SPSI) {
            const size_t t0 = rw / 8;  // the warp's two transitions
            for (int c = lane; c < 2 * (kHq / 4); c += 32) {
                const int rr = c / (kHq / 4), k4 = c - rr * (kHq / 4);
                if (t0 + rr < (size_t)a.B) {
                    cp_async16(pss + rr * kHq + 4 * k4, a.psi + (t0 + rr) * kHq + 4 * k4);
                    cp_async16(pps + rr * kHq + 4 * k4, a.psi_pre + (t0 + rr) * kHq + 4 * k4);
                }
            }
        }
        Rows w;
        w.r0 = rw + gi;
        w.r1 = w.r0 + 8;
        w.v0 = w.r0 < R;
        w.v1 = w.r1 < R;
        w.i0 = w.v0 ? w.r0 / N : 0;
        w.i1 = w.v1 ? w.r1 / N : 0;
        w.lead0 = gi % N == 0;
        w.lead1 = N < 16 && gi % N == 0;
        const auto *const dhp = pick<B16>(a.dh, a.dh16);
        const auto *dh0 = dhp + w.r0 * kHq, *dh1 = dhp + w.r1 * kHq;
        // τ of the thread's rows, as the online pass drew them (0 past the batch, as there).
        const float t0 = w.v0 ? __ldg(a.tau + w.r0) : 0.0f;
        const float t1 = w.v1 ? __ldg(a.tau + w.r1) : 0.0f;
        float pend[4];
        constexpr int kHalf = kHq / 16;  // column tiles a half
        // Not unrolled: unrolled, the bfloat16 instance spills (40 bytes); rolled, the column
        // sums' acc is indexed by h and lives in local memory (32 bytes, 8 accesses a tile).
#pragma unroll 1
        for (int h = 0; h < 2; ++h) {
            float ph[kHalf][4], dm[kHalf][4];
            phi_tile(sphi, t0, t1, ph, nullptr, nullptr, kHalf * h);
            dm_tiles<B16>(WmT, dh0, dh1, w.v0, w.v1, kHalf * h, dm);
            if (h == 0) {
                cp_async_wait_all();  // the ψ rows
                __syncwarp();
            }
#pragma unroll
            for (int qq = 0; qq < 2; ++qq) {
                float dq[4][4];
#pragma unroll
                for (int n = 0; n < 4; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dq[n][e] = dm[4 * qq + n][e];
                const auto phi = [&](int n, float2 &f0, float2 &f1) {
                    const float *p = ph[4 * qq + n];
                    f0 = w.v0 ? make_float2(p[0], p[1]) : make_float2(0.0f, 0.0f);
                    f1 = w.v1 ? make_float2(p[2], p[3]) : make_float2(0.0f, 0.0f);
                };
                epilogue_quarter<SPSI, B16>(a, bphi, w, N, 2 * h + qq, dq, phi, pss, pss + kHq,
                                            pps, pps + kHq, bps, pend, acc);
            }
        }
        __syncwarp();  // the ψ rows are read before the next tile's copies land
    }
    // The block's partial row: warp rows in shared memory (over Wmᵀ), summed in warp order.
    __syncthreads();
    double *red = reinterpret_cast<double *>(sm4);
    double *mine = red + (size_t)warp * kBwdW;
    store_colsums(mine, acc);
    aux::flush_row_acc(red, kBwdW, a.partial + (size_t)blockIdx.x * kBwdW);
}

}  // namespace

void backward_fused_prepare() {
    for (const void *k : {(const void *)k_iqn_backward<0, false>,
                          (const void *)k_iqn_backward<kFixedN, false>,
                          (const void *)k_iqn_backward<0, true>,
                          (const void *)k_iqn_backward<kFixedN, true>})
        aux::allow_smem(k, kBwdSmemBytes, "IQN backward through m");
}

namespace {
template <bool B16>
void launch_backward(const BackwardArgs &a, int nb, cudaStream_t s) {
    if (fixed_n(a.N))
        FH_LAUNCH((k_iqn_backward<kFixedN, B16>), nb, kBwdWarps * 32, kBwdSmemBytes, s, a);
    else
        FH_LAUNCH((k_iqn_backward<0, B16>), nb, kBwdWarps * 32, kBwdSmemBytes, s, a);
}
}  // namespace

int backward_fused(const BackwardArgs &a, int blocks, cudaStream_t s) {
    const size_t tiles = ((size_t)a.B * a.N + kBwdTile - 1) / kBwdTile;
    const int nb = (int)std::max<size_t>(
        1, std::min<size_t>({tiles, (size_t)sm_count(), (size_t)std::max(1, blocks)}));
    if (!a.dh16 != !a.dphi16)
        fail(FH_ERR_INTERNAL, "IQN backward through m: dh16 and dphi16 set apart");
    if (!a.tau || !a.Wphi) fail(FH_ERR_INTERNAL, "IQN backward through m: no tau or Wphi");
    if (a.dh16)
        launch_backward<true>(a, nb, s);
    else
        launch_backward<false>(a, nb, s);
    return nb;
}

}  // namespace fh::cuda::iqn
