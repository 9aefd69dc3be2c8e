// A SiLU layer in one kernel on Hopper's warpgroup tensor cores: act = SiLU(X Wᵀ + b) and, for a
// layer whose backward needs it, pre = X Wᵀ (the product without its bias, as bias_silu leaves
// it: nn.cuh); or, in the trunk backward, dpre = (X Wᵀ) ⊙ SiLU'(P + b) with its column sums.
// TF32 operands, float32 accumulation (wgmma m64n128k8 .tf32, PTX ISA "Asynchronous Warpgroup
// Level Matrix Multiply-Accumulate").
//
// Why: cuBLAS has no SiLU epilogue, so every SiLU layer was a GEMM writing its product and a
// bias_silu pass reading it back and writing the activation. At B = 16384 the ddqn child's two
// forward-only passes move about 0.8 GB through HBM that way and are bound by it.
//
// Operands already rounded. wgmma reads TF32 operands from shared memory as they are and ignores
// their low 13 bits: it truncates, a bias of the same sign in every product. An earlier form of
// this kernel (docs/cuda.md, "Findings") rounded each staged chunk in shared memory (to_tf32) and
// lost what the fusion saved to that pass. Here the operands arrive rounded, so truncation is
// exact: W is a TF32-rounded copy (the pass's pack, qnet.cu), and the activation this kernel
// writes is rounded (to_tf32) in its epilogue, so the next layer reads it as it is. Only a first
// layer's X (x̃, read exactly by the other learners) is rounded here, ROUND_X, a pass over its
// K / 32 chunks. The pre-activation is stored unrounded (the backward's SiLU' reads it).
//
// Tiling. A block of two warpgroups computes a 128 × 128 tile of the output: warpgroup w rows
// 64w..64w+63, all 128 columns (64 accumulators per thread). K runs in chunks of 32 through a
// ring of three shared-memory stages, each the chunk of X's 128 rows and of W's 128 rows
// (2 × 16 KiB). Both operands are K-major, as wgmma requires for TF32, in the 128-byte
// swizzled layout: row r's 16-byte piece c sits at r·128 + 16·(c ⊕ (r mod 8)), so that the
// eight rows a product reads at one k hit eight different bank groups; a k step of 8 is the
// descriptor's start address plus 32 bytes. The bulk tensor copy engine (TMA) fills the stages
// in that layout (its 128-byte swizzle mode), rows past M as zeros: thread 0 issues a stage's two
// copies, which complete on the stage's `full` mbarrier; each warpgroup arrives on the stage's
// `empty` mbarrier once its products have read it, and thread 0 then refills it. The products
// of one chunk stay in flight while the next chunk's are issued (wgmma.wait_group 1). Before, every
// thread issued four 16-byte cp.async copies per operand and chunk (their addresses in integer
// instructions) and the block met at a barrier after each chunk's products had drained; side by
// side on an H100 at B = 16384 the ddqn child went 0.167 / 0.167 → 0.159 / 0.160 ms multi-stream
// and the Q net's fused layers 364.6 → 357.1 µs in a serialized step, the wall time within its
// spread (bench/results/h100-2026-12-05-linear-tma-before-after*.json): the staging was not what
// bounds the kernel. 96 KiB of stages let two blocks share an SM, so that one block's epilogue
// overlaps another's products. The epilogue adds the bias, applies
// SiLU, rounds, and stores straight from the accumulators (each row's 8 consecutive floats of a
// quad are one 32-byte sector).
//
// SiLU and SiLU' in their fast forms (tile128.cuh: __expf and __fdividef, as in IQN's and IQL's
// fused TF32 kernels): within 2 + 1.2|z| float ulps of the exact expression (SiLU' about 2|z|
// ulps where z is large), far inside the 2^-11 of the activation's own TF32 rounding. The
// kernel is latency-bound at its 25 % occupancy, not bound by memory or the tensor cores
// (Nsight: 0.3 to 0.8 of the 2 to 4 warps per scheduler eligible, issue slots 18 to 42 % busy,
// L2 16 to 58 %), so the instructions on the epilogue's dependent chains count: expf with an IEEE
// division made each SiLU about 30. Side by side at B = 16384 the ddqn child went 0.233 →
// 0.200 ms and the step 1.555 → 1.519 ms multi-stream
// (bench/results/h200-2026-12-03-linear-fast-silu-before-after.json).
//
// Heads (HEADS, linear_silu_heads): when a column tile is one branch's hidden layer (HB = 128),
// the epilogue also forms the branch's A ≤ 8 head outputs of each row on the tensor cores: the
// activations, rounded to TF32 as the layer stores them, are already an mma.sync A fragment
// (mma_tf32.cuh's permuted k order), and U_b, rounded and staged in the idle ring, the B
// fragment: 16 m16n8k8 products per warp, then + e and the clamp. These are the operands and
// the arithmetic of the cuBLAS TF32 GEMM that the heads take elsewhere. Before, each thread
// summed its quarter of the rows' dot products in float32 on the CUDA cores (512 fused
// multiply-adds and 128 shared-memory loads per thread, then a butterfly); side by side at
// B = 16384 the ddqn child went 0.198 / 0.200 → 0.173 / 0.173 ms and the step 1.516 / 1.523 →
// 1.502 / 1.487 ms multi-stream (bench/results/h200-2026-12-03-heads-mma-before-after.json and
// -trial.txt). ddqn's forward-only passes then never store g (qnet.cu says what that saved).
//
// SiLU' (linear_dsilu, the trunk backward's dh → dpre against W's transpose): the epilogue
// multiplies by SiLU'(P + b) (P the forward's pre-activation, read per element), stores dpre
// rounded, and sums each column's unrounded values over the tile's rows in double: each thread
// its two rows, into the idle ring, then one thread per column over the 64 row groups in order,
// one partial row per tile for reduce_partials. No atomics; the same bits every run.
//
// FH_MATH_BF16 (Blas::linear_bf16, the BF16 instances): the operands are rounded to bfloat16
// (round to nearest even, as gemm_bf16.cu stages cuBLAS's) instead of TF32, where this kernel
// rounds them (X's chunks, the activations it stores, U_b) and in the pack (qnet.cu). A bfloat16
// value is a TF32 value with zeros below, so the TF32 products multiply it exactly: the
// arithmetic of a BF16 GEMM (exact products, float32 accumulation), at TF32's rate. Before, the
// mode ran these layers as cuBLAS BF16 GEMMs (each operand converted into a stage first) and
// bias_silu passes; docs/cuda.md ("Findings") has the before/after.
//
// The instructions exist only in sm_90a code (nvcc's arch-specific target, which CMake adds for
// this file): in any other compilation the kernel is empty, and wgmma.cuh's probe tells the host
// which one the driver loaded, so a GPU without them runs cuBLAS + bias_silu instead.
#include "linear_silu.hpp"

