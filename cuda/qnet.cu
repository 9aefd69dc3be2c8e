// SPEC §4 on the GPU: the branching Q network (Tavakoli et al. 2018) as src/cpu/qnet.cpp: the
// two-layer SiLU trunk, per branch a SiLU hidden layer and a linear head clamped to ±q_clip,
// and the softplus confidence head on the trunk (one warp per row). The forward passes of
// ddqn.cu and act.cu run the same trunk and branch functions.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "linear_silu.hpp"
#include "memory_plan.hpp"
#include "mma_tf32.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

__global__ void k_bias_clamp(float *z, float *q, const float *e, int M, int N, float clip) {
    pdl_enter();
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
    pdl_enter();
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
// zeros elsewhere) and ecat [NB·A]; with `rounded`, Vcat rounded to TF32 (bfloat16 with `bf16`,
// FH_MATH_BF16) and the rounded copies W1t of W1 [H, D] and W2t of W2 [H, H] (the pass's
// effective trunk matrices), W2T of W2ᵀ and VcatT of Vcatᵀ: the fused SiLU layers' operands.
// One thread per packed element (the padding is not written).
__global__ void k_pack_branches(const float *__restrict__ p, size_t V0, size_t c0, size_t U0,
                                size_t e0, size_t stride, int NB, int H, int HB, int A,
                                const float *__restrict__ W1, const float *__restrict__ W2, int D,
                                bool rounded, bool bf16, PackedBranches pk,
                                float *__restrict__ pack) {
    pdl_enter();
    const auto rnd = [bf16](float v) {
        return bf16 ? mma::rounded<true>(v) : mma::rounded<false>(v);
    };
    const size_t nh = (size_t)NB * HB, na = (size_t)NB * A, n1 = (size_t)H * D;
    const size_t nV = nh * H, nU = na * nh, nb = nV + nh + nU + na;
    const size_t n2 = (size_t)H * H, n = nb + (rounded ? n1 + 2 * n2 + nV : 0);
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        if (k < nV) {
            const size_t r = k / H, col = k - r * H, b = r / HB;
            const float v = p[V0 + b * stride + (r - b * HB) * H + col];
            pack[pk.Vcat + k] = rounded ? rnd(v) : v;
        } else if (k >= nb) {
            const size_t e = k - nb;
            if (e < n1) {
                pack[pk.W1t + e] = rnd(W1[e]);
            } else if (e < n1 + n2) {
                pack[pk.W2t + (e - n1)] = rnd(W2[e - n1]);
            } else if (e < n1 + 2 * n2) {
                const size_t t = e - n1 - n2, r = t / H, col = t - r * H;
                pack[pk.W2T + t] = rnd(W2[col * H + r]);
            } else {  // VcatT [H, nh]: row r, column c = Vcat[c][r] = V_b[c − b·HB][r]
                const size_t t = e - n1 - 2 * n2, r = t / nh, c = t - r * nh, b = c / HB;
                pack[pk.VcatT + t] = rnd(p[V0 + b * stride + (c - b * HB) * H + r]);
            }
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
    pdl_enter();
    const size_t na = (size_t)NB * A, n = (size_t)M * na;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / na, ba = k - i * na, b = ba / A;
        const float v = __fadd_rn(zall[k], ecat[ba]);
        q[b * M * A + i * A + (ba - b * A)] = fminf(fmaxf(v, -clip), clip);
    }
}

}  // namespace

