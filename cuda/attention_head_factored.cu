// The attention head factored (TF32 and BF16 at d = hh = 64, td + G + 1 ≤ 32; attention.cu runs
// it wherever it fits, attention_head.cu's kernel and its GEMMs where aug is wider):
// attention_head.cu's output projection and reward head, with neither pool nor dpool formed.
// Side by side on an H100 (docs/cuda.md, Findings, "The attention head factored"): TF32 wall
// 1.379 → 1.364 ms multi-stream, BF16 1.307 → 1.285, single-stream 1.612 → 1.620 (means of two
// runs each; bench/results/h100-2026-12-07-head-factored-before-after.json).
//
// The math (attention.cu's header, step 2: pool = ē + bo + ā Woᵀ, and ē + bo = M aug with
// M [d, na] = [Wt / T | Wg / T | ebar / T + bo]):
//   h = Wr1 pool = C1 ā + C2 aug        C1 = Wr1 Wo [hh, d], C2 = Wr1 M [hh, na]
//   dā = Woᵀ dpool = (Wr1 Wo)ᵀ dh = C1ᵀ dh, i.e. dā (a row) = dh C1
// C1 and C2 are formed once per step in float64 (k_head_fac_comp). The weight gradients need
// only G = dhᵀ [ā | aug] over the batch (one GEMM, [hh, d + na], in place of
// [dh | dpool]ᵀ [pool | ā | aug], [hh + d, 2d + na]):
//   dWr1 = dhᵀ pool = G_aug Mᵀ + G_ā Woᵀ,  dWo = dpoolᵀ ā = Wr1ᵀ G_ā,  R = dpoolᵀ aug = Wr1ᵀ G_aug
// (k_head_fac_grads, float64), written where k_attn_fin reads them. The dā GEMM is gone: the
// kernel writes dā.
//
// Tiling: attention_head.cu's (8 warps, 128-row tiles, warp w rows 16w .. 16w + 15, one m16
// tile). C1 sits in shared memory, rounded once and swizzled as Wo and Wr1 were there: h = ā C1ᵀ
// reads it by rows, dā = dh C1 by columns, and dh's accumulator fragments are dā's A fragments.
// C2 aug is a float32 sum on the CUDA cores (na = td + G + 1 = 9 terms at the default config)
// into h's accumulators before the product: each warp stages its 16 rows of aug in shared
// memory (rows 33 floats apart, so the 8 row groups' reads fall in different banks).
//
// Deterministic: the same fixed-order sums as attention_head.cu; no atomics.
#include "attention_head.hpp"
#include "attention_head_math.cuh"
#include "attention_paths.hpp"
#include "aux_common.cuh"
#include "device_math.cuh"
#include "error.hpp"
#include "launch.cuh"
#include "mma_tf32.cuh"
#include "tile128.cuh"