#include <cuda.h>  // CUtensorMap (the type only; the encoder comes from the runtime's entry point)
#include <cudaTypedefs.h>

#include "common.hpp"
#include "mma_tf32.cuh"
#include "nn.cuh"
#include "launch.cuh"
#include "tile128.cuh"
#include "wgmma.cuh"

namespace fh::cuda {

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 3, kThreadsTc = 256;
static_assert(kBN == kHeadsTile, "a HEADS tile is one branch of linear_silu.hpp's width");
constexpr int kTileBytes = kBM * kBK * 4;  // one operand's chunk: 128 rows of 128 bytes
constexpr int kStageBytes = 2 * kTileBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + alignment of the ring to 1024

#ifdef FH_HAVE_WGMMA
using wg::sw128_desc;

// The thread's part of a stage's chunk (four 16-byte pieces), rounded in place to TF32 (round to
// nearest even: mma_tf32.cuh's to_tf32, as its products read their operands) or, BF16, to
// bfloat16.
template <bool BF16>
__device__ __forceinline__ void round_chunk(uint32_t dst) {
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreadsTc; ++i) {
        const int e = threadIdx.x + i * kThreadsTc, r = e >> 3, c = e & 7;
        const uint32_t s = dst + r * 128 + ((c ^ (r & 7)) << 4);
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(s));
        const uint32_t u[4] = {mma::to_operand<BF16>(v.x), mma::to_operand<BF16>(v.y),
                               mma::to_operand<BF16>(v.z), mma::to_operand<BF16>(v.w)};
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(s), "r"(u[0]), "r"(u[1]),
                     "r"(u[2]), "r"(u[3]) : "memory");
    }
}

