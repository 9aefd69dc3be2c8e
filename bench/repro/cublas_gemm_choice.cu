// Which kernels cuBLAS picks for the step's weight-gradient shapes (dW = dyᵀ x: K = B rows, small
// outputs), TF32, and how fast they run. Not part of the library; it is why cuda/gemm.cpp asks
// cublasLt's heuristics as for 32 MiB. Result: bench/results/h200-2026-12-03-gemm-lt-probes.txt.
//   1. cublasGemmEx against the handle's workspace, 4 to 64 MiB (on the H200 every shape is 1.5
//      to 2.8 times slower at 24 MiB and less than at 32);
//   2. cublasLt's first four algorithms for a workspace limit of 8, 16, 24 and 32 MiB (and at
//      32 MiB with split-K reduced in place only, or not split): the workspace each needs and
//      its time on a 16 MiB buffer (-1: it does not fit).
// Times: a CUDA graph of 20 calls, the best of 5 launches, µs per call.
//     nvcc -O2 -arch=sm_90 cublas_gemm_choice.cu -lcublasLt -lcublas && ./a.out
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CK(x)                                                                    \
    do {                                                                         \
        auto e_ = (x);                                                           \
        if (e_ != 0) {                                                           \
            printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__);          \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

// Row-major dW[M, N] = A[K, M]ᵀ B[K, N], A's rows lda apart: cuBLAS's (N, T) product.
struct Shape {
    const char *name;
    int M, N, K, lda, ldb;
};

cudaStream_t stream;
cudaEvent_t e0, e1;

template <class Call>
float time_us(Call call) {
    call();
    CK(cudaStreamSynchronize(stream));
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 20; ++i) call();
    CK(cudaStreamEndCapture(stream, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, stream));
    CK(cudaStreamSynchronize(stream));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        float ms;
        CK(cudaEventRecord(e0, stream));
        CK(cudaGraphLaunch(ge, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
    return best * 1000.f / 20;
}

int main() {
    const std::vector<Shape> shapes = {
        {"dV (128x256, K=16384, A ld 512)", 128, 256, 16384, 512, 256},
        {"dW2 (256x256, K=16384)", 256, 256, 16384, 256, 256},
        {"dW1 (256x128, K=16384)", 256, 128, 16384, 256, 128},
        {"IQL dW (128x128, K=16384)", 128, 128, 16384, 128, 128},
        {"IQN dWm (128x128, K=131072)", 128, 128, 131072, 128, 128},
        {"IQN dWphi (128x64, K=131072)", 128, 64, 131072, 128, 64},
        {"CQL dU (8x128, K=16384)", 8, 128, 16384, 8, 128},
        {"attn dWo (64x64, K=16384)", 64, 64, 16384, 64, 64},
    };
    float *A, *B, *C;
    void *ws;
    CK(cudaMalloc(&A, 131072ull * 512 * 4));
    CK(cudaMalloc(&B, 131072ull * 256 * 4));
    CK(cudaMalloc(&C, 256 * 256 * 4));
    CK(cudaMalloc(&ws, 64ull << 20));
    CK(cudaMemset(A, 0, 131072ull * 512 * 4));
    CK(cudaMemset(B, 0, 131072ull * 256 * 4));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const float al = 1, be = 0;

    printf("1. cublasGemmEx, us per GEMM against the workspace (MiB)\n%-34s", "shape");
    const size_t mib[] = {4, 8, 12, 16, 20, 24, 32, 64};
    for (size_t w : mib) printf(" %7zu", w);
    printf("\n");
    for (const Shape &g : shapes) {
        printf("%-34s", g.name);
        for (size_t w : mib) {
            cublasHandle_t h;
            CK(cublasCreate(&h));
            CK(cublasSetStream(h, stream));
            CK(cublasSetWorkspace(h, ws, w << 20));
            CK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
            CK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
            printf(" %7.2f", time_us([&] {
                       CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, g.N, g.M, g.K, &al, B,
                                       CUDA_R_32F, g.ldb, A, CUDA_R_32F, g.lda, &be, C,
                                       CUDA_R_32F, g.N, CUBLAS_COMPUTE_32F_FAST_TF32,
                                       CUBLAS_GEMM_DEFAULT));
                   }));
            CK(cublasDestroy(h));
        }
        printf("\n");
    }

    printf("\n2. cublasLt's heuristics (mask: the split-K reductions allowed, 7 any, 1 in place, "
           "0 none)\n");
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    const size_t limits[6] = {8ull << 20, 16ull << 20, 24ull << 20,
                              32ull << 20, 32ull << 20, 32ull << 20};
    const uint32_t masks[6] = {7, 7, 7, 7, 1, 0};
    const size_t buf = 16ull << 20;
    for (const Shape &g : shapes) {
        printf("%s\n", g.name);
        for (int v = 0; v < 6; ++v) {
            cublasLtMatmulDesc_t md;
            CK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
            const cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
            CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            cublasLtMatrixLayout_t la, lb, lc;
            CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, g.N, g.K, g.ldb));
            CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, g.M, g.K, g.lda));
            CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, g.N, g.M, g.N));
            cublasLtMatmulPreference_t pr;
            CK(cublasLtMatmulPreferenceCreate(&pr));
            CK(cublasLtMatmulPreferenceSetAttribute(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &limits[v], sizeof limits[v]));
            if (masks[v] != 7)
                CK(cublasLtMatmulPreferenceSetAttribute(
                    pr, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &masks[v], sizeof masks[v]));
            cublasLtMatmulHeuristicResult_t res[8];
            int n = 0;
            CK(cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pr, 8, res, &n));
            printf("  limit %2zu MiB mask %u: %d results:", limits[v] >> 20, masks[v], n);
            for (int i = 0; i < n && i < 4; ++i) {
                int id = -1, tile = -1, splitk = -1, red = -1;
                size_t w;
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id,
                                                     sizeof id, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                     &tile, sizeof tile, &w);
                cublasLtMatmulAlgoConfigGetAttribute(
                    &res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo,
                                                     CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                                     sizeof red, &w);
                float us = -1;
                if (res[i].workspaceSize <= buf)
                    us = time_us([&] {
                        CK(cublasLtMatmul(lt, md, &al, B, la, A, lb, &be, C, lc, C, lc,
                                          &res[i].algo, ws, buf, stream));
                    });
                printf("  [id %d tile %d splitk %d red %d ws %.2f MiB: %.2f us]", id, tile, splitk,
                       red, res[i].workspaceSize / 1048576.0, us);
            }
            printf("\n");
            CK(cublasLtMatmulPreferenceDestroy(pr));
            CK(cublasLtMatrixLayoutDestroy(la));
            CK(cublasLtMatrixLayoutDestroy(lb));
            CK(cublasLtMatrixLayoutDestroy(lc));
            CK(cublasLtMatmulDescDestroy(md));
        }
    }
    return 0;
}
