// SPEC §4 on the GPU: the branching Q network (Tavakoli et al. 2018) as src/cpu/qnet.cpp: the
// two-layer SiLU trunk, per branch a SiLU hidden layer and a linear head clamped to ±q_clip,
// and the softplus confidence head on the trunk (one warp per row). The forward passes of
// ddqn.cu and act.cu run the same trunk and branch functions.
#include <cstdlib>
#include <cstring>

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

// The heads of SPEC §4 after the branch hidden layers, in one pass over their pre-activations:
// z_b = SiLU(pre_b + c_b) U_bᵀ + e_b, q_b = clamp(z_b, ±clip), and optionally g_b = SiLU(pre_b +
// c_b) (the backward's activation). Element (row, b, j) of pre and g lies at b·bs + row·ld + j,
// so one kernel reads the packed [M, NB·HB] product of ddqn's passes (bs = HB, ld = NB·HB) and
// one branch's [M, HB] (NB = 1). Branch b's c, U [A, HB] and e lie b·ws floats after the first
// branch's in the flat parameter buffer.
struct BranchHeads {
    const float *pre;
    float *g;  // may be null, or pre itself (a forward-only pass)
    size_t bs, ld;
    const float *c, *U, *e;
    size_t ws;
    float *z;  // [NB][M, A]; may be null
    float *q;  // [NB][M, A]
    int M, NB, HB, A;
    float clip;
};

// Why one kernel: the heads are NB·A outputs per row (32 at the default config), a product too
// thin for a GEMM: cuBLAS's TF32 GEMM of the block-diagonal heads read the [M, NB·HB]
// activations once more after bias + SiLU had read and written them, three passes over 64 MiB
// at M = 2B = 32768 where this kernel makes one.
// Tiling: a warp owns R = 32/AC rows of one branch and AC of its actions at a time (AC = 8, 16
// or 32; A > AC loops over chunks of actions, recomputing SiLU from pre). Lane l reads columns
// j ≡ l (mod 32) of the R rows, coalesced, 128 columns per pass with all of the pass's loads
// issued before any is used, and keeps R·AC = 32 partial dot products; U_b's rows
// are read through L1 (A·HB floats shared by every warp). The 32 partials are summed across
// the warp by recursive halving (31 shuffles; lane l ends with product l = r·AC + a), in a
// fixed order, so results are the same bits on every run.
// One level of the recursive halving: lanes with bit O set keep the upper O of v[0, 2·O) and
// send the lower, the others the reverse; each adds its partner's half to its own.
template <int O>
__device__ __forceinline__ void halve(float (&v)[32], int lane) {
    const bool up = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < O; ++i) {
        const float send = up ? v[i] : v[i + O];
        const float keep = up ? v[i + O] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

template <int AC>
__global__ void __launch_bounds__(kThreads, 2) k_branch_heads(BranchHeads k) {
    constexpr int R = 32 / AC, T = 4;  // T columns per lane per pass: 128 columns
    const int lane = threadIdx.x & 31;
    const size_t groups = ((size_t)k.M + R - 1) / R;
    const size_t units = groups * k.NB;
    const size_t nwarps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t u = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5; u < units; u += nwarps) {
        const int b = (int)(u % k.NB);
        const int row0 = (int)(u / k.NB) * R;
        const float *pre = k.pre + b * k.bs, *cb = k.c + b * k.ws, *Ub = k.U + b * k.ws;
        float *g = k.g ? k.g + b * k.bs : nullptr;
        for (int a0 = 0; a0 < k.A; a0 += AC) {
            const bool last = a0 + AC >= k.A;
            float v[32];
#pragma unroll
            for (int i = 0; i < 32; ++i) v[i] = 0.0f;
            for (int jc = 0; jc < k.HB; jc += 32 * T) {
                // Every load of the pass first, so that they are in flight together (g may
                // alias pre: it is stored only after them, at this pass's own columns).
                float x[T][R], cj[T];
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    const int j = jc + t * 32 + lane;
                    cj[t] = j < k.HB ? cb[j] : 0.0f;
#pragma unroll
                    for (int r = 0; r < R; ++r)
                        x[t][r] = j < k.HB && row0 + r < k.M ? pre[(size_t)(row0 + r) * k.ld + j]
                                                             : 0.0f;
                }
#pragma unroll
                for (int t = 0; t < T; ++t)
#pragma unroll
                    for (int r = 0; r < R; ++r) x[t][r] = dev_silu(__fadd_rn(x[t][r], cj[t]));
                if (g && last)
#pragma unroll
                    for (int t = 0; t < T; ++t) {
                        const int j = jc + t * 32 + lane;
#pragma unroll
                        for (int r = 0; r < R; ++r)
                            if (j < k.HB && row0 + r < k.M)
                                g[(size_t)(row0 + r) * k.ld + j] = x[t][r];
                    }
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    const int j = jc + t * 32 + lane;
                    if (j >= k.HB) break;
#pragma unroll
                    for (int a = 0; a < AC; ++a) {
                        const float w = a0 + a < k.A ? Ub[(size_t)(a0 + a) * k.HB + j] : 0.0f;
#pragma unroll
                        for (int r = 0; r < R; ++r) v[r * AC + a] = fmaf(x[t][r], w, v[r * AC + a]);
                    }
                }
            }
            halve<16>(v, lane);
            halve<8>(v, lane);
            halve<4>(v, lane);
            halve<2>(v, lane);
            halve<1>(v, lane);
            const int r = lane / AC, a = a0 + lane % AC;
            if (row0 + r < k.M && a < k.A) {
                const float zz = __fadd_rn(v[0], k.e[b * k.ws + a]);
                const size_t at = ((size_t)b * k.M + row0 + r) * k.A + a;
                if (k.z) k.z[at] = zz;
                k.q[at] = fminf(fmaxf(zz, -k.clip), k.clip);
            }
        }
    }
}

void branch_heads(const BranchHeads &k, cudaStream_t s) {
    const int ac = k.A <= 8 ? 8 : k.A <= 16 ? 16 : 32;
    const size_t units = ((size_t)k.M + 32 / ac - 1) / (32 / ac) * k.NB;
    const int grid = grid_for(units * 32, kThreads, 1 << 16);
    if (ac == 8)
        k_branch_heads<8><<<grid, kThreads, 0, s>>>(k);
    else if (ac == 16)
        k_branch_heads<16><<<grid, kThreads, 0, s>>>(k);
    else
        k_branch_heads<32><<<grid, kThreads, 0, s>>>(k);
    FH_LAUNCHED("k_branch_heads");
}

// Trial switch: FOXHUNT_BRANCH_HEADS=gemm keeps the heads as bias + SiLU, a GEMM and bias +
// clamp (the path before k_branch_heads), for the side-by-side run.
bool heads_fused() {
    const char *e = getenv("FOXHUNT_BRANCH_HEADS");
    return !(e && strcmp(e, "gemm") == 0);
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
    if (heads_fused()) {
        branch_heads(BranchHeads{c.g, nullptr, (size_t)HB, (size_t)nh, w.p + o.c[0], w.p + o.U[0],
                                 w.p + o.e[0], o.V[1] - o.V[0], nullptr, c.q, M, NB, HB, A,
                                 q_clip},
                     l.stream);
        return;
    }
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
    if (heads_fused()) {
        branch_heads(BranchHeads{preg, g, 0, (size_t)HB, w.p + L.q.c[b], w.p + L.q.U[b],
                                 w.p + L.q.e[b], 0, z == q ? nullptr : z, q, M, 1, HB, A, q_clip},
                     l.stream);
        return;
    }
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
