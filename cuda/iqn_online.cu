// IQN's online pass and loss head (SPEC §4, §5.5 step 3) fused on tensor cores, for TF32 and BF16
// modes at iqn_hidden = 128, iqn_cos = 64 and 16 % iqn_n == 0. From ψ = SiLU(x̃ Wψᵀ + bψ)
// [B, 128] (a cuBLAS GEMM before it) and the target pass's Z̄ [B, N'], one kernel per row
// r = i·N + n:
//   draws τ_in (Philox purpose 2) and forms cos(π k τ_in)            -> tau, cos (if set)
//   φraw = cos Wφᵀ, m = ψ_i ⊙ SiLU(φraw + bφ)                         -> phi (if set), m
//   h = m Wmᵀ, Z_in = SiLU(h + bm)·w_z + b_z
//   T_im = r̃_i + γ(1 − d̃_i) Z̄_im, the quantile Huber loss terms and
//   dZ_in = −Σ_m |τ_in − 1{u < 0}| huber'_κ(u)/κ / (W·B·N'),  u = T_im − Z_in
//   dhpre = dZ_in w_z ⊙ SiLU'(h + bm) (h recomputed from the m fragments still in registers)
//                                                                     -> dh, z_mean
// and per block the column sums of dbm = Σ dhpre and dw_z = Σ dZ SiLU(h + bm), db_z = Σ dZ and
// the loss terms (one partial row per block; reduce_partials sums them in block order). The
// backward's GEMMs (dWm = dhᵀ m, dm = dh Wm, dWφ = dφpreᵀ cos) and the ψ/φ backward read what it
// writes (iqn.cu); with the fused backward the cosines are not stored, since dWφ's kernel
// (iqn_dwphi.cu) forms them again from τ. In FH_MATH_BF16 (the B16 instances) the products are
// bfloat16 ones (iqn_fused.cuh's SmemB16 overloads) and m and dhpre go out as bfloat16 instead,
// the operands of dWm's bfloat16 GEMM and the backward, half the bytes (OnlineArgs::dh16).
// This replaces five kernels of the unfused pass (taucos, the φ and Wm GEMMs, the merge and the
// warp-per-transition head) and its hraw round trip through memory.
//
// Tiling: iqn_fused.cuh (tiles of 128 rows, a warp per 16 rows, weights in shared memory). Because
// 16 % N == 0, a warp's rows hold whole transitions: z_mean is a fixed-order shuffle sum. The
// column sums of a tile are summed over the warp's 8 row groups by a transposing butterfly
// (part4, merge2: 5 shuffles per 8 column tiles), after which each lane owns 4 of the 128
// columns and accumulates them across tiles in registers; the block sums its warps in order
// at the end. No atomics: the same inputs give the same bits.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "aux_common.cuh"
#include "common.hpp"
#include "error.hpp"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
#include "launch.cuh"

