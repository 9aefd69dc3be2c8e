// Whether cublasLt's BGRADB epilogue could take the bias gradients' column sums off our kernels:
// it writes db = the column sums of the GEMM's B operand over k beside C. On the step's
// weight-gradient shapes dW = dy^T x (row-major dy [K, M], x [K, N]; cuBLAS (N, T), m = N,
// n = M, k = K, B operand = dy, as cuda/gemm.hpp's tn), with and without the epilogue: the
// heuristics' count, the time of each (CUDA events, the heuristics' first algorithm with a 32 MiB
// workspace), db against a float64 column sum, whether db and C repeat bitwise and whether C
// equals the plain GEMM's C bitwise. Run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90 bench/repro/cublaslt_bgradb.cu -lcublasLt -o /tmp/bgradb
//   /tmp/bgradb
// (bench/results/h100-2026-12-06-bgradb-probe.txt: slower by 5 to 94 us per GEMM, more than the
// column-sum pass it would replace; docs/cuda.md, Findings).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#define CK(x)                                                     \
    do {                                                          \
        auto e = (x);                                             \
        if ((int)e != 0) {                                        \
            printf("ERR %s:%d %d\n", __FILE__, __LINE__, (int)e); \
            return 1;                                             \
        }                                                         \
    } while (0)

struct Shape {
    int M, N, K;
    const char *name;
};

template <class T>
cudaDataType_t dt();
template <>
cudaDataType_t dt<float>() {
    return CUDA_R_32F;
}
template <>
cudaDataType_t dt<__nv_bfloat16>() {
    return CUDA_R_16BF;
}