__device__ __forceinline__ void wgmma_m64n128k8(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
          "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}

// The bulk tensor copy engine (TMA) and its mbarriers (PTX ISA "cp.async.bulk.tensor",
// "mbarrier"): the ring's staging (the file comment says how).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// Chunk [rows r0.., columns k0..k0 + 31] of the map's matrix into a stage, in the 128-byte
// swizzled layout that sw128_desc describes (the map's swizzle mode); rows past the matrix
// arrive as zeros.
__device__ __forceinline__ void tma_chunk(uint32_t dst, const CUtensorMap &map, int k0, int r0,
                                          uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(k0), "r"(r0), "r"(bar)
        : "memory");
}

// The epilogues (after the products; d holds the thread's 64 accumulators, the ring is idle).
// Accumulator j of thread (warp v of the warpgroup, g = lane / 4, t = lane % 4): row
// 16v + g (+ 8 for the odd pairs), column 8·(j / 4) + 2t + (j mod 2).
struct Frag {
    int r0, t2, lane;
};
__device__ __forceinline__ Frag frag_of(int m0) {
    const int lane = threadIdx.x & 31, v = (threadIdx.x >> 5) & 3, wg = threadIdx.x >> 7;
    return Frag{m0 + wg * 64 + v * 16 + (lane >> 2), 2 * (lane & 3), lane};
}

