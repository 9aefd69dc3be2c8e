// The reward head's per-row math, its weights' staging and its column-read product, shared by
// the tensor-core head kernels (attention_head.cu, and the factored head's
// attention_head_factored.cu). Both hold h for a thread's two rows (g and g + 8 of the warp's
// m16 tile) as accumulator fragments over 64 columns, and keep the head's gradient sums in
// registers until their block flushes them.
#pragma once
#include <cstddef>

#include "aux_common.cuh"
#include "device_math.cuh"
#include "mma_tf32.cuh"
#include "tile128.cuh"

namespace fh::cuda::attn::head {

constexpr int kW = 64;                // attn_d_model = attn_head_hidden
constexpr int kNT = kW / 8;           // 8-column tiles of a row
constexpr int kPartW = 2 * kW + 2;    // a block's partial row: dbr1 | dw_r2 | db_r2 | Σ loss terms

// The sum over the warp's 8 row groups (lanes g = 0..7 of one t), in double, fixed order.
__device__ __forceinline__ double group_sum(float v) {
    double s = (double)v;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// W [64, 64] into dst as mma::swz<64> lays it out (mma_tf32.cuh), rounded to TF32 (bfloat16 with
// BF16). Scalar loads: the parameters' offsets in the learner's buffer need not be 16-byte
// aligned at every config with these widths.
template <bool BF16>
__device__ __forceinline__ void stage_w(float *dst, const float *src) {
#pragma unroll 4
    for (int e = threadIdx.x; e < kW * kW; e += blockDim.x)
        dst[mma::swz<kW>(e / kW, e % kW)] = mma::rounded<BF16>(__ldg(src + e));
}

// c[ν] += A · W over contraction step ka for the 8 column tiles ν, W [64, 64] read by columns
// (B[k][n] = W[k][n]) from its mma::swz<64> copy Ws in shared memory, holding TF32 values.
__device__ __forceinline__ void mma_cols(float (&c)[kNT][4], const mma::Op (&A)[4],
                                         const float *Ws, int ka, int gi, int tq) {
#pragma unroll
    for (int nu = 0; nu < kNT; ++nu) {
        const mma::Op Bf[2] = {
            mma::loaded<false>(Ws[mma::swz<kW>(8 * ka + 2 * tq, 8 * nu + gi)]),
            mma::loaded<false>(Ws[mma::swz<kW>(8 * ka + 2 * tq + 1, 8 * nu + gi)])};
        mma::mma<false>(c[nu], A, Bf);
    }
}

// SPEC §4's head on rows r0 (valid v0) and r1 (v1), h in H (no bias): r̂ (a quad sums a row),
// e = r̂ − r̃, dr = 2e / rows, then dh = (dr w_r2) ⊙ SiLU'(h + br1) in place of h, stored at
// dh + r·ld (as bfloat16 values with BF16), and the sums: dbr1 and dw_r2 at columns 8ν + 2t
// (+1) in acc_b and acc_w, Σ dr and Σ e² (lanes t = 0) in acc_dr and acc_loss.
template <bool BF16>
__device__ __forceinline__ void reward_rows(float (&H)[kNT][4], const float *br1s,
                                            const float *wr2s, float br2, const float *r,
                                            size_t r0, size_t r1, bool v0, bool v1, float rows,
                                            float *dh, size_t ld, int tq,
                                            float (&acc_b)[kNT][2], float (&acc_w)[kNT][2],
                                            double &acc_dr, double &acc_loss) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int nu = 0; nu < kNT; ++nu)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int u = 8 * nu + 2 * tq + e;
            s0 = fmaf(dev_silu(__fadd_rn(H[nu][e], br1s[u])), wr2s[u], s0);
            s1 = fmaf(dev_silu(__fadd_rn(H[nu][2 + e], br1s[u])), wr2s[u], s1);
        }
    s0 = tile::quad_sum(s0);
    s1 = tile::quad_sum(s1);
    const float e0 = v0 ? __fadd_rn(__fadd_rn(s0, br2), -__ldg(r + r0)) : 0.0f;
    const float e1 = v1 ? __fadd_rn(__fadd_rn(s1, br2), -__ldg(r + r1)) : 0.0f;
    const float dr0 = __fdiv_rn(__fmul_rn(2.0f, e0), rows);
    const float dr1 = __fdiv_rn(__fmul_rn(2.0f, e1), rows);
    if (tq == 0) {
        acc_dr += (double)dr0 + (double)dr1;
        acc_loss += (double)__fmul_rn(e0, e0) + (double)__fmul_rn(e1, e1);
    }
#pragma unroll
    for (int nu = 0; nu < kNT; ++nu) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int u = 8 * nu + 2 * tq + (e & 1);
            const float dr = e < 2 ? dr0 : dr1;
            const float pre = __fadd_rn(H[nu][e], br1s[u]);
            const float sg = dev_sigmoid(pre);
            H[nu][e] = __fmul_rn(__fmul_rn(dr, wr2s[u]), dev_dsilu_s(pre, sg));
            acc_w[nu][e & 1] += __fmul_rn(dr, __fmul_rn(pre, sg));
        }
        acc_b[nu][0] += H[nu][0] + H[nu][2];
        acc_b[nu][1] += H[nu][1] + H[nu][3];
        if (v0) tile::st2_round<BF16>(dh + r0 * ld + 8 * nu + 2 * tq, H[nu][0], H[nu][1]);
        if (v1) tile::st2_round<BF16>(dh + r1 * ld + 8 * nu + 2 * tq, H[nu][2], H[nu][3]);
    }
}

}  // namespace fh::cuda::attn::head