template <class T>
int run(cublasLtHandle_t lt, Shape sh, cublasComputeType_t comp, const char *mode, void *ws,
        size_t wsb, cudaStream_t st) {
    const int M = sh.M, N = sh.N, K = sh.K;
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd;
    std::vector<T> hdy((size_t)K * M), hx((size_t)K * N);
    std::vector<double> ref(M, 0.0), refabs(M, 0.0);
    for (size_t i = 0; i < hdy.size(); ++i) hdy[i] = (T)(nd(rng) * 0.01f);
    for (size_t i = 0; i < hx.size(); ++i) hx[i] = (T)nd(rng);
    for (int r = 0; r < K; ++r)
        for (int j = 0; j < M; ++j) {
            double v = (double)(float)hdy[(size_t)r * M + j];
            ref[j] += v;
            refabs[j] += fabs(v);
        }
    T *dy, *x;
    float *C0, *C1, *bias, *bias2, *C2;
    CK(cudaMalloc(&dy, hdy.size() * sizeof(T)));
    CK(cudaMalloc(&x, hx.size() * sizeof(T)));
    CK(cudaMalloc(&C0, (size_t)M * N * 4));
    CK(cudaMalloc(&C1, (size_t)M * N * 4));
    CK(cudaMalloc(&C2, (size_t)M * N * 4));
    CK(cudaMalloc(&bias, M * 4));
    CK(cudaMalloc(&bias2, M * 4));
    CK(cudaMemcpy(dy, hdy.data(), hdy.size() * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, hx.data(), hx.size() * sizeof(T), cudaMemcpyHostToDevice));
    cublasOperation_t opa = CUBLAS_OP_N, opb = CUBLAS_OP_T;
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, dt<T>(), N, K, N));  // x col-major [N, K]
    CK(cublasLtMatrixLayoutCreate(&lb, dt<T>(), M, K, M));  // dy col-major [M, K], op T
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N));
    float ms[2] = {0, 0};
    int nres[2] = {0, 0};
    char check[256] = "";
    for (int e = 0; e < 2; ++e) {
        cublasLtMatmulDesc_t op;
        CK(cublasLtMatmulDescCreate(&op, comp, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
        if (e == 1) {
            cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BGRADB;
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
            cudaDataType_t bt = CUDA_R_32F;
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                              sizeof bt));
        }
        cublasLtMatmulPreference_t pref;
        CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &wsb, sizeof wsb));
        cublasLtMatmulHeuristicResult_t res[8];
        int n = 0;
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &n);
        nres[e] = (s == CUBLAS_STATUS_SUCCESS) ? n : -(int)s;
        if (s != CUBLAS_STATUS_SUCCESS || n == 0) {
            printf("  %s %s e=%d heuristic status %d n %d\n", sh.name, mode, e, (int)s, n);
            continue;
        }
        float alpha = 1.0f, beta = 0.0f;
        float *C = e ? C1 : C0;
        auto go = [&](float *b_out, float *Cx) {
            if (e)
                cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b_out,
                                               sizeof b_out);
            return cublasLtMatmul(lt, op, &alpha, x, la, dy, lb, &beta, Cx, lc, Cx, lc,
                                  &res[0].algo, ws, wsb, st);
        };
        CK(go(bias, C));
        CK(cudaStreamSynchronize(st));
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        for (int w = 0; w < 5; ++w) CK(go(bias2, C2));
        cudaEventRecord(a, st);
        const int reps = 50;
        for (int w = 0; w < reps; ++w) CK(go(bias2, C2));
        cudaEventRecord(b, st);
        CK(cudaEventSynchronize(b));
        cudaEventElapsedTime(&ms[e], a, b);
        ms[e] /= reps;
        if (e == 1) {
            std::vector<float> hb(M), hb2(M), hc0((size_t)M * N), hc1((size_t)M * N),
                hc2((size_t)M * N);
            CK(cudaMemcpy(hb.data(), bias, M * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hb2.data(), bias2, M * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hc0.data(), C0, hc0.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hc1.data(), C1, hc1.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hc2.data(), C2, hc2.size() * 4, cudaMemcpyDeviceToHost));
            double worst = 0, worst_rel_abs = 0;
            for (int j = 0; j < M; ++j) {
                double err = fabs((double)hb[j] - ref[j]);
                worst = fmax(worst, err / fmax(fabs(ref[j]), 1e-30));
                worst_rel_abs = fmax(worst_rel_abs, err / refabs[j]);
            }
            bool brep = !memcmp(hb.data(), hb2.data(), M * 4);
            bool crep = !memcmp(hc1.data(), hc2.data(), hc1.size() * 4);
            bool csame = !memcmp(hc0.data(), hc1.data(), hc1.size() * 4);
            snprintf(check, sizeof check,
                     "    bias err/|sum| %.3e  err/sum|.| %.3e  bias repeat %d  C repeat %d  "
                     "C == plain C %d\n",
                     worst, worst_rel_abs, brep, crep, csame);
        }
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatmulDescDestroy(op);
    }
    printf("%-14s %-5s M=%4d N=%4d K=%6d  plain %7.2f us (%d algos)  BGRADB %7.2f us (%d algos)\n",
           sh.name, mode, M, N, K, ms[0] * 1e3, nres[0], ms[1] * 1e3, nres[1]);
    printf("%s", check);
    cudaFree(dy);
    cudaFree(x);
    cudaFree(C0);
    cudaFree(C1);
    cudaFree(C2);
    cudaFree(bias);
    cudaFree(bias2);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    return 0;
}

int main() {
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    size_t wsb = size_t{32} << 20;
    void *ws;
    CK(cudaMalloc(&ws, wsb));
    Shape shapes[] = {{256, 256, 16384, "trunk256"}, {128, 256, 16384, "branch128x256"},
                      {64, 128, 16384, "64x128"},    {64, 64, 16384, "64x64"},
                      {128, 128, 131072, "iqn_dWm"}, {128, 64, 131072, "iqn_dWphi"}};
    for (auto &s : shapes) {
        run<float>(lt, s, CUBLAS_COMPUTE_32F_FAST_TF32, "tf32", ws, wsb, st);
        run<float>(lt, s, CUBLAS_COMPUTE_32F, "fp32", ws, wsb, st);
        run<__nv_bfloat16>(lt, s, CUBLAS_COMPUTE_32F, "bf16", ws, wsb, st);
    }
    return 0;
}