// act = rnd(SiLU(d + bias)), pre = d where kept (rnd: TF32 rounding, or bfloat16 with BF16);
// HEADS: the branch heads too (linear_silu_heads): z = rnd(g) rnd(U_b)ᵀ as mma.sync m16n8k8
// products (mma_tf32.cuh), a warp's 16 rows against all A ≤ 8 actions per product. The
// accumulator fragment of column block j (rows r0, r0 + 8, columns 8j + 2t, 8j + 2t + 1) is the
// A fragment in mma_tf32.cuh's permuted k order, so U_b's columns are read in the same order
// (each lane one float2 of row g of U_b). U_b [A, 128] is staged rounded in the idle ring, rows
// past A zero, rows kUld floats apart so that a half-warp's float2 loads hit 32 different banks.
constexpr int kUld = kBN + 8;
static_assert(kMaxHeadActions == 8, "one m16n8k8 product covers a row's actions");
template <bool HEADS, bool BF16>
__device__ __forceinline__ void epilogue_silu(const float (&d)[64], float *ring, int M, int N,
                                              int n0, const float *__restrict__ bias, float *pre,
                                              float *act, const BranchHeads &hd) {
    const Frag f = frag_of(blockIdx.y * kBM);
    const int r0 = f.r0, t2 = f.t2, lane = f.lane;
    // The bias of the thread's 32 columns, loaded before any store: issued at each use, behind
    // the stores to act and pre (which the compiler did not prove apart from it), every load's
    // latency stood in the epilogue's dependent chain (Nsight: long-scoreboard stalls on the
    // bias adds, bench/results/h200-2026-12-03-ncu-source-linear.txt).
    float2 bb[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)
        bb[j] = __ldg(reinterpret_cast<const float2 *>(bias + n0 + 8 * j + t2));
    if (HEADS) {
        const float *Ub = hd.U + (size_t)blockIdx.x * hd.u_stride;
        for (int e = threadIdx.x; e < kMaxHeadActions * kBN; e += kThreadsTc) {
            const int a = e / kBN, c = e % kBN;
            ring[a * kUld + c] = a < hd.A ? mma::rounded<BF16>(__ldg(Ub + a * kBN + c)) : 0.0f;
        }
        __syncthreads();
    }
    const bool keep_pre = pre && pre != act;
    float zc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // HEADS: z of rows r0, r0 + 8, actions 2t, 2t + 1
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int col = n0 + 8 * j + t2;
        const float2 b = bb[j];
        uint32_t ga[4];  // HEADS' A fragment: a0, a1 rows r0, r0 + 8 of column 2t; a2, a3 of 2t + 1
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + 8 * h;
            const float p0 = d[4 * j + 2 * h], p1 = d[4 * j + 2 * h + 1];
            const uint32_t g0 = mma::to_operand<BF16>(tile::silu_fast(__fadd_rn(p0, b.x)));
            const uint32_t g1 = mma::to_operand<BF16>(tile::silu_fast(__fadd_rn(p1, b.y)));
            ga[h] = g0;
            ga[2 + h] = g1;
            if (row >= M) continue;
            const size_t at = (size_t)row * N + col;
            if (keep_pre) *reinterpret_cast<float2 *>(pre + at) = make_float2(p0, p1);
            if (act)
                *reinterpret_cast<float2 *>(act + at) =
                    make_float2(__uint_as_float(g0), __uint_as_float(g1));
        }
        if (HEADS) {
            const float2 u =
                *reinterpret_cast<const float2 *>(ring + (lane >> 2) * kUld + 8 * j + t2);
            mma::mma1(zc, ga[0], ga[1], ga[2], ga[3], __float_as_uint(u.x), __float_as_uint(u.y));
        }
    }
    if (HEADS) {
        const float *eb = hd.e + (size_t)blockIdx.x * hd.e_stride;
        const size_t tile = (size_t)blockIdx.x * M * hd.A;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int row = r0 + 8 * (q >> 1), a = t2 + (q & 1);
            if (a < hd.A && row < M) {
                const float z = __fadd_rn(zc[q], __ldg(eb + a));
                const size_t at = tile + (size_t)row * hd.A + a;
                if (hd.z != hd.q) hd.z[at] = z;
                hd.q[at] = fminf(fmaxf(z, -hd.clip), hd.clip);
            }
        }
    }
}

// dpre = rnd(d ⊙ SiLU'(P + bias)) (SiLU' in its fast form, tile128.cuh) and the block's column
// sums of the unrounded values (linear_dsilu): each thread's two rows per column in double into
// the ring (row groups of 8 lanes in warp order), then one thread per column adds the 64 row
// groups in order. Rows past M add nothing.
constexpr int kPartLd = kBN + 4;  // doubles per row group: the groups' stores spread over banks
static_assert(kThreadsTc / 4 * kPartLd * 8 <= kStages * kStageBytes, "the ring holds the sums");
template <bool BF16>
__device__ __forceinline__ void epilogue_dsilu(const float (&d)[64], double *ring, int M, int N,
                                               int n0, const float *__restrict__ bias,
                                               const float *__restrict__ P, float *dpre,
                                               double *partial) {
    const Frag f = frag_of(blockIdx.y * kBM);
    double *mine = ring + (size_t)(threadIdx.x >> 2) * kPartLd;  // row group (warp, g)
    // P of four column blocks at a time, loaded ahead of their use and of the stores between
    // (as epilogue_silu's bias; rows past M read row M − 1, unused).
    float2 pp[4][2];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int col = n0 + 8 * j + f.t2;
        const float2 b = *reinterpret_cast<const float2 *>(bias + col);
        if (j % 4 == 0) {
#pragma unroll
            for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = min(f.r0 + 8 * h, M - 1);
                    pp[jj][h] = __ldg(reinterpret_cast<const float2 *>(
                        P + (size_t)row * N + n0 + 8 * (j + jj) + f.t2));
                }
        }
        double s0 = 0.0, s1 = 0.0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = f.r0 + 8 * h;
            if (row >= M) continue;
            const size_t at = (size_t)row * N + col;
            const float2 p = pp[j % 4][h];
            const float v0 = __fmul_rn(d[4 * j + 2 * h], tile::dsilu_fast(__fadd_rn(p.x, b.x)));
            const float v1 =
                __fmul_rn(d[4 * j + 2 * h + 1], tile::dsilu_fast(__fadd_rn(p.y, b.y)));
            *reinterpret_cast<float2 *>(dpre + at) =
                make_float2(mma::rounded<BF16>(v0), mma::rounded<BF16>(v1));
            s0 += (double)v0;
            s1 += (double)v1;
        }
        mine[8 * j + f.t2] = s0;
        mine[8 * j + f.t2 + 1] = s1;
    }
    __syncthreads();
    if (threadIdx.x < kBN) {
        double s = 0.0;
        for (int r = 0; r < kThreadsTc / 4; ++r) s += ring[(size_t)r * kPartLd + threadIdx.x];
        partial[(size_t)blockIdx.y * N + n0 + threadIdx.x] = s;
    }
}
#endif

