// The attention learner's output projection, reward head and the head's backward down to dpool,
// fused on tensor cores (attention_head.hpp has the math): TF32 mma.sync m16n8k8
// (mma_tf32.cuh) at attn_d_model = attn_head_hidden = 64. FH_MATH_BF16 runs the BF16 instance:
// every product operand (ā, Wo, pool, Wr1, dh) is rounded to bfloat16 instead of TF32, which a
// TF32 product then multiplies exactly with float32 sums, as the cuBLAS BF16 GEMMs it replaces
// did; pool, dh and dpool are stored rounded too, since their only other readers are BF16 GEMMs
// (attention.cu's weight-gradient GEMM and dā = dpool Wo, whose stages round them to the same
// values). The head's sums use the unrounded values. ā and pool are read, and dh and dpool
// written, as columns of wider matrices (ld_in, ld_out: attention.cu's layout).
//
// Tiling. 8 warps a block, tiles of 128 rows, warp w owning rows 16w .. 16w + 15 of a tile (one
// m16 tile; thread (g, t) rows g and g + 8). Wo and Wr1 sit in shared memory for the whole
// kernel, TF32-rounded once, XOR-swizzled (swz) so that the by-row reads of the two forward
// products and the by-column reads of dpool = dh Wr1 hit 32 different banks. The three products
// chain in registers: each result's accumulator fragments are the next product's A fragments in
// mma_tf32.cuh's permuted contraction order (pool → h, dh → dpool), so no activation goes
// through shared memory. A thread issues all of its tile's loads of ā and pool_in (64 floats)
// before the first product. The grid walks the tiles (at most one block per tile, two per SM;
// 148 registers leave room for one block of 8 warps on an SM). Why: at the default sizes these
// were four kernels (two cuBLAS GEMMs of K = 64, the warp-per-row head and the dpool GEMM),
// each a full pass over [B, 64] rows for a few microseconds of arithmetic.
//
// Deterministic: a row is one warp's; the column sums stay in each lane's registers across tiles
// (float, a lane's own rows), then go through a fixed butterfly over the warp's row groups in
// double, across warps in warp order and across blocks in reduce_partials' block order. No
// atomics.
#include <algorithm>

#include "attention_head.hpp"
#include "attention_head_math.cuh"
#include "foxhunt.h"
#include "aux_common.cuh"
#include "device_math.cuh"
#include "error.hpp"
#include "launch.cuh"
#include "mma_tf32.cuh"
#include "tile128.cuh"

