// IQL's unfused expectile head (iql_head.hpp): two kernels of the same arithmetic, the general
// one with the warp's column sums in shared memory and one with the lane's columns in registers.
#include "aux_common.cuh"
#include "iql_head.hpp"
#include "launch.cuh"
#include "nn.cuh"

namespace fh::cuda::iql {

namespace {

// grid (blocks, 2 nets), block warps·32; warp w of block b takes rows b·rpb + w, + warps, ...
__global__ void k_iql_head(HeadArgs a) {
    pdl_enter();
    extern __shared__ double acc_all[];
    const int net = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5, Hi = a.Hi, W = 2 * Hi + 2;
    double *acc = acc_all + (size_t)warp * W;
    for (int c = lane; c < W; c += 32) acc[c] = 0.0;
    __syncwarp();

    const float *p = a.params + (size_t)net * a.total;
    const float *w3 = p + a.off_w3;
    const float *b2 = p + a.off_b2;
    const float b3 = p[a.off_b3];
    const float tau = net ? a.tau[1] : a.tau[0];  // (no dynamic indexing of the params)
    const size_t base = (size_t)net * a.B * Hi;
    const int r0 = blockIdx.x * a.rows_per_blk, r1 = min(a.B, r0 + a.rows_per_blk);
    for (int r = r0 + warp; r < r1; r += nw) {
        const float *hrow = a.h2 + base + (size_t)r * Hi;
        float *prow = a.pre2 + base + (size_t)r * Hi;
        float s = 0.0f;
        for (int j = lane; j < Hi; j += 32) s = fmaf(hrow[j], w3[j], s);
        s = warp_sum(s);
        const float V = __fadd_rn(s, b3);
        const float q = a.qsa[r];
        const float u = __fadd_rn(q, -V);
        const float w = u < 0.0f ? __fadd_rn(1.0f, -tau) : tau;  // |τ − [ũ < 0]|
        const float li = __fmul_rn(__fmul_rn(w, u), u);
        const float dV = __fdiv_rn(__fmul_rn(__fmul_rn(-2.0f, w), u), a.rows);
        for (int j = lane; j < Hi; j += 32) {
            const float dp = __fmul_rn(__fmul_rn(dV, w3[j]), dev_dsilu(__fadd_rn(prow[j], b2[j])));
            prow[j] = dp;
            acc[j] += (double)dp;
            acc[Hi + j] += (double)dV * (double)hrow[j];
        }
        if (lane == 0) {
            acc[2 * Hi] += (double)dV;
            acc[2 * Hi + 1] += (double)li;
            (net ? a.v_out[1] : a.v_out[0])[r] = V;
            if (net == 0)
                a.omega[r] = fminf(expf(__fmul_rn(a.awr_beta, __fadd_rn(q, -V))), a.awr_max);
        }
    }
    aux::flush_row_acc(acc_all, W, a.partial + ((size_t)net * gridDim.x + blockIdx.x) * W);
}

// k_iql_head for Hi ≤ 128, the lane's K columns (j = lane + 32k < Hi ≤ 32K) in registers: b2,
// w3, the column sums, and the next row's h2 and pre2 loaded while this row is computed
// (k_iql_head's per-row read-modify-write of its shared-memory sums was a dependent chain). The
// same float operations and the same order of every float64 sum as k_iql_head: the same bits.
template <int K>
__global__ void k_iql_head_reg(HeadArgs a) {
    pdl_enter();
    extern __shared__ double acc_all[];
    const int net = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5, Hi = a.Hi;
    const float *p = a.params + (size_t)net * a.total;
    const float b3 = p[a.off_b3];
    const float tau = net ? a.tau[1] : a.tau[0];
    const size_t base = (size_t)net * a.B * Hi;
    float w3[K], b2[K];
    aux::load_lane_cols(p + a.off_w3, Hi, w3);
    aux::load_lane_cols(p + a.off_b2, Hi, b2);
    double sb[K], sw[K], sdv = 0.0, sloss = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k) sb[k] = sw[k] = 0.0;
    const int r0 = blockIdx.x * a.rows_per_blk, r1 = min(a.B, r0 + a.rows_per_blk);
    // Row r's Q̄sa, h2 and pre2 (zeros past the block's rows).
    auto fetch = [&](int r, float &q, float (&h)[K], float (&pre)[K]) {
        const bool ok = r < r1;
        q = ok ? a.qsa[r] : 0.0f;
        aux::load_lane_cols(ok ? a.h2 + base + (size_t)r * Hi : nullptr, Hi, h);
        aux::load_lane_cols(ok ? a.pre2 + base + (size_t)r * Hi : nullptr, Hi, pre);
    };
    int r = r0 + warp;
    float q, hv[K], pv[K];
    fetch(r, q, hv, pv);
    for (; r < r1; r += nw) {
        float qn, hn[K], pn[K];
        fetch(r + nw, qn, hn, pn);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k)
            if (lane + 32 * k < Hi) s = fmaf(hv[k], w3[k], s);
        s = warp_sum(s);
        const float V = __fadd_rn(s, b3);
        const float u = __fadd_rn(q, -V);
        const float w = u < 0.0f ? __fadd_rn(1.0f, -tau) : tau;  // |τ − [ũ < 0]|
        const float li = __fmul_rn(__fmul_rn(w, u), u);
        const float dV = __fdiv_rn(__fmul_rn(__fmul_rn(-2.0f, w), u), a.rows);
        float *prow = a.pre2 + base + (size_t)r * Hi;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int j = lane + 32 * k;
            if (j >= Hi) continue;
            const float dp = __fmul_rn(__fmul_rn(dV, w3[k]), dev_dsilu(__fadd_rn(pv[k], b2[k])));
            prow[j] = dp;
            sb[k] += (double)dp;
            sw[k] += (double)dV * (double)hv[k];
        }
        sdv += (double)dV;
        sloss += (double)li;
        if (lane == 0) {
            (net ? a.v_out[1] : a.v_out[0])[r] = V;
            if (net == 0)
                a.omega[r] = fminf(expf(__fmul_rn(a.awr_beta, __fadd_rn(q, -V))), a.awr_max);
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
            hv[k] = hn[k];
            pv[k] = pn[k];
        }
        q = qn;
    }
    aux::flush_lane_cols(acc_all, Hi, sb, sw, sdv, sloss,
                         a.partial + ((size_t)net * gridDim.x + blockIdx.x) * (2 * Hi + 2));
}

}  // namespace

const void *head_kernel(int Hi) {
    const void *const regs[4] = {(const void *)k_iql_head_reg<1>, (const void *)k_iql_head_reg<2>,
                                 (const void *)k_iql_head_reg<3>, (const void *)k_iql_head_reg<4>};
    return aux::pick_lane_cols(Hi, regs, (const void *)k_iql_head);
}

}  // namespace fh::cuda::iql
