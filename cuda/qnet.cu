// SPEC §4 on the GPU: the branching Q network (Tavakoli et al. 2018) as src/cpu/qnet.cpp: the
// two-layer SiLU trunk, per branch a SiLU hidden layer and a linear head clamped to ±q_clip,
// and the softplus confidence head on the trunk (one warp per row). The forward passes of
// ddqn.cu and act.cu run the same trunk and branch functions.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "memory_plan.hpp"
#include "nn.cuh"

namespace fh::cuda {

namespace {

__global__ void k_bias_clamp(float *z, float *q, const float *e, int M, int N, float clip) {
    const size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = __fadd_rn(z[i], e[i % N]);
        z[i] = v;
        q[i] = fminf(fmaxf(v, -clip), clip);
    }
}

// One warp per row.
__global__ void k_conf_head(const float *h2, const float *w_u, const float *b_u, int M, int H,
                            float *pre_u, float *u) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= M) return;
    float acc = 0;
    for (int j = lane; j < H; j += 32) acc += h2[(size_t)row * H + j] * w_u[j];
    acc = warp_sum(acc);
    if (lane == 0) {
        const float p = __fadd_rn(acc, *b_u);
        pre_u[row] = p;
        u[row] = dev_softplus(p);
    }
}

// The packed branch weights of q_forward_branches_packed (memory_plan.hpp, packed_branches)
// from the flat buffer p, whose branch blocks lie `stride` floats apart: Vcat [NB·HB, H] (V_b's
// rows), ccat [NB·HB], the block-diagonal Ubd [NB·A, NB·HB] (U_b at rows b·A, columns b·HB;
// zeros elsewhere) and ecat [NB·A]. One thread per packed element (the padding is not written).
__global__ void k_pack_branches(const float *__restrict__ p, size_t V0, size_t c0, size_t U0,
                                size_t e0, size_t stride, int NB, int H, int HB, int A,
                                PackedBranches pk, float *__restrict__ pack) {
    const size_t nh = (size_t)NB * HB, na = (size_t)NB * A;
    const size_t nV = nh * H, nU = na * nh, n = nV + nh + nU + na;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        if (k < nV) {
            const size_t r = k / H, col = k - r * H, b = r / HB;
            pack[pk.Vcat + k] = p[V0 + b * stride + (r - b * HB) * H + col];
        } else if (k < nV + nh) {
            const size_t r = k - nV, b = r / HB;
            pack[pk.ccat + r] = p[c0 + b * stride + (r - b * HB)];
        } else if (k < nV + nh + nU) {
            const size_t e = k - nV - nh, row = e / nh, col = e - row * nh;
            const size_t b = row / A, bc = col / HB;
            pack[pk.Ubd + e] =
                b == bc ? p[U0 + b * stride + (row - b * A) * HB + (col - bc * HB)] : 0.0f;
        } else {
            const size_t r = k - nV - nh - nU, b = r / A;
            pack[pk.ecat + r] = p[e0 + b * stride + (r - b * A)];
        }
    }
}

// q[b][i][a] = clamp(zall[i][b·A + a] + ecat[b·A + a], ±clip): the packed heads' [M, NB·A]
// product into the cache's per-branch layout.
__global__ void k_bias_clamp_packed(const float *__restrict__ zall, const float *__restrict__ ecat,
                                    int M, int NB, int A, float clip, float *__restrict__ q) {
    const size_t na = (size_t)NB * A, n = (size_t)M * na;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / na, ba = k - i * na, b = ba / A;
        const float v = __fadd_rn(zall[k], ecat[ba]);
        q[b * M * A + i * A + (ba - b * A)] = fminf(fmaxf(v, -clip), clip);
    }
}

}  // namespace