enum { kEpiSilu, kEpiHeads, kEpiDsilu };
struct DsiluPart {
    const float *P = nullptr;
    double *partial = nullptr;
};

// grid (N / 128, ⌈M / 128⌉), 256 threads, kSmemBytes of dynamic shared memory. mX, mW: the
// tensor maps of X [M, K] and W [N, K] (rows_map). W holds TF32 values (bfloat16 values with
// BF16); X too unless ROUND_X (then its chunks are rounded in shared memory, round_chunk). The
// activations it stores are rounded the same way.
// EPI: kEpiSilu (linear_silu), kEpiHeads (linear_silu_heads), kEpiDsilu (linear_dsilu: bias and
// P its SiLU' input, act its output).
template <bool ROUND_X, int EPI, bool BF16>
__global__ void __launch_bounds__(kThreadsTc, 2)
k_linear_silu(const __grid_constant__ CUtensorMap mX, const __grid_constant__ CUtensorMap mW,
              const float *__restrict__ bias, int M, int N, int K, float *pre, float *act,
              BranchHeads hd, DsiluPart dp) {
    pdl_enter();
#ifdef FH_HAVE_WGMMA
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[2 * kStages];  // full[s], then empty[s]
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(bars);
    const auto full = [&](int s) { return bar0 + 8u * s; };
    const auto empty = [&](int s) { return bar0 + 8u * (kStages + s); };
    const int wg = threadIdx.x >> 7;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN, nk = K / kBK;
    const auto stage_x = [&](int s) { return base + s * kStageBytes; };
    const auto stage_w = [&](int s) { return base + s * kStageBytes + kTileBytes; };
    const auto fill = [&](int s, int kc) {
        mbar_expect_tx(full(s), kStageBytes);
        tma_chunk(stage_x(s), mX, kc * kBK, m0, full(s));
        tma_chunk(stage_w(s), mW, kc * kBK, n0, full(s));
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 2);  // one arrival per warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int s = 0; s < kStages && s < nk; ++s) fill(s, s);
    float d[64];
#pragma unroll
    for (int j = 0; j < 64; ++j) d[j] = 0.0f;
    for (int kc = 0; kc < nk; ++kc) {
        const int s = kc % kStages;
        mbar_wait(full(s), (uint32_t)(kc / kStages) & 1u);
        if (ROUND_X) {
            // Every thread rounds its part of X's chunk; the products read it after all have.
            round_chunk<BF16>(stage_x(s));
            wg::fence_proxy_shared();
            asm volatile("bar.sync 1, %0;\n" ::"n"(kThreadsTc) : "memory");
        }
        const uint64_t da = sw128_desc(stage_x(s) + wg * 64 * 128), db = sw128_desc(stage_w(s));
        wg::fence();
#pragma unroll
        for (int k = 0; k < kBK / 8; ++k) wgmma_m64n128k8(d, da + 2 * k, db + 2 * k);
        wg::commit();
        // Chunk kc − 1's products are done: its stage is free for chunk kc − 1 + kStages.
        wg::wait_all_but_one();
        if (kc > 0) {
            const int sp = (kc - 1) % kStages;
            if ((threadIdx.x & 127) == 0) mbar_arrive(empty(sp));
            if (threadIdx.x == 0 && kc - 1 + kStages < nk) {
                mbar_wait(empty(sp), (uint32_t)((kc - 1) / kStages) & 1u);
                fill(sp, kc - 1 + kStages);
            }
        }
    }
    wg::wait_all();
    // Every chunk that was copied has been waited for and read: the ring is idle once both
    // warpgroups are past their products.
    unsigned char *ring = smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw));
    __syncthreads();
    if (EPI == kEpiDsilu)
        epilogue_dsilu<BF16>(d, reinterpret_cast<double *>(ring), M, N, n0, bias, dp.P, act,
                             dp.partial);
    else
        epilogue_silu<EPI == kEpiHeads, BF16>(d, reinterpret_cast<float *>(ring), M, N, n0, bias,
                                              pre, act, hd);