// The branches side by side: g = SiLU(h2 Vcatᵀ + ccat) [M, NB·HB] (one SiLU layer) and
// z = g Ubdᵀ [M, NB·A] (one GEMM with the block-diagonal heads; its zero blocks add exact
// zeros), then the heads' biases and the clamp into q. Five kernels instead of NB chains of
// four, one after another on the pass's lane: at B = 16384 the ddqn child went from 0.347 to
// 0.285 ms multi-stream and 0.366 to 0.283 single-stream (H200,
// bench/results/h200-2026-12-01-ddqn-packed-before-after.json).
QView q_pack(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w, float *pack) {
    const int H = (int)d.H, NB = (int)d.NB, HB = (int)d.HB, A = (int)d.A;
    const size_t nh = (size_t)NB * HB, na = (size_t)NB * A;
    const QOffsets &o = L.q;
    const bool rounded = l.blas.linear_tc;
    const size_t n =
        nh * H + nh + na * nh + na + (rounded ? (size_t)H * (d.D + 2 * H) + nh * H : 0);
    FH_LAUNCH(k_pack_branches, grid_for(n), kThreads, 0, l.stream, w.p, o.V[0], o.c[0], o.U[0],
              o.e[0], o.V[1] - o.V[0], NB, H, HB, A, w.W1, w.W2, (int)d.D, rounded,
              l.blas.linear_bf16, packed_branches(d), pack);
    QView v = w;
    v.pack = pack;
    v.rounded = rounded;
    return v;
}

void q_forward_branches_packed(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                               QCache &c, float q_clip) {
    const int M = c.M, H = (int)d.H, NB = (int)d.NB, HB = (int)d.HB, A = (int)d.A;
    const int nh = NB * HB, na = NB * A;
    const PackedBranches pk = packed_branches(d);
    const float *Vcat = w.pack + pk.Vcat, *ccat = w.pack + pk.ccat, *Ubd = w.pack + pk.Ubd,
                *ecat = w.pack + pk.ecat;
    // The heads in the SiLU layer's epilogue where its column tiles are the branches: g is then
    // never stored, and the heads GEMM and k_bias_clamp_packed do not run (ddqn child 0.239 →
    // 0.230 ms, wall 1.657 → 1.643 ms multi-stream at B = 16384, the mean of three side-by-side
    // runs, bench/results/h200-2026-12-02-linear-rounded-operands-before-after*.json; TF32
    // products since, linear_silu.cu). The forward child's branches take them in their
    // epilogue too (q_forward_branch).
    const bool tc = w.rounded && linear_tc_pays(M, nh);
    if (HB == kHeadsTile && tc) {
        const QOffsets &o = L.q;
        BranchHeads hd;
        hd.U = w.p + o.U[0];
        hd.e = w.p + o.e[0];
        hd.u_stride = hd.e_stride = o.V[1] - o.V[0];
        hd.z = hd.q = c.q;
        hd.A = A;
        hd.clip = q_clip;
        if (linear_silu_heads(l.blas, l.stream, M, nh, H, c.h2, c.h2_rounded, Vcat, ccat, nullptr,
                              nullptr, hd))
            return;
    }
    linear_silu(l.blas, l.stream, M, nh, H, c.h2, c.h2_rounded, Vcat, tc ? Vcat : nullptr, ccat,
                c.g, c.g, "branches h2 Vcat^T");
    float *zall = c.h1;  // dead after the trunk: [M, NB·A] fits since NB·A <= H
    gemm_nt(l.blas, M, na, nh, c.g, Ubd, zall, 0.0f, "branch heads g Ubd^T");
    FH_LAUNCH(k_bias_clamp_packed, grid_for((size_t)M * na), kThreads, 0, l.stream, zall, ecat, M,
              NB, A, q_clip, c.q);
}

// With w.rounded both layers read the pack's rounded copies (x rounded in the first layer's
// kernel); the second then reads h1 as the first wrote it.
void q_forward_trunk(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                     const float *x, QCache &c) {
    const int M = c.M, H = (int)d.H, D = (int)d.D;
    const PackedBranches pk = packed_branches(d);
    const bool tc = w.rounded && linear_tc_pays(M, H);
    c.h1_rounded =
        linear_silu(l.blas, l.stream, M, H, D, x, false, w.W1, tc ? w.pack + pk.W1t : nullptr,
                    w.p + L.q.b1, c.pre1, c.h1, "trunk x W1^T");
    c.h2_rounded = linear_silu(l.blas, l.stream, M, H, H, c.h1, c.h1_rounded, w.W2,
                               tc ? w.pack + pk.W2t : nullptr, w.p + L.q.b2, c.pre2, c.h2,
                               "trunk h1 W2^T");
}

