// cublasLt's heuristics for the step's weight-gradient shapes: the first four algorithms for a
// workspace limit of 8, 16, 24 and 32 MiB (and at 32 MiB with split-K reduced in place only, or
// not split), what workspace each needs, and its time on a 16 MiB buffer (-1: it does not fit).
// Not part of the library. Result: bench/results/h200-2026-12-03-gemm-lt-probes.txt.
//     nvcc -O2 -arch=sm_90 cublaslt_heuristics.cu -lcublasLt -lcublas && ./a.out
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("err %d at %s:%d\n", (int)e_, __FILE__, __LINE__); exit(1);} } while (0)
struct Shape { const char *name; int M, N, K, lda, ldb; };
int main() {
  std::vector<Shape> sh = {
    {"dV (128x256,K=16384, A ld 512)", 128, 256, 16384, 512, 256},
    {"dW2 (256x256,K=16384)", 256, 256, 16384, 256, 256},
    {"IQL dW (128x128,K=16384)", 128, 128, 16384, 128, 128},
    {"IQN dWm (128x128,K=131072)", 128, 128, 131072, 128, 128},
    {"CQL dU (8x128,K=16384)", 8, 128, 16384, 8, 128},
  };
  float *A, *B, *C; void *ws;
  CK(cudaMalloc(&A, 131072ull * 512 * 4)); CK(cudaMalloc(&B, 131072ull * 256 * 4));
  CK(cudaMalloc(&C, 256 * 256 * 4)); CK(cudaMalloc(&ws, 64ull << 20));
  CK(cudaMemset(A, 0, 131072ull * 512 * 4)); CK(cudaMemset(B, 0, 131072ull * 256 * 4));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  for (auto &g : sh) {
    printf("%s\n", g.name);
    for (int variant = 0; variant < 6; ++variant) {
      const size_t lims[6] = {8ull << 20, 16ull << 20, 24ull << 20, 32ull << 20, 32ull << 20, 32ull << 20};
      const uint32_t masks[6] = {7, 7, 7, 7, 1, 0};  // 1 = INPLACE only (with NONE), 0 = NONE only
      const size_t lim = lims[variant]; const uint32_t mask = masks[variant];
      cublasLtMatmulDesc_t md; CK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
      cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
      CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, g.N, g.K, g.ldb));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, g.M, g.K, g.lda));
      CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, g.N, g.M, g.N));
      cublasLtMatmulPreference_t pr; CK(cublasLtMatmulPreferenceCreate(&pr));
      CK(cublasLtMatmulPreferenceSetAttribute(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lim, sizeof lim));
      if (mask != 7) CK(cublasLtMatmulPreferenceSetAttribute(pr, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof mask));
      cublasLtMatmulHeuristicResult_t res[8]; int n = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pr, 8, res, &n));
      printf("  limit %2zu MiB mask %u: %d results:", lim >> 20, mask, n);
      for (int i = 0; i < n && i < 4; ++i) {
        int id = -1, tile = -1, sk = -1, red = -1; size_t w;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &w);
        // time it on a 16 MiB buffer if it fits
        const float al = 1, be = 0;
        float us = -1;
        size_t buf = 16ull << 20;
        if (res[i].workspaceSize <= buf) {
          auto call = [&] { CK(cublasLtMatmul(lt, md, &al, B, la, A, lb, &be, C, lc, C, lc, &res[i].algo, ws, buf, s)); };
          call(); CK(cudaStreamSynchronize(s));
          cudaGraph_t gr; cudaGraphExec_t ge;
          CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (int r = 0; r < 20; ++r) call();
          CK(cudaStreamEndCapture(s, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0));
          CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
          float best = 1e30f;
          for (int r = 0; r < 5; ++r) {
            CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (ms < best) best = ms;
          }
          us = best * 1000.f / 20;
          CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(gr));
        }
        printf("  [id %d tile %d splitk %d red %d ws %.2f MiB: %.2f us]", id, tile, sk, red,
               res[i].workspaceSize / 1048576.0, us);
      }
      printf("\n");
      cublasLtMatmulPreferenceDestroy(pr); cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(md);
    }
  }
  return 0;
}
