// pre = x Wᵀ + b, act = SiLU(pre) in one kernel (cuda/linear_silu.hpp): TF32 mma.sync m16n8k8
// (cuda/mma_tf32.cuh) with the bias and SiLU applied to the accumulators before they are stored.
//
// Tiling. A block of 8 warps computes a [BM, 128] tile of C, BM = 2·WM (WM = 64 or 32); the
// warps form a 2 × 4 grid of [WM, 32] warp tiles, each WM/16 × 4 accumulator fragments in
// registers. k runs in steps of 32 through a three-stage cp.async ring in shared memory: while
// the warps multiply step k, the loads of steps k+1 and k+2 are in flight. A and W are both
// k-contiguous ("nt"), so a tile of either is 32-float rows, stored with a stride of 36 floats:
// the fragment loads (8 rows × 4 consecutive k) then hit 32 different banks, and each row stays
// 16-byte aligned for cp.async. Rows past M or N and k past K are zero-filled by cp.async
// (src-size 0), so edge tiles need no other check until the epilogue's stores.
//
// Why: at the step's widths (N = 128 or 256, K ≤ 256, M = B or 2B rows) the GEMM is short and
// the separate bias + SiLU pass of the cuBLAS path moves as many bytes as the GEMM itself (it
// reads the product and writes pre and act). Here the product never reaches memory. WM = 32
// halves the tile when WM = 64 would leave SMs idle (a grid under one wave of two blocks per SM).
// Blocks walk the N tiles of one row band together (blockIdx.x), so A's band is read from HBM
// once and from L2 for its other N tiles.
//
// Sums: each output is Σ_k in increasing k, one k-step of 32 (four mma k-steps of 8) at a time,
// the same order on every run; no atomics.
#include "linear_silu.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "aux_common.cuh"
#include "common.hpp"
#include "device_math.cuh"
#include "mma_tf32.cuh"
#include "nn.cuh"

namespace fh::cuda {

namespace {

constexpr int kBN = 128, kWarps = 8;

// A kernel's shape: warp tile WM × 32, k-step BK, STAGES-deep ring, MINB blocks per SM.
template <int WM_, int BK_, int STAGES_, int MINB_>
struct Cfg {
    static constexpr int WM = WM_, BK = BK_, STAGES = STAGES_, MINB = MINB_;
    static constexpr int BM = 2 * WM, LD = BK + 4, STAGE = (BM + kBN) * LD;
    static constexpr size_t smem() { return (size_t)STAGES * STAGE * sizeof(float); }
};

__device__ __forceinline__ void cp_async16(float *dst, const float *src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// rows [r0, r0 + R) of a k-contiguous [rows, K] matrix, k in [k0, k0 + BK), into s (stride LD).
template <int R, int BK, int LD>
__device__ __forceinline__ void load_tile(float *s, const float *__restrict__ g, int rows, int K,
                                          int r0, int k0) {
    constexpr int Q = BK / 4;
#pragma unroll
    for (int c = threadIdx.x; c < R * Q; c += kWarps * 32) {
        const int r = c / Q, q = c % Q, gr = r0 + r, gk = k0 + 4 * q;
        const bool ok = gr < rows && gk < K;
        cp_async16(s + r * LD + 4 * q, ok ? g + (size_t)gr * K + gk : g, ok);
    }
}

// Four 8 × 8 b16 matrices = four [8 rows, 4 floats] blocks, each lane's own row address: lane
// (g, t) = (l / 4, l % 4) receives float (g, t) of block k in r_k, i.e. exactly an m16n8k8
// fragment element (mma_tf32.cuh's table), rounded to TF32 here (round to nearest).
__device__ __forceinline__ void ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                        const float *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
    r0 = mma::to_tf32(__uint_as_float(r0));
    r1 = mma::to_tf32(__uint_as_float(r1));
    r2 = mma::to_tf32(__uint_as_float(r2));
    r3 = mma::to_tf32(__uint_as_float(r3));
}

// SiLU(z) = z / (1 + e^−z) with the fast exponential and division (a few float32 ulps from
// dev_silu; TF32 mode only, whose products are 2^−11 relative): the precise one costs the
// epilogue as many instructions as the products.
__device__ __forceinline__ float fast_silu(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

template <class C>
__global__ void __launch_bounds__(kWarps * 32, C::MINB)
k_linear_silu(int M, int N, int K, const float *__restrict__ A, const float *__restrict__ W,
              const float *__restrict__ bias, float *__restrict__ pre, float *__restrict__ act) {
    constexpr int WM = C::WM, BM = C::BM, MI = WM / 16, NI = 4, STAGE = C::STAGE;
    constexpr int kBK = C::BK, kLD = C::LD, kStages = C::STAGES;
    extern __shared__ float4 sm4[];
    float *sm = reinterpret_cast<float *>(sm4);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kBN;
    const int ktiles = (K + kBK - 1) / kBK;

    auto load = [&](int kt) {
        float *As = sm + (kt % kStages) * STAGE, *Bs = As + BM * kLD;
        load_tile<BM, kBK, kLD>(As, A, M, K, m0, kt * kBK);
        load_tile<kBN, kBK, kLD>(Bs, W, N, K, n0, kt * kBK);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < ktiles) load(s);
        cp_async_commit();
    }

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // step kt has landed for every thread; step kt − 1's stage is free
        if (kt + kStages - 1 < ktiles) load(kt + kStages - 1);
        cp_async_commit();
        // ldmatrix addresses: lane l supplies row l % 8 of 8 × 8 b16 matrix l / 8 (4 floats).
        const int r8 = lane & 7, mat = lane >> 3;
        const float *As = sm + (kt % kStages) * STAGE + (wm * WM + r8 + 8 * (mat & 1)) * kLD +
                          4 * (mat >> 1);
        const float *Bs = sm + (kt % kStages) * STAGE + BM * kLD +
                          (wn * 32 + r8 + 8 * (mat >> 1)) * kLD + 4 * (mat & 1);
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 8) {
            uint32_t a[MI][4], b[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3], As + i * 16 * kLD + kk);
#pragma unroll
            for (int j = 0; j < NI; j += 2)
                ldsm_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], Bs + j * 8 * kLD + kk);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma::mma1(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: c0, c1 are row gi, columns 2tq and 2tq + 1 of the fragment; c2, c3 row gi + 8.
    const bool pairs = (N & 1) == 0;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
        const int col = n0 + wn * 32 + j * 8 + 2 * tq;
        if (col >= N) continue;
        const bool two = col + 1 < N;
        const float b0 = __ldg(bias + col), b1 = two ? __ldg(bias + col + 1) : 0.0f;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * WM + i * 16 + gi + 8 * h;
                if (row >= M) continue;
                const float z0 = __fadd_rn(acc[i][j][2 * h], b0);
                const float z1 = __fadd_rn(acc[i][j][2 * h + 1], b1);
                const size_t o = (size_t)row * N + col;
                if (pairs) {
                    if (pre) *reinterpret_cast<float2 *>(pre + o) = make_float2(z0, z1);
                    *reinterpret_cast<float2 *>(act + o) = make_float2(fast_silu(z0), fast_silu(z1));
                } else {
                    if (pre) pre[o] = z0;
                    act[o] = fast_silu(z0);
                    if (two) {
                        if (pre) pre[o + 1] = z1;
                        act[o + 1] = fast_silu(z1);
                    }
                }
            }
    }
}