namespace fh::cuda::attn {

namespace {

constexpr int kW = kHeadFusedWidth, kWarps = 8, kTileRows = kHeadFusedTileRows, kNT = kW / 8;
static_assert(kTileRows == 16 * kWarps, "a warp per 16 rows of a tile");
using head::kPartW;
static_assert(head::kW == kW, "the head's math at the kernel's width");
static_assert(kWarps * kPartW * 2 <= 2 * kW * kW, "the warps' partial rows fit over Wo and Wr1");

// A row's pair of outputs, as bfloat16 values with BF16 (see the top of the file).
using tile::st2_round;

__device__ __forceinline__ float2 ld2g(const float *p) {
    return __ldg(reinterpret_cast<const float2 *>(p));
}
__device__ __forceinline__ float2 ld2(const float *p) {
    return *reinterpret_cast<const float2 *>(p);
}

template <bool BF16>
__global__ void __launch_bounds__(kWarps * 32, 1) k_attn_head_tc(HeadFusedArgs a) {
    pdl_enter();
    __shared__ __align__(16) float Ws[2 * kW * kW];  // Wo | Wr1
    __shared__ float br1s[kW], wr2s[kW];
    float *Wos = Ws, *Wr1s = Ws + kW * kW;
    head::stage_w<BF16>(Wos, a.Wo);
    head::stage_w<BF16>(Wr1s, a.Wr1);
    for (int e = threadIdx.x; e < kW; e += blockDim.x) {
        br1s[e] = __ldg(a.br1 + e);
        wr2s[e] = __ldg(a.wr2 + e);
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const float br2 = __ldg(a.br2);
    const size_t B = (size_t)a.B, ntiles = (B + kTileRows - 1) / kTileRows;
    float acc_b[kNT][2] = {}, acc_w[kNT][2] = {};  // dbr1, dw_r2 at columns 8ν + 2t (+1)
    double acc_dr = 0.0, acc_loss = 0.0;
    for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const size_t r0 = tile * kTileRows + (size_t)warp * 16 + gi, r1 = r0 + 8;
        const bool v0 = r0 < B, v1 = r1 < B;
        // Rows past the batch compute on the last row's ā and a zero pool_in, and are masked.
        // pool is read with plain loads: the kernel writes it (each element after its one read,
        // by the same thread).
        const size_t li = (size_t)a.ld_in, lo = (size_t)a.ld_out;
        const float *ab0 = a.abar + (v0 ? r0 : B - 1) * li, *ab1 = a.abar + (v1 ? r1 : B - 1) * li;
        const float *pi0 = v0 ? a.pool + r0 * li : nullptr, *pi1 = v1 ? a.pool + r1 * li : nullptr;
        const float2 zero2 = make_float2(0.0f, 0.0f);
        float2 x0[kNT], x1[kNT];
        float P[kNT][4];
#pragma unroll
        for (int k = 0; k < kNT; ++k) {
            x0[k] = ld2g(ab0 + 8 * k + 2 * tq);
            x1[k] = ld2g(ab1 + 8 * k + 2 * tq);
            const float2 p0 = pi0 ? ld2(pi0 + 8 * k + 2 * tq) : zero2;
            const float2 p1 = pi1 ? ld2(pi1 + 8 * k + 2 * tq) : zero2;
            P[k][0] = p0.x;
            P[k][1] = p0.y;
            P[k][2] = p1.x;
            P[k][3] = p1.y;
        }
        // pool = pool_in + ā Woᵀ (ā's columns 8κ + 2t, + 1 are contraction indices t, t + 4).
#pragma unroll
        for (int ka = 0; ka < kNT; ++ka) {
            const mma::Op A[4] = {
                mma::op_rounded<BF16>(x0[ka].x), mma::op_rounded<BF16>(x1[ka].x),
                mma::op_rounded<BF16>(x0[ka].y), mma::op_rounded<BF16>(x1[ka].y)};
            mma::mma_rows<kW>(P, A, Wos, ka);
        }
#pragma unroll
        for (int nu = 0; nu < kNT; ++nu) {
            if (v0) st2_round<BF16>(a.pool + r0 * li + 8 * nu + 2 * tq, P[nu][0], P[nu][1]);
            if (v1) st2_round<BF16>(a.pool + r1 * li + 8 * nu + 2 * tq, P[nu][2], P[nu][3]);
        }
        // h = pool Wr1ᵀ.
        float H[kNT][4] = {};
#pragma unroll
        for (int ka = 0; ka < kNT; ++ka) {
            mma::Op A[4];
            mma::a_from_acc_rounded<BF16>(A, P[ka]);
            mma::mma_rows<kW>(H, A, Wr1s, ka);
        }
        // The head: r̂ of the thread's two rows, then dr and dh in place of h.
        head::reward_rows<BF16>(H, br1s, wr2s, br2, a.r, r0, r1, v0, v1, a.rows, a.dh, lo, tq,
                                acc_b, acc_w, acc_dr, acc_loss);
        // dpool = dh Wr1.
        float D[kNT][4] = {};
#pragma unroll
        for (int ka = 0; ka < kNT; ++ka) {
            mma::Op A[4];
            mma::a_from_acc_rounded<BF16>(A, H[ka]);
            head::mma_cols(D, A, Wr1s, ka, gi, tq);
        }
#pragma unroll
        for (int nu = 0; nu < kNT; ++nu) {
            if (v0) st2_round<BF16>(a.dpool + r0 * lo + 8 * nu + 2 * tq, D[nu][0], D[nu][1]);
            if (v1) st2_round<BF16>(a.dpool + r1 * lo + 8 * nu + 2 * tq, D[nu][2], D[nu][3]);
        }
    }
    // The block's partial row: each warp's sums (lanes g = 0 hold them after group_sum) in shared
    // memory over the weights, then summed in warp order.
    double sb[kNT][2], sw[kNT][2];
#pragma unroll
    for (int nu = 0; nu < kNT; ++nu)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            sb[nu][e] = head::group_sum(acc_b[nu][e]);
            sw[nu][e] = head::group_sum(acc_w[nu][e]);
        }
    acc_dr = warp_sum(acc_dr);
    acc_loss = warp_sum(acc_loss);
    __syncthreads();
    double *red = reinterpret_cast<double *>(Ws);
    double *mine = red + (size_t)warp * kPartW;
    if (gi == 0)
#pragma unroll
        for (int nu = 0; nu < kNT; ++nu)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                mine[8 * nu + 2 * tq + e] = sb[nu][e];
                mine[kW + 8 * nu + 2 * tq + e] = sw[nu][e];
            }
    if (lane == 0) {
        mine[2 * kW] = acc_dr;
        mine[2 * kW + 1] = acc_loss;
    }
    aux::flush_row_acc(red, kPartW, a.partial + (size_t)blockIdx.x * kPartW);
}

}  // namespace

bool head_fused_fits(int math_mode, int d_model, int head_hidden) {
    return math_mode != FH_MATH_STRICT && d_model == kW && head_hidden == kW;
}

int head_fused_blocks(int B) {
    const int tiles = (B + kTileRows - 1) / kTileRows;
    return std::max(1, std::min(tiles, 2 * sm_count()));
}

void head_fused(const HeadFusedArgs &a, int blocks, cudaStream_t s) {
    // Rows are read and written as float pairs.
    if (a.ld_in < kW || a.ld_out < kW || a.ld_in % 2 || a.ld_out % 2)
        fail(FH_ERR_INTERNAL, "attention head: row strides %d and %d must be even and at least %d",
             a.ld_in, a.ld_out, kW);
    if (a.bf16)
        FH_LAUNCH(k_attn_head_tc<true>, blocks, kWarps * 32, 0, s, a);
    else
        FH_LAUNCH(k_attn_head_tc<false>, blocks, kWarps * 32, 0, s, a);
}

}  // namespace fh::cuda::attn
