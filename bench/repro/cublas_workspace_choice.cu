// cublasGemmEx (TF32) time of the step's weight-gradient shapes (K = B rows, small outputs)
// against the handle's workspace size: on the H200 (cuBLAS 13.1) every one of them is 1.5 to 2.7
// times slower below 32 MiB, the reason cuda/gemm.cpp asks cublasLt's heuristics as for 32 MiB.
// Not part of the library. Result: bench/results/h200-2026-12-03-gemm-lt-probes.txt.
//     nvcc -O2 -arch=sm_90 cublas_workspace_choice.cu -lcublas && ./a.out
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("err %d at %s:%d\n", (int)e_, __FILE__, __LINE__); exit(1);} } while (0)
struct Shape { const char *name; int M, N, K, lda, ldb; };
int main() {
  std::vector<Shape> sh = {
    {"dV (128x256,K=16384, A ld 512)", 128, 256, 16384, 512, 256},
    {"dW2 (256x256,K=16384)", 256, 256, 16384, 256, 256},
    {"dW1 (256x128,K=16384)", 256, 128, 16384, 256, 128},
    {"IQL dW (128x128,K=16384)", 128, 128, 16384, 128, 128},
    {"IQN dWm (128x128,K=131072)", 128, 128, 131072, 128, 128},
    {"IQN dWphi (128x64,K=131072)", 128, 64, 131072, 128, 64},
    {"CQL dU (8x128,K=16384)", 8, 128, 16384, 8, 128},
    {"attn dWo (64x64,K=16384)", 64, 64, 16384, 64, 64},
  };
  size_t wss[] = {4, 8, 12, 16, 20, 24, 32, 64};
  float *A, *B, *C; void *ws;
  CK(cudaMalloc(&A, 131072ull * 512 * 4)); CK(cudaMalloc(&B, 131072ull * 256 * 4));
  CK(cudaMalloc(&C, 256 * 256 * 4)); CK(cudaMalloc(&ws, 64ull << 20));
  CK(cudaMemset(A, 0, 131072ull * 512 * 4)); CK(cudaMemset(B, 0, 131072ull * 256 * 4));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  printf("%-34s", "shape \\ workspace MiB");
  for (size_t w : wss) printf(" %7zu", w);
  printf("   (us per GEMM, graph of 20)\n");
  for (auto &g : sh) {
    printf("%-34s", g.name);
    for (size_t w : wss) {
      cublasHandle_t h; CK(cublasCreate(&h)); CK(cublasSetStream(h, s));
      CK(cublasSetWorkspace(h, ws, w << 20));
      CK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
      CK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
      const float al = 1, be = 0;
      auto call = [&] {
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, g.N, g.M, g.K, &al, B, CUDA_R_32F, g.ldb, A,
                        CUDA_R_32F, g.lda, &be, C, CUDA_R_32F, g.N, CUBLAS_COMPUTE_32F_FAST_TF32,
                        CUBLAS_GEMM_DEFAULT));
      };
      call(); CK(cudaStreamSynchronize(s));
      cudaGraph_t gr; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < 20; ++i) call();
      CK(cudaStreamEndCapture(s, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0));
      CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
      float best = 1e30f;
      for (int r = 0; r < 5; ++r) {
        CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
      }
      printf(" %7.2f", best * 1000.f / 20);
      CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(gr)); CK(cublasDestroy(h));
    }
    printf("\n");
  }
  return 0;
}