// FOXHUNT_LINEAR: 0 for "cublas"; 1 for "auto" and "fused" (the same: fused where it applies);
// 2, 3 for the trial shapes "fused-v2", "fused-v3".
int variant() {
    const char *e = getenv("FOXHUNT_LINEAR");
    if (!e || !*e || !strcmp(e, "auto") || !strcmp(e, "fused")) return 1;
    if (!strcmp(e, "cublas")) return 0;
    if (!strcmp(e, "fused-v2")) return 2;
    if (!strcmp(e, "fused-v3")) return 3;
    fail(FH_ERR_BAD_VALUE, "FOXHUNT_LINEAR='%s': expected auto, fused or cublas", e);
}

// cudaFuncSetAttribute once per device and kernel (a process may drive several devices).
template <class C>
void allow_once() {
    static std::atomic<uint64_t> done{0};
    int dev = 0;
    FH_CUDA(cudaGetDevice(&dev));
    const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
    if (bit && (done.load() & bit)) return;
    aux::allow_smem((const void *)k_linear_silu<C>, C::smem(), "fused linear + SiLU");
    done.fetch_or(bit);
}

template <class C>
void launch(int M, int N, int K, const float *A, const float *W, const float *b, float *pre,
            float *act, cudaStream_t s) {
    allow_once<C>();
    const dim3 grid((unsigned)((N + kBN - 1) / kBN), (unsigned)((M + C::BM - 1) / C::BM));
    k_linear_silu<C><<<grid, kWarps * 32, C::smem(), s>>>(M, N, K, A, W, b, pre, act);
    FH_LAUNCHED("k_linear_silu");
}

}  // namespace

bool linear_silu_fused(const Blas &bl, int K, const float *A, const float *W) {
    return variant() != 0 && bl.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && !bl.bf16_stage &&
           K % 4 == 0 && (uintptr_t)A % 16 == 0 && (uintptr_t)W % 16 == 0;
}

void linear_silu(const Blas &bl, int M, int N, int K, const float *A, const float *W,
                 const float *b, float *pre, float *act, const char *what) {
    cudaStream_t s = nullptr;
    FH_CUBLAS(cublasGetStream(bl.handle, &s));
    if (!linear_silu_fused(bl, K, A, W)) {
        float *z = pre ? pre : act;  // without pre, the product and then SiLU in act's buffer
        gemm_nt(bl, M, N, K, A, W, z, 0.0f, what);
        bias_silu(z, act, b, (size_t)M, N, s);
        return;
    }
    if (M <= 0 || N <= 0) return;
    if (pre == act) pre = nullptr;  // in place (forward-only passes): act alone; no aliasing
    // WM = 64 unless that grid fills less than 3/4 of one wave of two blocks per SM.
    const long long big = (long long)((N + kBN - 1) / kBN) * ((M + 127) / 128);
    const int v = variant();
    if (v == 2)
        launch<Cfg<32, 16, 4, 3>>(M, N, K, A, W, b, pre, act, s);
    else if (v == 3)
        launch<Cfg<32, 32, 3, 2>>(M, N, K, A, W, b, pre, act, s);
    else if (4 * big >= 3 * 2LL * sm_count())
        launch<Cfg<64, 32, 3, 2>>(M, N, K, A, W, b, pre, act, s);
    else
        launch<Cfg<32, 32, 3, 2>>(M, N, K, A, W, b, pre, act, s);
}

}  // namespace fh::cuda
