// FH_MATH_BF16's GEMMs: both operands rounded to bfloat16 (round to nearest even) into the
// lane's stage, then cublasGemmEx on bfloat16 operands with float32 accumulation and float32 C.
//
// Why a stage: the step keeps every activation in float32 (the kernels around the GEMMs read
// and write float32), and cuBLAS only multiplies bfloat16 operands when they are stored as
// bfloat16: CUBLAS_COMPUTE_32F_FAST_16BF on float32 operands gave TF32's results bit for bit on
// the H200 (cuBLAS 13.1). So each GEMM first converts what it reads, a pass over the operands.
// Where a kernel writes the operands it can write them rounded instead: gemm_tn_bf16 (below)
// multiplies operands stored as bfloat16, and gemm_bf16_values (gemm.cpp) float32 operands that
// hold bfloat16 values, neither with a stage (docs/design.md lists the GEMMs that do).
//
// Blocking: the stage holds kBf16StageElems elements (8 MiB) and b's alignment. A GEMM whose
// two operands fit is one conversion per operand and one call. Otherwise C is cut into blocks
// of columns (n, the row-major rows) or rows (m), and k into blocks summed into C in order (the
// first block with the caller's beta, the rest with beta 1): chunk sizes depend on the shape
// alone, so every run makes the same calls and sums in the same order.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include <cuda_bf16.h>

#include "common.hpp"
#include "gemm.hpp"
#include "schedule.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// The column-major [rows, cols] block at src (leading dimension ld) as a compact column-major
// bfloat16 block (leading dimension rows). Grid-stride over the elements; four at a time when
// the rows and the leading dimension allow 16-byte loads.
__global__ void k_to_bf16(const float *__restrict__ src, size_t ld, size_t rows, size_t cols,
                          __nv_bfloat16 *__restrict__ dst, bool vec4) {
    pdl_enter();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (vec4) {
        const size_t rows4 = rows / 4, n4 = rows4 * cols;
        for (; i < n4; i += stride) {
            const size_t c = i / rows4, r = (i - c * rows4) * 4;
            const float4 v = *reinterpret_cast<const float4 *>(src + c * ld + r);
            __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(dst + c * rows + r);
            o[0] = __floats2bfloat162_rn(v.x, v.y);
            o[1] = __floats2bfloat162_rn(v.z, v.w);
        }
        return;
    }
    for (const size_t n = rows * cols; i < n; i += stride) {
        const size_t c = i / rows, r = i - c * rows;
        dst[i] = __float2bfloat16_rn(src[c * ld + r]);
    }
}

// Rounds the column-major [rows, cols] block at src (leading dimension ld) into dst, compact.
void stage(const float *src, int ld, int rows, int cols, __nv_bfloat16 *dst, cudaStream_t s) {
    const bool vec4 = rows % 4 == 0 && ld % 4 == 0 && (uintptr_t)src % 16 == 0;
    const size_t n = (size_t)rows * cols;
    FH_LAUNCH(k_to_bf16, grid_for(vec4 ? n / 4 : n), kThreads, 0, s, src, (size_t)ld, rows, cols,
              dst, vec4);
}

// Block sizes (mc, nc, kc) whose operand blocks mc·kc + kc·nc fit `cap`: shrink the largest
// dimension to what fits if that is enough, else halve it and look again. Multiples of 16
// where the dimension allows (aligned blocks, whole tensor-core tiles).
void block_sizes(int m, int n, int k, size_t cap, int &mc, int &nc, int &kc) {
    mc = m;
    nc = n;
    kc = k;
    auto fits = [&] { return (size_t)mc * kc + (size_t)kc * nc <= cap; };
    auto round16 = [](size_t v) { return v >= 16 ? (int)(v / 16 * 16) : (int)v; };
    while (!fits()) {
        int *big = &nc;
        if (mc > *big) big = &mc;
        if (kc > *big) big = &kc;
        size_t want = 0;
        if (big == &nc && (size_t)mc * kc < cap) want = (cap - (size_t)mc * kc) / kc;
        if (big == &mc && (size_t)kc * nc < cap) want = (cap - (size_t)kc * nc) / kc;
        if (big == &kc) want = cap / ((size_t)mc + nc);
        want = round16(want);
        *big = want >= 1 && want < (size_t)*big ? (int)want : std::max(1, *big / 2);
    }
}

}  // namespace