// The branches side by side: g = SiLU(h2 Vcatᵀ + ccat) [M, NB·HB] (one GEMM, one bias_silu) and
// z = g Ubdᵀ [M, NB·A] (one GEMM with the block-diagonal heads; its zero blocks add exact
// zeros), then the heads' biases and the clamp into q. Five kernels instead of NB chains of
// four, one after another on the pass's lane: at B = 16384 the ddqn child went from 0.347 to
// 0.285 ms multi-stream and 0.366 to 0.283 single-stream (H200,
// bench/results/h200-2026-12-01-ddqn-packed-before-after.json).
void q_forward_branches_packed(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                               QCache &c, float *pack, float q_clip) {
    const int M = c.M, H = (int)d.H, NB = (int)d.NB, HB = (int)d.HB, A = (int)d.A;
    const int nh = NB * HB, na = NB * A;
    const QOffsets &o = L.q;
    const PackedBranches pk = packed_branches(d);
    const float *Vcat = pack + pk.Vcat, *ccat = pack + pk.ccat, *Ubd = pack + pk.Ubd,
                *ecat = pack + pk.ecat;
    const size_t npack = (size_t)nh * H + nh + (size_t)na * nh + na;
    k_pack_branches<<<grid_for(npack), kThreads, 0, l.stream>>>(
        w.p, o.V[0], o.c[0], o.U[0], o.e[0], o.V[1] - o.V[0], NB, H, HB, A, pk, pack);
    FH_LAUNCHED("k_pack_branches");
    gemm_nt(l.blas, M, nh, H, c.h2, Vcat, c.g, 0.0f, "branches h2 Vcat^T");
    bias_silu(c.g, c.g, ccat, M, nh, l.stream);
    float *zall = c.h1;  // dead after the trunk: [M, NB·A] fits since NB·A <= H
    gemm_nt(l.blas, M, na, nh, c.g, Ubd, zall, 0.0f, "branch heads g Ubd^T");
    k_bias_clamp_packed<<<grid_for((size_t)M * na), kThreads, 0, l.stream>>>(zall, ecat, M, NB, A,
                                                                            q_clip, c.q);
    FH_LAUNCHED("k_bias_clamp_packed");
}

void q_forward_trunk(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                     const float *x, QCache &c) {
    const int M = c.M, H = (int)d.H, D = (int)d.D;
    gemm_nt(l.blas, M, H, D, x, w.W1, c.pre1, 0.0f, "trunk x W1^T");
    bias_silu(c.pre1, c.h1, w.p + L.q.b1, M, H, l.stream);
    gemm_nt(l.blas, M, H, H, c.h1, w.W2, c.pre2, 0.0f, "trunk h1 W2^T");
    bias_silu(c.pre2, c.h2, w.p + L.q.b2, M, H, l.stream);
}

void q_forward_branch(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                      QCache &c, int b, float q_clip) {
    const int M = c.M, H = (int)d.H, HB = (int)d.HB, A = (int)d.A;
    float *preg = c.preg + (size_t)b * M * HB, *g = c.g + (size_t)b * M * HB;
    float *z = c.z + (size_t)b * M * A, *q = c.q + (size_t)b * M * A;
    gemm_nt(l.blas, M, HB, H, c.h2, w.p + L.q.V[b], preg, 0.0f, "branch h2 V^T");
    bias_silu(preg, g, w.p + L.q.c[b], M, HB, l.stream);
    gemm_nt(l.blas, M, A, HB, g, w.p + L.q.U[b], z, 0.0f, "branch g U^T");
    k_bias_clamp<<<grid_for((size_t)M * A), kThreads, 0, l.stream>>>(z, q, w.p + L.q.e[b], M, A,
                                                                    q_clip);
    FH_LAUNCHED("k_bias_clamp");
}

void forward_trunk(CudaStep &st, const LaneCtx &l) {
    const QView w = st.online_view();
    q_forward_trunk(l, st.d, st.L, w, st.x2, st.on);
    const int M = (int)st.d.B;
    const int grid = (M + kThreads / 32 - 1) / (kThreads / 32);
    k_conf_head<<<grid, kThreads, 0, l.stream>>>(st.on.h2, w.p + st.L.q.w_u, w.p + st.L.q.b_u, M,
                                                 (int)st.d.H, st.on.pre_u, st.on.u);
    FH_LAUNCHED("k_conf_head");
}

void forward_branch(CudaStep &st, const LaneCtx &l, int b) {
    q_forward_branch(l, st.d, st.L, st.online_view(), st.on, b, st.cfg.q_clip);
}

}  // namespace fh::cuda