#endif
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link to libcuda), or null
// where the driver has none (has_wgmma then keeps the layers on cuBLAS).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p,
                                                               12000, cudaEnableDefault, &q);
#else  // CUDA 12.3 and 12.4 (launch.cuh's minimum) have only the unversioned query
        const cudaError_t e =
            cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) p = nullptr;
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

// The tensor map of a row-major float32 matrix [rows, K] in boxes of kBK columns × kBM rows,
// 128-byte swizzled as the ring's stages are; reads past its rows give zeros.
CUtensorMap rows_map(const float *A, int rows, int K) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * sizeof(float)};
    const cuuint32_t box[2] = {kBK, kBM}, unit[2] = {1, 1};
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) fail(FH_ERR_CUDA, "the driver has no cuTensorMapEncodeTiled");
    const CUresult r = encode(
        &m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float *>(A), dims, strides, box, unit,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        fail(FH_ERR_CUDA, "cuTensorMapEncodeTiled of a [%d, %d] matrix at %p: CUresult %d", rows,
             K, (const void *)A, (int)r);
    return m;
}

// Whether the loaded code of k_linear_silu has the wgmma instructions (run_probe asks once per
// device and keeps the answer) and the driver encodes tensor maps; where both, the kernels'
// shared-memory limit is raised for the current device, at each pipeline's creation, as the IQN
// passes' prepare functions do theirs.
bool has_wgmma() {
    if (!run_probe((const void *)wg::wgmma_probe_kernel<0>) || !tensor_map_encoder()) return false;
    const void *kernels[] = {
        (const void *)k_linear_silu<true, kEpiSilu, false>,
        (const void *)k_linear_silu<false, kEpiSilu, false>,
        (const void *)k_linear_silu<true, kEpiHeads, false>,
        (const void *)k_linear_silu<false, kEpiHeads, false>,
        (const void *)k_linear_silu<true, kEpiDsilu, false>,
        (const void *)k_linear_silu<false, kEpiDsilu, false>,
        (const void *)k_linear_silu<true, kEpiSilu, true>,
        (const void *)k_linear_silu<false, kEpiSilu, true>,
        (const void *)k_linear_silu<true, kEpiHeads, true>,
        (const void *)k_linear_silu<false, kEpiHeads, true>,
        (const void *)k_linear_silu<true, kEpiDsilu, true>,
        (const void *)k_linear_silu<false, kEpiDsilu, true>};
    for (const void *k : kernels)
        FH_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
}

