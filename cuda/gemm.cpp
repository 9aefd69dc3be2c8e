#include "gemm.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>

#include <cublasLt.h>

#include "common.hpp"

namespace fh::cuda {

cublasComputeType_t compute_type(const fh_config &c) {
    return c.math_mode == FH_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Row-major C[M, N] = A[M, K] · B[N, K]ᵀ  <=>  column-major Cᵀ[N, M] = op_T(B as [K, N], ld K) ·
// (A as [K, M], ld K).
GemmDesc desc_nt(int M, int N, int K, const float *A, const float *B, float *C) {
    return GemmDesc{CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, B, K, A, K, C, N};
}
// Row-major C[M, N] = A[M, K] · B[K, N]  <=>  Cᵀ[N, M] = (B as [N, K], ld N) · (A as [K, M], ld K).
GemmDesc desc_nn(int M, int N, int K, const float *A, const float *B, float *C) {
    return GemmDesc{CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, B, N, A, K, C, N};
}
// Row-major C[M, N] = A[K, M]ᵀ · B[K, N]  <=>  Cᵀ[N, M] = (B as [N, K], ld N) · op_T(A as [M, K],
// ld M).
GemmDesc desc_tn(int M, int N, int K, const float *A, const float *B, float *C) {
    return GemmDesc{CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, B, N, A, M, C, N};
}

namespace {

// The largest power of two up to 256 that divides p's address: cublasLt's heuristics assume
// 256-byte aligned operands unless told otherwise, and an algorithm chosen for more alignment
// than a pointer has faults.
uint32_t alignment_of(const void *p) {
    uint32_t a = 256;
    while (a > 4 && (uintptr_t)p % a) a /= 2;
    return a;
}

// cublasLt objects of one call, destroyed on every path out.
struct LtCall {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtCall() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

[[noreturn]] void fail_lt(cublasStatus_t s, const char *what, const GemmDesc &g, const char *step) {
    char call[256];
    snprintf(call, sizeof call, "cublasLt %s (%s: m=%d n=%d k=%d)", step, what, g.m, g.n, g.k);
    throw_cublas(s, call, __FILE__, __LINE__);
}

// What chooses an algorithm: the device, the operations, the shape and strides, the operands'
// alignments, the compute type and the workspace.
using AlgoKey = std::array<int64_t, 14>;

// The heuristics' choices, process-wide (pipelines on several threads share it). A query costs
// about 15 µs of host time, and act() runs its GEMMs outside any graph on every call: without
// the cache an act() call took 300 to 430 µs against 180 to 250 on cublasGemmEx, with it 130 to
// 180 against 140 to 190 (H200, default dims at B = 1024, 1 and 64 rows, side by side;
// bench/results/h200-2026-12-03-gemm-lt-probes.txt). act()'s row counts vary, so the map is
// emptied when it reaches kMaxAlgos entries.
constexpr size_t kMaxAlgos = 4096;
std::mutex algo_mutex;
std::map<AlgoKey, cublasLtMatmulAlgo_t> algo_cache;

// cublasLtMatmul with the algorithm cublasLt's heuristics rank first among those that fit the
// lane's workspace, asked as if it had at least kHeuristicWorkspace bytes. Why not cublasGemmEx:
// on the H200 (cuBLAS 13.1) it picks much slower kernels for the step's weight gradients
// (K = B rows, small outputs) whenever the handle's workspace is below 32 MiB: at 24 MiB and
// less every such shape probed took 1.5 to 2.8 times as long. cublasLt's heuristics do the same
// when told the workspace is smaller; told of 32 MiB, they rank first split-K algorithms whose
// partials need 0.5 to 8.25 MiB for those shapes, and run as fast as cublasGemmEx at 32 MiB
// (bench/results/h200-2026-12-03-gemm-lt-probes.txt). The lanes with half a workspace
// (src/schedule.cpp) ran their GEMMs that way. The heuristics take only the shape, types,
// alignments and workspace limit, and the cache pins each choice for the process, so every
// capture makes the same calls; the algorithms' split-K sums have a fixed order.
void lt_matmul(const Blas &bl, const GemmDesc &g, float beta, const char *what) {
    const float alpha = 1.0f;
    // A cublasHandle_t is usable as a cublasLtHandle_t (cuBLAS documents the cast).
    cublasLtHandle_t lt = reinterpret_cast<cublasLtHandle_t>(bl.handle);
    cudaStream_t stream = nullptr;
    FH_CUBLAS(cublasGetStream(bl.handle, &stream));
    int device = 0;
    FH_CUDA(cudaGetDevice(&device));
    LtCall k;
    cublasStatus_t s = cublasLtMatmulDescCreate(&k.op, bl.compute, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(k.op, CUBLASLT_MATMUL_DESC_TRANSA, &g.opa, sizeof g.opa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(k.op, CUBLASLT_MATMUL_DESC_TRANSB, &g.opb, sizeof g.opb);
    // op(a) is [m, k], op(b) [k, n]; a layout describes the matrix as stored.
    const bool ta = g.opa != CUBLAS_OP_N, tb = g.opb != CUBLAS_OP_N;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&k.a, CUDA_R_32F, ta ? g.k : g.m, ta ? g.m : g.k, g.lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&k.b, CUDA_R_32F, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&k.c, CUDA_R_32F, g.m, g.n, g.ldc);
    if (s != CUBLAS_STATUS_SUCCESS) fail_lt(s, what, g, "descriptors");
    const uint32_t align[3] = {alignment_of(g.a), alignment_of(g.b), alignment_of(g.c)};
    const AlgoKey key{device,   g.opa,    g.opb,    g.m, g.n, g.k, g.lda, g.ldb, g.ldc,
                      align[0], align[1], align[2], (int64_t)bl.compute, (int64_t)bl.ws_bytes};
    cublasLtMatmulAlgo_t algo;
    bool have_algo = false;  // from the cache, else from the heuristics below
    {
        std::lock_guard<std::mutex> lock(algo_mutex);
        const auto it = algo_cache.find(key);
        if (it != algo_cache.end()) {
            algo = it->second;
            have_algo = true;
        }
    }
    if (!have_algo) {
        s = cublasLtMatmulPreferenceCreate(&k.pref);
        const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; ++i)
            s = cublasLtMatmulPreferenceSetAttribute(k.pref, align_attr[i], &align[i < 3 ? i : 2],
                                                     sizeof(uint32_t));
        if (s != CUBLAS_STATUS_SUCCESS) fail_lt(s, what, g, "preference");
        // The first of the heuristics' ranking that fits the workspace; failing that, the
        // ranking for the workspace itself.
        constexpr int kAsk = 8;
        cublasLtMatmulHeuristicResult_t res[kAsk];
        for (const size_t limit : {std::max(bl.ws_bytes, kHeuristicWorkspace), bl.ws_bytes}) {
            s = cublasLtMatmulPreferenceSetAttribute(
                k.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit);
            int n = 0;
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulAlgoGetHeuristic(lt, k.op, k.a, k.b, k.c, k.c, k.pref, kAsk, res,
                                                   &n);
            if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED)
                fail_lt(s, what, g, "heuristics");
            for (int i = 0; i < n && !have_algo; ++i)
                if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= bl.ws_bytes) {
                    algo = res[i].algo;
                    have_algo = true;
                }
            if (have_algo || bl.ws_bytes >= kHeuristicWorkspace) break;
        }
        if (!have_algo) fail_lt(CUBLAS_STATUS_NOT_SUPPORTED, what, g, "heuristics (none fits)");
        std::lock_guard<std::mutex> lock(algo_mutex);
        if (algo_cache.size() >= kMaxAlgos) algo_cache.clear();
        algo_cache.emplace(key, algo);
    }
    s = cublasLtMatmul(lt, k.op, &alpha, g.a, k.a, g.b, k.b, &beta, g.c, k.c, g.c, k.c, &algo,
                       bl.ws, bl.ws_bytes, stream);
    if (s != CUBLAS_STATUS_SUCCESS) fail_lt(s, what, g, "matmul");
}

}  // namespace

void gemm(const Blas &bl, const GemmDesc &g, float beta, const char *what) {
    if (bl.bf16_stage) return gemm_bf16(bl, g, beta, what);
    lt_matmul(bl, g, beta, what);
}

void gemm_bf16_values(const Blas &bl, const GemmDesc &g, float beta, const char *what) {
    if (!bl.bf16_stage) return gemm(bl, g, beta, what);
    Blas tf32 = bl;
    tf32.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    lt_matmul(tf32, g, beta, what);
}

}  // namespace fh::cuda