// Branch b's rows of the packed Vcat are V_b (rounded with w.rounded), and of ccat c_b.
void q_forward_branch(const LaneCtx &l, const Dims &d, const Layout &L, const QView &w,
                      QCache &c, int b, float q_clip) {
    const int M = c.M, H = (int)d.H, HB = (int)d.HB, A = (int)d.A;
    float *preg = c.preg + (size_t)b * M * HB, *g = c.g + (size_t)b * M * HB;
    float *z = c.z + (size_t)b * M * A, *q = c.q + (size_t)b * M * A;
    const PackedBranches pk = packed_branches(d);
    const bool tc = w.rounded && linear_tc_pays(M, HB);
    const float *Vt = tc ? w.pack + pk.Vcat + (size_t)b * HB * H : nullptr;
    const float *cb = w.pack ? w.pack + pk.ccat + (size_t)b * HB : w.p + L.q.c[b];
    // The heads in the layer's epilogue as in ddqn's packed pass (HB = 128: the layer is one
    // column tile), here with g and preg stored for the backward and z apart from q. As float32
    // dot products they made this child 0.016 ms slower; as TF32 products 0.393 / 0.396 →
    // 0.386 / 0.381 ms multi-stream and 0.538 / 0.537 → 0.516 / 0.515 single-stream at
    // B = 16384 (bench/results/h200-2026-12-03-forward-heads-mma-before-after*.json).
    if (HB == kHeadsTile && tc) {
        BranchHeads hd;
        hd.U = w.p + L.q.U[b];
        hd.e = w.p + L.q.e[b];
        hd.z = z;
        hd.q = q;
        hd.A = A;
        hd.clip = q_clip;
        if (linear_silu_heads(l.blas, l.stream, M, HB, H, c.h2, c.h2_rounded, Vt, cb, preg, g,
                              hd)) {
            c.g_rounded |= uint64_t{1} << b;
            return;
        }
    }
    if (linear_silu(l.blas, l.stream, M, HB, H, c.h2, c.h2_rounded, w.p + L.q.V[b], Vt, cb, preg,
                    g, "branch h2 V^T"))
        c.g_rounded |= uint64_t{1} << b;
    else
        c.g_rounded &= ~(uint64_t{1} << b);
    gemm_nt(l.blas, M, A, HB, g, w.p + L.q.U[b], z, 0.0f, "branch g U^T");
    FH_LAUNCH(k_bias_clamp, grid_for((size_t)M * A), kThreads, 0, l.stream, z, q, w.p + L.q.e[b], M,
              A, q_clip);
}

// The forward child's passes read ddqn's online pack (its weights have not changed since).
static QView forward_view(const CudaStep &st, const LaneCtx &l) {
    QView w = st.online_view();
    if (st.pack_next) {
        w.pack = st.pack_next;
        w.rounded = l.blas.linear_tc;
    }
    return w;
}

void forward_trunk(CudaStep &st, const LaneCtx &l) {
    const QView w = forward_view(st, l);
    q_forward_trunk(l, st.d, st.L, w, st.x2, st.on);
    const int M = (int)st.d.B;
    const int grid = (M + kThreads / 32 - 1) / (kThreads / 32);
    FH_LAUNCH(k_conf_head, grid, kThreads, 0, l.stream, st.on.h2, w.p + st.L.q.w_u,
              w.p + st.L.q.b_u, M, (int)st.d.H, st.on.pre_u, st.on.u);
}

void forward_branch(CudaStep &st, const LaneCtx &l, int b) {
    q_forward_branch(l, st.d, st.L, forward_view(st, l), st.on, b, st.cfg.q_clip);
}

}  // namespace fh::cuda