bool fits(int M, int N, int K, const float *X, const float *W, const float *bias,
          const float *pre, const float *act) {
    const auto a16 = [](const void *p) { return p == nullptr || (uintptr_t)p % 16 == 0; };
    return M > 0 && N % kBN == 0 && K % kBK == 0 && K > 0 && a16(X) && a16(W) && a16(bias) &&
           a16(pre) && a16(act);
}

template <int EPI, bool BF16>
void launch_as(int M, int N, cudaStream_t s, bool x_rounded, const float *X, const float *Wt,
               const float *bias, int K, float *pre, float *act, const BranchHeads &hd,
               const DsiluPart &dp) {
    const dim3 grid(N / kBN, (M + kBM - 1) / kBM);
    const CUtensorMap mx = rows_map(X, M, K), mw = rows_map(Wt, N, K);
    if (x_rounded)
        FH_LAUNCH((k_linear_silu<false, EPI, BF16>), grid, kThreadsTc, kSmemBytes, s, mx, mw,
                  bias, M, N, K, pre, act, hd, dp);
    else
        FH_LAUNCH((k_linear_silu<true, EPI, BF16>), grid, kThreadsTc, kSmemBytes, s, mx, mw, bias,
                  M, N, K, pre, act, hd, dp);
}
template <int EPI>
void launch(const Blas &bl, int M, int N, cudaStream_t s, bool x_rounded, const float *X,
            const float *Wt, const float *bias, int K, float *pre, float *act,
            const BranchHeads &hd, const DsiluPart &dp) {
    if (bl.linear_bf16)
        launch_as<EPI, true>(M, N, s, x_rounded, X, Wt, bias, K, pre, act, hd, dp);
    else
        launch_as<EPI, false>(M, N, s, x_rounded, X, Wt, bias, K, pre, act, hd, dp);
}

}  // namespace

bool linear_tc_pays(int M, int N) {
    return (long)(N / kBN) * ((M + kBM - 1) / kBM) >= kLinearMinTiles;
}

bool linear_tc_enabled(const fh_config &c) {
    return (c.math_mode == FH_MATH_TF32 || c.math_mode == FH_MATH_BF16) && has_wgmma();
}

bool linear_silu(const Blas &bl, cudaStream_t s, int M, int N, int K, const float *X,
                 bool x_rounded, const float *W, const float *Wt, const float *bias, float *pre,
                 float *act, const char *what) {
    if (bl.linear_tc && Wt && fits(M, N, K, X, Wt, bias, pre, act)) {
        launch<kEpiSilu>(bl, M, N, s, x_rounded, X, Wt, bias, K, pre, act, BranchHeads{},
                         DsiluPart{});
        return true;
    }
    gemm_nt(bl, M, N, K, X, W, pre, 0.0f, what);
    bias_silu(pre, act, bias, M, N, s);
    return false;
}

bool linear_silu_heads(const Blas &bl, cudaStream_t s, int M, int N, int K, const float *X,
                       bool x_rounded, const float *Wt, const float *bias, float *pre, float *act,
                       const BranchHeads &hd) {
    if (!bl.linear_tc || !Wt || hd.A < 1 || hd.A > kMaxHeadActions ||
        !fits(M, N, K, X, Wt, bias, pre, act))
        return false;
    launch<kEpiHeads>(bl, M, N, s, x_rounded, X, Wt, bias, K, pre, act, hd, DsiluPart{});
    return true;
}

bool linear_dsilu(const Blas &bl, cudaStream_t s, int M, int N, int K, const float *X,
                  bool x_rounded, const float *Wt, const float *P, const float *bias, float *dpre,
                  double *partial) {
    if (!bl.linear_tc || !Wt || !fits(M, N, K, X, Wt, bias, P, dpre)) return false;
    DsiluPart dp;
    dp.P = P;
    dp.partial = partial;
    launch<kEpiDsilu>(bl, M, N, s, x_rounded, X, Wt, bias, K, nullptr, dpre, BranchHeads{}, dp);
    return true;
}

}  // namespace fh::cuda
