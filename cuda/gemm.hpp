// The row-major GEMM layer over cuBLAS (column-major) that the Q net and every auxiliary learner
// use, named as in src/cpu/nn.hpp so the CUDA tasks read like the CPU ones.
//
// A row-major [r, c] matrix is the column-major [c, r] matrix with leading dimension c. So the
// row-major product C = A·B is computed as the column-major Cᵀ = Bᵀ·Aᵀ, with the operands
// swapped and no data moved; a row-major "transpose this operand" becomes CUBLAS_OP_T on the
// column-major view of the same memory:
//   nt: C[M, N] = A[M, K] · B[N, K]ᵀ + beta·C   (y = x Wᵀ)   -> cuBLAS (T, N), m=N n=M k=K, B ld K, A ld K
//   nn: C[M, N] = A[M, K] · B[K, N]  + beta·C   (dx = dy W)  -> cuBLAS (N, N), m=N n=M k=K, B ld N, A ld K
//   tn: C[M, N] = A[K, M]ᵀ · B[K, N] + beta·C   (dW = dyᵀ x) -> cuBLAS (N, T), m=N n=M k=K, B ld N, A ld M
// C is always column-major [N, M] with ld N, i.e. row-major [M, N]. The arithmetic is FP32
// (strict), or FP32 accumulation on tensor cores of TF32 or BF16 operands, fixed per pipeline
// (fh_config.math_mode). float32 operands go through cublasLtMatmul (gemm.cpp says why not
// cublasGemmEx), bfloat16 ones through cublasGemmEx. The handle must already be bound to its
// lane's stream and workspace.
#pragma once
#include <foxhunt.h>

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_bf16.h>