namespace fh::cuda::attn {

namespace {

constexpr int kW = kHeadFusedWidth, kWarps = 8, kTileRows = kHeadFusedTileRows, kNT = kW / 8;
constexpr int kNaMax = kHeadFactoredMaxNa, kAugLd = kNaMax + 1, kAugPerLane = 16 * kNaMax / 32;
constexpr int kF64Threads = 256;  // the float64 kernels' blocks, a thread an output
using head::kPartW;
static_assert(head::kW == kW, "the head's math at the kernel's width");
static_assert(kWarps * kPartW * 2 <= kW * kW, "the warps' partial rows fit over C1");

__device__ __forceinline__ float2 ld2g(const float *p) {
    return __ldg(reinterpret_cast<const float2 *>(p));
}

template <bool BF16>
__global__ void __launch_bounds__(kWarps * 32, 1) k_attn_head_fac(HeadFactoredArgs a) {
    pdl_enter();
    __shared__ __align__(16) float C1s[kW * kW];
    __shared__ __align__(8) float C2s[kNaMax * kW];  // [f][m], float32
    __shared__ float augs[kWarps * 16 * kAugLd];
    __shared__ float br1s[kW], wr2s[kW];
    const int na = a.na;
    head::stage_w<BF16>(C1s, a.C1);
    for (int e = threadIdx.x; e < na * kW; e += blockDim.x)
        C2s[(e % na) * kW + e / na] = __ldg(a.C2 + e);
    for (int e = threadIdx.x; e < kW; e += blockDim.x) {
        br1s[e] = __ldg(a.br1 + e);
        wr2s[e] = __ldg(a.wr2 + e);
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    float *my_aug = augs + warp * 16 * kAugLd;
    const float br2 = __ldg(a.br2);
    const size_t B = (size_t)a.B, ntiles = (B + kTileRows - 1) / kTileRows;
    const size_t li = (size_t)a.ld_in;
    float acc_b[kNT][2] = {}, acc_w[kNT][2] = {};
    double acc_dr = 0.0, acc_loss = 0.0;
    for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const size_t w0 = tile * kTileRows + (size_t)warp * 16;
        const size_t r0 = w0 + gi, r1 = r0 + 8;
        const bool v0 = r0 < B, v1 = r1 < B;
        // Rows past the batch compute on the last row's ā and aug, and are masked.
        const float *ab0 = a.abar + (v0 ? r0 : B - 1) * li, *ab1 = a.abar + (v1 ? r1 : B - 1) * li;
        float2 x0[kNT], x1[kNT];
#pragma unroll
        for (int k = 0; k < kNT; ++k) {
            x0[k] = ld2g(ab0 + 8 * k + 2 * tq);
            x1[k] = ld2g(ab1 + 8 * k + 2 * tq);
        }
        // The warp's 16 rows of aug: every load issued before the first store (a loop of
        // load-then-store would wait out each load's latency in turn).
        float av[kAugPerLane];
#pragma unroll
        for (int q = 0; q < kAugPerLane; ++q) {
            const int e = lane + 32 * q, rr = e / na;
            const size_t row = w0 + rr < B ? w0 + rr : B - 1;
            av[q] = e < 16 * na ? __ldg(a.aug + row * li + (e - rr * na)) : 0.0f;
        }
        __syncwarp();  // the last tile's reads of my_aug are done
#pragma unroll
        for (int q = 0; q < kAugPerLane; ++q) {
            const int e = lane + 32 * q, rr = e / na;
            if (e < 16 * na) my_aug[rr * kAugLd + (e - rr * na)] = av[q];
        }
        __syncwarp();
        // h = C2 aug (float32, f in order) + ā C1ᵀ.
        float H[kNT][4] = {};
        for (int f = 0; f < na; ++f) {
            const float g0 = my_aug[gi * kAugLd + f], g1 = my_aug[(gi + 8) * kAugLd + f];
#pragma unroll
            for (int nu = 0; nu < kNT; ++nu) {
                const float2 c = *reinterpret_cast<const float2 *>(C2s + f * kW + 8 * nu + 2 * tq);
                H[nu][0] = fmaf(c.x, g0, H[nu][0]);
                H[nu][1] = fmaf(c.y, g0, H[nu][1]);
                H[nu][2] = fmaf(c.x, g1, H[nu][2]);
                H[nu][3] = fmaf(c.y, g1, H[nu][3]);
            }
        }
#pragma unroll
        for (int ka = 0; ka < kNT; ++ka) {
            const mma::Op A[4] = {
                mma::op_rounded<BF16>(x0[ka].x), mma::op_rounded<BF16>(x1[ka].x),
                mma::op_rounded<BF16>(x0[ka].y), mma::op_rounded<BF16>(x1[ka].y)};
            mma::mma_rows<kW>(H, A, C1s, ka);
        }
        // The head: r̂ of the thread's two rows, then dr and dh in place of h (dh rows 64 apart).
        head::reward_rows<BF16>(H, br1s, wr2s, br2, a.r, r0, r1, v0, v1, a.rows, a.dh, kW, tq,
                                acc_b, acc_w, acc_dr, acc_loss);
        // dā = dh C1 (C1 read by columns).
        float D[kNT][4] = {};
#pragma unroll
        for (int ka = 0; ka < kNT; ++ka) {
            mma::Op A[4];
            mma::a_from_acc_rounded<BF16>(A, H[ka]);
            head::mma_cols(D, A, C1s, ka, gi, tq);
        }
#pragma unroll
        for (int nu = 0; nu < kNT; ++nu) {
            if (v0) tile::st2(a.dabar + r0 * kW + 8 * nu + 2 * tq, D[nu][0], D[nu][1]);
            if (v1) tile::st2(a.dabar + r1 * kW + 8 * nu + 2 * tq, D[nu][2], D[nu][3]);
        }
    }
    // The block's partial row as attention_head.cu's kernel forms it (the same lines: as a shared
    // function they changed that kernel's machine code).
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
    double *red = reinterpret_cast<double *>(C1s);
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

// M [d, na] of the header (float64), staged in shared memory at M[x sx + f sf]: once a block
// (≤ 2,048 terms, a few divisions a thread) rather than once a term of every sum. The first form
// formed each term inside the sums: one float64 division a term, three branches apart in one
// warp, 30.6 µs for k_head_fac_comp on an H100 (docs/cuda.md, Findings).
__device__ void stage_M(const Geom &g, const float *Wt, const float *Wg, const float *bo,
                        const float *comp, double *M, int sx, int sf) {
    const double T = (double)g.T;
    for (int e = threadIdx.x; e < kW * g.na; e += blockDim.x) {
        const int x = e / g.na, f = e % g.na;
        M[x * sx + f * sf] = f < g.td          ? (double)Wt[x * g.td + f] / T
                             : f < g.td + g.G ? (double)Wg[x * g.G + f - g.td] / T
                                              : (double)comp[g.c_eb + x] / T + (double)bo[x];
    }
}

// C1 = Wr1 Wo [hh, d] and C2 = Wr1 M [hh, na] (float64 sums), a thread an output; the blocks
// past C1 stage M by rows (a warp's lanes read consecutive f of one row x).
__global__ void k_head_fac_comp(Geom g, const float *__restrict__ Wo,
                                const float *__restrict__ Wr1, const float *__restrict__ Wt,
                                const float *__restrict__ Wg, const float *__restrict__ bo,
                                const float *__restrict__ comp, float *__restrict__ C1,
                                float *__restrict__ C2) {
    pdl_enter();
    __shared__ double Ms[kW * kNaMax];
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const bool stages = (blockIdx.x + 1) * blockDim.x > kW * kW;  // uniform in the block
    if (stages) {
        stage_M(g, Wt, Wg, bo, comp, Ms, g.na, 1);
        __syncthreads();
    }
    if (o < kW * kW) {
        const int m = o / kW, j = o % kW;
        double s = 0.0;
#pragma unroll 16
        for (int x = 0; x < kW; ++x) s += (double)Wr1[m * kW + x] * (double)Wo[x * kW + j];
        C1[o] = (float)s;
    } else if (o < kW * kW + kW * g.na) {
        const int m = (o - kW * kW) / g.na, f = (o - kW * kW) % g.na;
        double s = 0.0;
#pragma unroll 16
        for (int x = 0; x < kW; ++x) s += (double)Wr1[m * kW + x] * Ms[x * g.na + f];
        C2[m * g.na + f] = (float)s;
    }
}

// dWr1 [hh, d], dWo [d, d] and R [d, na] from G = dhᵀ [ā | aug] (float64 sums), into the blocks
// of attention.cu's weight-gradient product where k_attn_fin reads them (rows ldP apart: dWr1 at
// (0, 0), dWo at (hh, d), R at (hh, 2d)), a thread an output. A warp's dWr1 lanes share m and
// take consecutive x, so the blocks of dWr1 (the first 16: 256 outputs, four rows m, each) stage
// M by columns and Wo transposed (rows kW + 1 apart: the transposing stores fall in different
// banks too); the loads of global Wo a lane a row would each touch their own cache line.
// Staging G and Wr1 in shared memory before the sums (the trial FOXHUNT_TRIAL_FAC_GRADS=1,
// 2026-12-07) changed nothing measurable (docs/cuda.md, Findings).
__global__ void __launch_bounds__(kF64Threads)
    k_head_fac_grads(Geom g, const float *__restrict__ G, int ldG, const float *__restrict__ Wo,
                     const float *__restrict__ Wr1, const float *__restrict__ Wt,
                     const float *__restrict__ Wg, const float *__restrict__ bo,
                     const float *__restrict__ comp, float *__restrict__ prod, int ldP) {
    pdl_enter();
    static_assert(kW * kW % kF64Threads == 0, "dWr1's blocks are whole");
    __shared__ double MsT[kNaMax * kW];
    __shared__ float WoT[kW * (kW + 1)];
    const int o = blockIdx.x * blockDim.x + threadIdx.x, gw = kW + g.na;
    if (blockIdx.x * blockDim.x < kW * kW) {  // dWr1 (uniform in the block)
        stage_M(g, Wt, Wg, bo, comp, MsT, 1, kW);
        for (int e = threadIdx.x; e < kW * kW; e += blockDim.x)
            WoT[(e % kW) * (kW + 1) + e / kW] = __ldg(Wo + e);
        __syncthreads();
        // dWr1[m][x] = Σ_f G_aug[m][f] M[x][f] + Σ_j G_ā[m][j] Wo[x][j]
        const int m = o / kW, x = o % kW;
        const float *Gm = G + (size_t)m * ldG;
        double s = 0.0;
        for (int f = 0; f < g.na; ++f) s += (double)Gm[kW + f] * MsT[f * kW + x];
#pragma unroll 16
        for (int j = 0; j < kW; ++j) s += (double)Gm[j] * (double)WoT[j * (kW + 1) + x];
        prod[(size_t)m * ldP + x] = (float)s;
    } else if (o < 2 * kW * kW + kW * g.na) {  // dWo[x][j] | R[x][f] = Σ_m Wr1[m][x] G[m][·]
        const int r = o - kW * kW, x = r / gw, col = r % gw;
        double s = 0.0;
#pragma unroll 16
        for (int m = 0; m < kW; ++m)
            s += (double)Wr1[m * kW + x] * (double)G[(size_t)m * ldG + col];
        prod[(size_t)(kW + x) * ldP + kW + col] = (float)s;
    }
}

int blocks_for(int outputs) { return (outputs + kF64Threads - 1) / kF64Threads; }

// The kernels stage aug (k_attn_head_fac) and M [d, na] (the float64 ones) in arrays sized for
// kNaMax columns.
void check_na(int na, const char *what) {
    if (na < 1 || na > kNaMax)
        fail(FH_ERR_INTERNAL, "attention head (factored) %s: %d aug columns, not 1 to %d", what,
             na, kNaMax);
}

}  // namespace

bool head_factored_fits(int na) { return na <= kNaMax; }

size_t head_factored_floats(int na, int ldG) {
    return (size_t)kW * kW + (size_t)kW * na + (size_t)kW * ldG;
}

void head_factored_composites(const Geom &g, const float *Wo, const float *Wr1, const float *Wt,
                              const float *Wg, const float *bo, const float *comp, float *C1,
                              float *C2, cudaStream_t s) {
    check_na(g.na, "composites");
    FH_LAUNCH(k_head_fac_comp, blocks_for(kW * kW + kW * g.na), kF64Threads, 0, s, g, Wo, Wr1,
              Wt, Wg, bo, comp, C1, C2);
}

void head_factored(const HeadFactoredArgs &a, int blocks, cudaStream_t s) {
    check_na(a.na, "head");
    if (a.ld_in < kW + a.na || a.ld_in % 2)
        fail(FH_ERR_INTERNAL, "attention head (factored): row stride %d, %d aug columns",
             a.ld_in, a.na);
    if (a.bf16)
        FH_LAUNCH(k_attn_head_fac<true>, blocks, kWarps * 32, 0, s, a);
    else
        FH_LAUNCH(k_attn_head_fac<false>, blocks, kWarps * 32, 0, s, a);
}

void head_factored_grads(const Geom &g, const float *G, int ldG, const float *Wo,
                         const float *Wr1, const float *Wt, const float *Wg, const float *bo,
                         const float *comp, float *prod, int ldP, cudaStream_t s) {
    check_na(g.na, "gradients");
    FH_LAUNCH(k_head_fac_grads, blocks_for(2 * kW * kW + kW * g.na), kF64Threads, 0, s, g, G,
              ldG, Wo, Wr1, Wt, Wg, bo, comp, prod, ldP);
}

}  // namespace fh::cuda::attn