namespace fh::cuda::iqn {

namespace {

constexpr int kPartW = 2 * kHq + 2;

// dZ of one row (0 past the batch) and its loss terms Σ_m |τ − 1{u<0}| huber_κ(u) / κ.
__device__ __forceinline__ float head_row(const OnlineArgs &a, int Nt, bool valid, size_t i,
                                          float tau, float z, double &loss) {
    if (!valid) return 0.0f;
    const float ri = __ldg(a.r + i), disc = a.gamma * (1.0f - __ldg(a.done + i));
    const float *zt = a.zt + i * Nt;
    float ls = 0.0f, ds = 0.0f;
    for (int m = 0; m < Nt; ++m) {
        const float u = fmaf(disc, __ldg(zt + m), ri) - z;
        const float w = fabsf(tau - (u < 0.0f ? 1.0f : 0.0f));
        ls = fmaf(w, dev_huber(u, a.kappa), ls);
        ds = fmaf(w, dev_dhuber(u, a.kappa), ds);
    }
    loss += (double)ls / a.kappa;
    return (float)(-((double)ds / a.kappa) * a.scale);
}

// NC, NTC: N and N' compiled in (kFixedN), or 0 to read them from a. B16 (FH_MATH_BF16): the
// products on bfloat16 operands (iqn_fused.cuh's SmemB16 overloads) and m, dhpre to a.m16,
// a.dh16 as bfloat16; else TF32 products and a.m, a.dh. The cosines go to a.cos where set
// (float32, either instance). WG (TF32 only): h on the warpgroup products (iqn_fused.cuh's
// SmemWg).
template <int NC, int NTC, bool B16, bool WG>
__global__ void __launch_bounds__(kWarps * 32, 2) k_iqn_online(OnlineArgs a) {
    pdl_enter();
    static_assert(!(WG && B16), "the warpgroup products are TF32's");
    using E = std::conditional_t<B16, __nv_bfloat16, float>;  // the weights' element type
    using Out = std::conditional_t<B16, __nv_bfloat16, float>;
    float *const cos_out = a.cos;
    Out *const m_out = pick<B16>(a.m, a.m16), *const dh_out = pick<B16>(a.dh, a.dh16);
    extern __shared__ float4 sm4[];
    const auto sw = stage_for<WG, E>(sm4, a.Wphi, a.bphi, a.Wm, a.bm, a.wz);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const uint32_t st = (uint32_t)*a.step;
    const float bz = __ldg(a.bz);
    const int N = NC ? NC : a.N, Nt = NTC ? NTC : a.Nt;
    const size_t R = (size_t)a.B * N;
    const size_t ntiles = (R + kRowsPerTile - 1) / kRowsPerTile;
    // Column-sum accumulators of dbm (k = 0, 1) and dw_z (k = 2, 3), colsum_quarter's layout.
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    double acc_loss = 0.0, acc_bz = 0.0;
    for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const size_t r0 = tile * kRowsPerTile + (size_t)warp * 16 + gi, r1 = r0 + 8;
        const bool v0 = r0 < R, v1 = r1 < R;
        const float t0 = draw_tau(a.seed, a.row0, r0, R, N, st, PURPOSE_IQN_ONLINE);
        const float t1 = draw_tau(a.seed, a.row0, r1, R, N, st, PURPOSE_IQN_ONLINE);
        if (tq == 0) {
            if (v0) a.tau[r0] = t0;
            if (v1) a.tau[r1] = t1;
        }
        float phi[kHq / 8][4];
        phi_tile(sw, t0, t1, phi, v0 && cos_out ? cos_out + r0 * kC : nullptr,
                 v1 && cos_out ? cos_out + r1 * kC : nullptr);
        const size_t i0 = v0 ? r0 / N : 0, i1 = v1 ? r1 / N : 0;
        Frags<E> M;
        merge_tile(sw, phi, a.psi + i0 * kHq, a.psi + i1 * kHq, M,
                   v0 && a.phi ? a.phi + r0 * kHq : nullptr,
                   v1 && a.phi ? a.phi + r1 * kHq : nullptr,
                   v0 ? m_out + r0 * kHq : nullptr, v1 ? m_out + r1 * kHq : nullptr);
        // Z_in of the thread's two rows (every lane of the quad holds them).
        float z0, z1;
        z_rows(sw, M, z0, z1);
        z0 += bz;
        z1 += bz;
        // z_mean: the transition's N rows are lanes g .. g + N − 1 of one half (N ≤ 8), or both
        // halves of the warp (N = 16).
        {
            float s0 = z0, s1 = z1;
            transition_sum(N, s0, s1);
            if (tq == 0 && gi % N == 0) {
                if (v0) a.z_mean[i0] = s0 / (float)N;
                if (v1 && N < 16) a.z_mean[i1] = s1 / (float)N;
            }
        }
        double loss = 0.0;
        const float dz0 = head_row(a, Nt, v0, i0, t0, z0, loss);
        const float dz1 = head_row(a, Nt, v1, i1, t1, z1, loss);
        if (tq == 0) {
            acc_loss += loss;
            acc_bz += (double)dz0 + (double)dz1;
        }
        // dhpre = dZ w_z ⊙ SiLU'(h + bm) from h recomputed, a quarter of the columns at a time
        // (fewer live registers), and the tile's column sums.
        Out *dh0 = v0 ? dh_out + r0 * kHq : nullptr, *dh1 = v1 ? dh_out + r1 * kHq : nullptr;
        float pend[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float h[4][4];
            h_tiles<4>(sw, M, 4 * q, h);
            float v[4][4];  // [dbm u, dbm u + 1, dw_z u, dw_z u + 1][column tile]
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const int u = 8 * (4 * q + n) + 2 * tq;
                const float bm0 = sw.bm[u], bm1 = sw.bm[u + 1];
                const float wz0 = sw.wz[u], wz1 = sw.wz[u + 1];
                const float p00 = h[n][0] + bm0, p01 = h[n][1] + bm1;  // row g
                const float p10 = h[n][2] + bm0, p11 = h[n][3] + bm1;  // row g + 8
                const float s00 = sigmoid_fast(p00), s01 = sigmoid_fast(p01);
                const float s10 = sigmoid_fast(p10), s11 = sigmoid_fast(p11);
                const float d00 = dz0 * wz0 * dsilu_of(p00, s00);
                const float d01 = dz0 * wz1 * dsilu_of(p01, s01);
                const float d10 = dz1 * wz0 * dsilu_of(p10, s10);
                const float d11 = dz1 * wz1 * dsilu_of(p11, s11);
                if (dh0) st2(dh0 + u, d00, d01);
                if (dh1) st2(dh1 + u, d10, d11);
                v[0][n] = d00 + d10;
                v[1][n] = d01 + d11;
                v[2][n] = fmaf(dz0, p00 * s00, dz1 * (p10 * s10));
                v[3][n] = fmaf(dz0, p01 * s01, dz1 * (p11 * s11));
            }
            colsum_quarter<4>(q, v, pend, acc);
        }
    }
    // The block's partial row: warp rows in shared memory (over the weights), summed in warp order.
    acc_loss = warp_sum(acc_loss);
    acc_bz = warp_sum(acc_bz);
    __syncthreads();
    double *red = reinterpret_cast<double *>(sm4);
    double *mine = red + (size_t)warp * kPartW;
    store_colsums(mine, acc);
    if (lane == 0) {
        mine[2 * kHq] = acc_bz;
        mine[2 * kHq + 1] = acc_loss;
    }
    aux::flush_row_acc(red, kPartW, a.partial + (size_t)blockIdx.x * kPartW);
}

}  // namespace