void gemm_bf16(const Blas &bl, const GemmDesc &g, float beta, const char *what) {
    cudaStream_t s = nullptr;
    FH_CUBLAS(cublasGetStream(bl.handle, &s));
    int mc, nc, kc;
    // The stage holds kBf16StageElems + 128 elements (src/schedule.cpp), so blocks of up to
    // kBf16StageElems fit with b's start rounded up to 128. (A cap 128 lower cut every K = B
    // weight gradient with two 16384 × 128 operands into a block and a 16-row rest: BF16 wall
    // 1.789 / 1.788 → 1.773 / 1.770 ms single-stream side by side,
    // bench/results/h200-2026-12-03-bf16-stage-cap-before-after*.json.)
    block_sizes(g.m, g.n, g.k, kBf16StageElems, mc, nc, kc);
    __nv_bfloat16 *sa = static_cast<__nv_bfloat16 *>(bl.bf16_stage);
    const bool ta = g.opa != CUBLAS_OP_N, tb = g.opb != CUBLAS_OP_N;
    const float alpha = 1.0f;
    for (int n0 = 0; n0 < g.n; n0 += nc)
        for (int m0 = 0; m0 < g.m; m0 += mc)
            for (int k0 = 0; k0 < g.k; k0 += kc) {
                const int mb = std::min(mc, g.m - m0), nb = std::min(nc, g.n - n0),
                          kb = std::min(kc, g.k - k0);
                // op(a) is [m, k]: a is [m, k] (N) or [k, m] (T), column-major, ld lda.
                const int ar = ta ? kb : mb, ac = ta ? mb : kb;
                const float *a = g.a + (ta ? (size_t)m0 * g.lda + k0 : (size_t)k0 * g.lda + m0);
                // op(b) is [k, n]: b is [k, n] (N) or [n, k] (T).
                const int br = tb ? nb : kb, bc = tb ? kb : nb;
                const float *b = g.b + (tb ? (size_t)k0 * g.ldb + n0 : (size_t)n0 * g.ldb + k0);
                // b's block starts 128 elements (256 bytes) aligned after a's.
                __nv_bfloat16 *sb = sa + ((size_t)ar * ac + 127) / 128 * 128;
                stage(a, g.lda, ar, ac, sa, s);
                stage(b, g.ldb, br, bc, sb, s);
                const float bk = k0 == 0 ? beta : 1.0f;
                float *c = g.c + (size_t)n0 * g.ldc + m0;
                const cublasStatus_t st = cublasGemmEx(
                    bl.handle, g.opa, g.opb, mb, nb, kb, &alpha, sa, CUDA_R_16BF, ar, sb,
                    CUDA_R_16BF, br, &bk, c, CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT);
                if (st != CUBLAS_STATUS_SUCCESS) {
                    char call[256];
                    snprintf(call, sizeof call,
                             "cublasGemmEx(%s, bfloat16 operands: m=%d n=%d k=%d, block at "
                             "m0=%d n0=%d k0=%d)", what, g.m, g.n, g.k, m0, n0, k0);
                    throw_cublas(st, call, __FILE__, __LINE__);
                }
            }
}

void gemm_tn_bf16(const Blas &bl, int M, int N, int K, const __nv_bfloat16 *A,
                  const __nv_bfloat16 *B, float *C, float beta, const char *what) {
    // desc_tn's call: Cᵀ[N, M] = (B as [N, K], ld N) · op_T(A as [M, K], ld M).
    const float alpha = 1.0f;
    const cublasStatus_t st =
        cublasGemmEx(bl.handle, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &alpha, B, CUDA_R_16BF, N, A,
                     CUDA_R_16BF, M, &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        char call[256];
        snprintf(call, sizeof call, "cublasGemmEx(%s, bfloat16 operands: M=%d N=%d K=%d)", what,
                 M, N, K);
        throw_cublas(st, call, __FILE__, __LINE__);
    }
}

}  // namespace fh::cuda