namespace fh::cuda {

struct Blas {
    cublasHandle_t handle;
    cublasComputeType_t compute;  // CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32
    // FH_MATH_BF16: kBf16StageElems bfloat16s (src/schedule.hpp) where gemm() stages the
    // operands' bfloat16 copies; null in the other modes.
    void *bf16_stage = nullptr;
    // The Q net's SiLU layers in cuda/linear_silu.cu's fused kernel (linear_tc_enabled) where
    // the pass has rounded weights (its pack), not cuBLAS + bias_silu.
    bool linear_tc = false;
    // The handle's workspace (cublasSetWorkspace's), which cublasLtMatmul takes per call.
    void *ws = nullptr;
    size_t ws_bytes = 0;
    // FH_MATH_BF16: where linear_tc, the fused layers round their operands to bfloat16, not TF32.
    bool linear_bf16 = false;
};
// CUBLAS_COMPUTE_32F for FH_MATH_STRICT and FH_MATH_BF16 (float32 accumulation of bfloat16
// operands), CUBLAS_COMPUTE_32F_FAST_TF32 for FH_MATH_TF32. (CUBLAS_COMPUTE_32F_FAST_16BF on
// float32 operands would not do for BF16: on the H200 cuBLAS 13.1 runs it on its TF32 kernels,
// bit for bit TF32's results.)
cublasComputeType_t compute_type(const fh_config &c);

// One GEMM in cuBLAS's own (column-major) terms: C = op(a) · op(b), C [m, n] ld ldc. The IQL
// learner builds these to hand several at once to cuBLAS's grouped and batched calls.
struct GemmDesc {
    cublasOperation_t opa, opb;
    int m, n, k;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float *c;
    int ldc;
};
GemmDesc desc_nt(int M, int N, int K, const float *A, const float *B, float *C);
GemmDesc desc_nn(int M, int N, int K, const float *A, const float *B, float *C);
GemmDesc desc_tn(int M, int N, int K, const float *A, const float *B, float *C);
// The same product with the row-major operands' rows further apart: A's lda, B's ldb, C's ldc
// floats (0 keeps the packed stride), for matrices that are columns of wider ones.
inline GemmDesc strided(GemmDesc g, int lda, int ldb, int ldc) {
    if (lda) g.ldb = lda;  // the row-major A is cuBLAS's second operand (Cᵀ = Bᵀ Aᵀ)
    if (ldb) g.lda = ldb;
    if (ldc) g.ldc = ldc;
    return g;
}

// The workspace gemm() asks cublasLt's heuristics to rank algorithms for (at least): what
// cuBLAS recommends for Hopper. The algorithm it runs must still fit the lane's own workspace.
constexpr size_t kHeuristicWorkspace = size_t{32} << 20;

// C = op(a)·op(b) + beta·C on the handle's stream and workspace (alpha = 1), by cublasLtMatmul;
// `what` names it in errors. With a bf16_stage, gemm_bf16() instead.
void gemm(const Blas &bl, const GemmDesc &g, float beta, const char *what);
// FH_MATH_BF16 (cuda/gemm_bf16.cu): the same product with both operands rounded to bfloat16
// (round to nearest even) into the stage, then one cublasGemmEx on bfloat16 operands with
// float32 accumulation and a float32 C. (cublasLtMatmul with gemm()'s choice of algorithm was
// tried for these too: 2.045 against 2.001 ms per step, multi-stream at B = 16384, one run each
// (bench/results/h200-2026-12-03-gemm-lt-bf16-tried.json), but cublasGemmEx alone gave 2.044 /
// 2.045 in a later run (-gemm-lt-modes.json): no difference shown either way, so the bfloat16
// GEMMs stay on cublasGemmEx.) A GEMM whose operands do not fit the stage runs in blocks of C
// (and of k, summed into C in order), the same blocks on every run.
void gemm_bf16(const Blas &bl, const GemmDesc &g, float beta, const char *what);

// FH_MATH_BF16, float32 operands whose values are all bfloat16 values (the kernels that wrote
// them rounded their stores: the fused SiLU layers' activations and dpre, the branch backward's
// dpre, the fused IQL pass's h1, dpre2 and dpre1, IQN's fused backward's dψpre, CQL's rounded
// dzc, HER's rounded x̃, the pack's rounded weights; tests/test_cuda_bf16.cpp checks several in
// a whole step): a bfloat16 value is a TF32
// value with its low bits
// zero, so TF32 tensor cores multiply them exactly and accumulate in float32, the arithmetic of
// gemm_bf16() on the same operands, without its stage (a pass over each operand) and blocking.
// Runs gemm()'s cublasLtMatmul with CUBLAS_COMPUTE_32F_FAST_TF32. In the other modes, gemm().
void gemm_bf16_values(const Blas &bl, const GemmDesc &g, float beta, const char *what);

// FH_MATH_BF16, operands a kernel already wrote as bfloat16 (the IQN learner's fused passes):
// row-major C[M, N] = A[K, M]ᵀ · B[K, N] + beta·C (float32 C, float32 accumulation), one
// cublasGemmEx on the handle's stream and workspace, no stage and no blocking; `what` names it in
// errors (fh::Error with FH_ERR_CUDA). The operands are the values gemm_bf16() would have
// staged (the same round to nearest even of the same floats).
void gemm_tn_bf16(const Blas &bl, int M, int N, int K, const __nv_bfloat16 *A,
                  const __nv_bfloat16 *B, float *C, float beta, const char *what);

inline void gemm_nt(const Blas &bl, int M, int N, int K, const float *A, const float *B, float *C,
                    float beta, const char *what) {
    gemm(bl, desc_nt(M, N, K, A, B, C), beta, what);
}
inline void gemm_nn(const Blas &bl, int M, int N, int K, const float *A, const float *B, float *C,
                    float beta, const char *what) {
    gemm(bl, desc_nn(M, N, K, A, B, C), beta, what);
}
inline void gemm_tn(const Blas &bl, int M, int N, int K, const float *A, const float *B, float *C,
                    float beta, const char *what) {
    gemm(bl, desc_tn(M, N, K, A, B, C), beta, what);
}

}  // namespace fh::cuda