int fused_blocks(size_t rows) {
    const size_t tiles = (rows + kRowsPerTile - 1) / kRowsPerTile;
    return (int)std::max<size_t>(1, std::min<size_t>(tiles, 2 * (size_t)sm_count()));
}

bool online_fused_prepare() {
    for (const void *k : {(const void *)k_iqn_online<0, 0, false, false>,
                          (const void *)k_iqn_online<kFixedN, kFixedN, false, false>})
        aux::allow_smem(k, kSmemBytes<float>, "IQN online pass");
    for (const void *k : {(const void *)k_iqn_online<0, 0, true, false>,
                          (const void *)k_iqn_online<kFixedN, kFixedN, true, false>})
        aux::allow_smem(k, kSmemBytes<__nv_bfloat16>, "IQN online pass (bfloat16)");
    if (!run_probe((const void *)wg::wgmma_probe_kernel<2>)) return false;
    for (const void *k : {(const void *)k_iqn_online<0, 0, false, true>,
                          (const void *)k_iqn_online<kFixedN, kFixedN, false, true>})
        aux::allow_smem(k, kSmemBytesWg, "IQN online pass (warpgroup products)");
    return true;
}

namespace {
template <bool B16, bool WG>
void launch_online(const OnlineArgs &a, int blocks, cudaStream_t s) {
    const size_t smem = WG ? kSmemBytesWg : B16 ? kSmemBytes<__nv_bfloat16> : kSmemBytes<float>;
    if (fixed_n(a.N) && fixed_n(a.Nt))
        FH_LAUNCH((k_iqn_online<kFixedN, kFixedN, B16, WG>), blocks, kWarps * 32, smem, s, a);
    else
        FH_LAUNCH((k_iqn_online<0, 0, B16, WG>), blocks, kWarps * 32, smem, s, a);
}
}  // namespace

void online_fused(const OnlineArgs &a, int blocks, cudaStream_t s) {
    if (a.dh16) {
        if (!a.m16 || a.wg)
            fail(FH_ERR_INTERNAL, "IQN online pass: dh16 set without m16, or with wg");
        launch_online<true, false>(a, blocks, s);
    } else if (a.wg) {
        launch_online<false, true>(a, blocks, s);
    } else {
        launch_online<false, false>(a, blocks, s);
    }
}

}  // namespace fh::cuda::iqn
