// Device functions shared by every kernel of the CUDA backend (the tasks and the auxiliary
// learners): the activations, the Huber loss, the first-index argmax, warp and column-tile sums
// and the Adam update of one element, each bit for bit the float expression of the CPU
// reference (src/cpu/nn.hpp, nn.cpp).
//
// Float expressions that the CPU evaluates in a given order are written with __fmul_rn /
// __fadd_rn / __fdiv_rn so that nvcc cannot contract them into FMAs.
#pragma once
#include <cuda_runtime.h>

namespace fh::cuda {

__device__ __forceinline__ float dev_sigmoid(float z) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}
__device__ __forceinline__ float dev_silu(float z) { return __fmul_rn(z, dev_sigmoid(z)); }
// SiLU'(z) from its sigmoid s: s (1 + z (1 − s)).
__device__ __forceinline__ float dev_dsilu_s(float z, float s) {
    return __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(z, __fadd_rn(1.0f, -s))));
}
__device__ __forceinline__ float dev_dsilu(float z) { return dev_dsilu_s(z, dev_sigmoid(z)); }
__device__ __forceinline__ float dev_softplus(float z) {
    return z > 0 ? __fadd_rn(z, log1pf(expf(-z))) : log1pf(expf(z));
}
// Huber(u; κ) (Huber 1964) and its derivative in u.
__device__ __forceinline__ float dev_huber(float u, float k) {
    const float a = fabsf(u);
    return a <= k ? __fmul_rn(__fmul_rn(0.5f, u), u)
                  : __fmul_rn(k, __fadd_rn(a, -__fmul_rn(0.5f, k)));
}
__device__ __forceinline__ float dev_dhuber(float u, float k) {
    return fabsf(u) <= k ? u : (u > 0.0f ? k : -k);
}

// The first index of the largest of row[0..A) (SPEC's argmax: ties go to the lowest index).
__device__ __forceinline__ int dev_first_argmax(const float *row, int A) {
    int best = 0;
    for (int a = 1; a < A; ++a)
        if (row[a] > row[best]) best = a;
    return best;
}

// Butterfly sums over groups of W consecutive lanes (W a power of two, the full warp by
// default): every lane of a group ends with the same bits (a + b == b + a exactly, level by
// level), so the result does not depend on which lane reads it.
template <int W = 32, class T>
__device__ __forceinline__ T warp_sum(T v) {
    static_assert(W >= 1 && W <= 32 && (W & (W - 1)) == 0, "a power-of-two group of lanes");
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The fixed tree over sh[0 .. width) (width a power of two, at least 32; the values written and
// a barrier passed): level w = width/2, ..., 1 adds value t + w into value t for t < w. The
// levels w ≥ 32 go through shared memory, the last five through warp 0's shuffles (lane t takes
// lane t + w: the same pairs, so the same bits with five barriers fewer). The sum lands in
// sh[at], visible to the block after the barrier at the end.
__device__ __forceinline__ void tree_sum(double *sh, int width, int at) {
    const int t = threadIdx.x;
    for (int w = width / 2; w >= 32; w >>= 1) {
        if (t < w) sh[t] += sh[t + w];
        __syncthreads();
    }
    if (t < 32) {
        double s = sh[t];
#pragma unroll
        for (int w = 16; w > 0; w >>= 1) s += __shfl_down_sync(0xffffffffu, s, w);
        if (t == 0) sh[at] = s;
    }
    __syncthreads();
}

// Fixed-order tree sum of one double per thread over the block (tree_sum's order; blockDim.x a
// power of two, at least 32); `sh` holds blockDim.x doubles. Every thread gets the sum.
__device__ __forceinline__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    tree_sum(sh, blockDim.x, 0);
    const double r = sh[0];
    __syncthreads();
    return r;
}

// Σ x[0..n) as a block of WIDTH threads forms it with block_sum (thread t: 0 + x[t] +
// x[t + WIDTH] + ..., then the tree: level w = WIDTH/2, ..., 1 adds value t + w into value t
// for t < w), on a block of BLOCK threads (powers of two, 32 ≤ BLOCK ≤ WIDTH), with the same
// double additions in the same order: thread t keeps the WIDTH / BLOCK values t, t + BLOCK, ...
// and adds the levels w ≥ BLOCK in registers, the levels below BLOCK by tree_sum. So k_adam
// finishes the global norm on its own blocks with k_reduce_final's bits (WIDTH =
// kRedFinalThreads), and k_reduce_final runs it with BLOCK = WIDTH: one definition of the order
// for both. blockDim.x must be BLOCK; `sh` holds BLOCK + 1 doubles (the sum in the last, so
// that no barrier is needed before `sh` is written again). Every thread gets the sum.
template <int WIDTH, int BLOCK>
__device__ __forceinline__ double wide_block_sum(const double *x, int n, double *sh) {
    static_assert(BLOCK >= 32 && WIDTH % BLOCK == 0 && (WIDTH & (WIDTH - 1)) == 0 &&
                      (BLOCK & (BLOCK - 1)) == 0,
                  "wide_block_sum: powers of two, 32 <= BLOCK <= WIDTH");
    constexpr int R = WIDTH / BLOCK;
    const int t = threadIdx.x;
    double v[R], first[R];
    // Each value's first term loaded before any is summed, so that the loads are in flight
    // together (a loop per value waited for each in turn); the sums keep their order.
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int i = t + r * BLOCK;
        first[r] = i < n ? x[i] : 0.0;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        v[r] = 0;
        const int i0 = t + r * BLOCK;
        if (i0 < n) v[r] += first[r];
        for (int i = i0 + WIDTH; i < n; i += WIDTH) v[r] += x[i];
    }
#pragma unroll
    for (int w = WIDTH / 2; w >= BLOCK; w >>= 1)
#pragma unroll
        for (int r = 0; r < w / BLOCK; ++r) v[r] += v[r + w / BLOCK];
    sh[t] = v[0];
    __syncthreads();
    tree_sum(sh, BLOCK, BLOCK);
    return sh[BLOCK];
}

// The end of a column-parallel block of TY row lanes × (up to W) columns, thread (x, y) holding
// `acc`, its partial sum over some rows of column x: returns Σ_y acc in y order to the threads
// of lane y = 0 (others get 0). The fixed order makes the column sums the same bits run to run.
// (W is the column count plus one: the padding keeps the lanes off each other's banks.)
template <int TY, int W>
__device__ __forceinline__ double tile_col_sum(double (&sh)[TY][W], double acc) {
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.y == 0)
        for (int y = 0; y < TY; ++y) s += sh[y][threadIdx.x];
    return s;
}

// Adam (Kingma & Ba 2015, Algorithm 1; SPEC §5.6) on one element, as src/cpu/nn.cpp adam():
// g is the (already clip-scaled) gradient, ob1 = 1 − β1, ob2 = 1 − β2, bc1 = 1 − β1^t,
// bc2 = 1 − β2^t.
__device__ __forceinline__ void adam_update(float &p, float &m, float &v, float g, float lr,
                                            float beta1, float beta2, float ob1, float ob2,
                                            float bc1, float bc2, float eps) {
    const float mi = __fadd_rn(__fmul_rn(beta1, m), __fmul_rn(ob1, g));
    const float vi = __fadd_rn(__fmul_rn(beta2, v), __fmul_rn(__fmul_rn(ob2, g), g));
    m = mi;
    v = vi;
    const float num = __fmul_rn(lr, __fdiv_rn(mi, bc1));
    const float den = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, bc2)), eps);
    p = __fadd_rn(p, -__fdiv_rn(num, den));
}

}  // namespace fh::cuda
