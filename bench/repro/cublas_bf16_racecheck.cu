// cuBLAS alone under compute-sanitizer racecheck: bfloat16 GEMMs with a float32 C and
// CUBLAS_COMPUTE_32F (the calls of FH_MATH_BF16, cuda/gemm_bf16.cu), over the small shapes of the
// BF16 sanitize config, and no other code. In test_cuda_sanitize's BF16 config racecheck reports
// hazards inside cuBLAS's nvjet_sm90_tss_* kernels; this program shows whether cuBLAS raises them
// by itself (bench/results/h200-2026-12-01-racecheck-cublas-bf16.txt).
//   nvcc -arch=sm_90 -o cublas_bf16_racecheck cublas_bf16_racecheck.cu -lcublas
//   compute-sanitizer --tool racecheck --print-limit 100 ./cublas_bf16_racecheck
// Each GEMM is named before it is launched and synchronised after, so a hazard line printed
// between two names belongs to the first.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdio>

#define CK(call)                                                     \
    do {                                                             \
        if ((call) != 0) {                                           \
            fprintf(stderr, "[REPRO] %s failed\n", #call);           \
            return 1;                                                \
        }                                                            \
    } while (0)

int main() {
    cublasHandle_t h;
    CK(cublasCreate(&h));
    void *ws;
    CK(cudaMalloc(&ws, 32 << 20));
    CK(cublasSetWorkspace(h, ws, 32 << 20));
    CK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
    const int S = 2048 * 256;  // elements of each operand buffer: the largest m·k, k·n, m·n
    __nv_bfloat16 *a, *b;
    float *c;
    CK(cudaMalloc(&a, S * 2));
    CK(cudaMalloc(&b, S * 2));
    CK(cudaMalloc(&c, S * 4));
    CK(cudaMemset(a, 0, S * 2));
    CK(cudaMemset(b, 0, S * 2));
    const float one = 1, zero = 0;
    const int ms[] = {8, 9, 64, 128, 256}, ks[] = {64, 128, 256, 2048};
    const cublasOperation_t ops[3][2] = {{CUBLAS_OP_N, CUBLAS_OP_T}, {CUBLAS_OP_T, CUBLAS_OP_N},
                                         {CUBLAS_OP_N, CUBLAS_OP_N}};
    for (auto &op : ops)
        for (int m : ms)
            for (int n : ms)
                for (int k : ks) {
                    int lda = op[0] == CUBLAS_OP_N ? m : k, ldb = op[1] == CUBLAS_OP_N ? k : n;
                    fprintf(stderr, "[REPRO] %c%c m=%d n=%d k=%d\n", op[0] == CUBLAS_OP_N ? 'N' : 'T',
                            op[1] == CUBLAS_OP_N ? 'N' : 'T', m, n, k);
                    cublasStatus_t s = cublasGemmEx(h, op[0], op[1], m, n, k, &one, a, CUDA_R_16BF,
                                                    lda, b, CUDA_R_16BF, ldb, &zero, c, CUDA_R_32F,
                                                    m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                    cudaError_t e = cudaDeviceSynchronize();
                    if (s != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
                        fprintf(stderr, "[REPRO] failed: cublas %d, cuda %d\n", (int)s, (int)e);
                        return 1;
                    }
                }
    cublasDestroy(h);
    return 0;
}
