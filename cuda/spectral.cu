// SPEC §5.2 on the GPU: spectral normalisation (Miyato et al. 2018) as src/cpu/spectral.cpp:
// one power iteration per step on the persistent u (sums in double, in a fixed order), σ and
// σ̄ of the target with the same u, v, the effective weights W/σ and W̄/σ̄, and the backward's
// correction (dWsn − ⟨dWsn, Wsn⟩ u vᵀ)/σ (sn_backward, run by td.cu's backward_trunk). act()
// reuses the iteration on a scratch u.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "memory_plan.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

__device__ void normalize_block(float *x, int n, double *sh) {
    double acc = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) acc += (double)x[j] * x[j];
    const double ss = block_sum(acc, sh);
    const float norm = fmaxf((float)sqrt(ss), 1e-12f);
    for (int j = threadIdx.x; j < n; j += blockDim.x) x[j] = __fdiv_rn(x[j], norm);
    __syncthreads();
}

// The power iteration in four kernels, so that the matrix passes spread over many SMs (one
// block of 1024 threads did it all before: 0.052 → 0.027 ms for the spectral child at the
// default config, bench/results/h200-2026-12-01-power-iteration-before-after.json). The sums
// keep that kernel's order (the same row groups, per-thread orders and block sums):
//   k_power_cols   grid (column tiles, G): part[g][j] = Σ_{i in row group g} W[i, j] u[i]
//   k_power_v      one block: v = normalize(Σ_g part[g]) (groups in order)
//   k_power_rows   a warp per row: row[i] = (W v)_i, u_out[i] = row[i]; rowt[i] = (Wt v)_i
//   k_power_sigma  one block: u_out = normalize(u_out), sigma = Σ u row, sigma_t = Σ u rowt
// G = min(8, 1024 / cols) row groups when cols <= 1024, else 1; the block sums over 1024
// threads (normalize_block, block_sum) fix their order.
__host__ __device__ inline int power_groups(int cols) {
    return cols <= kPowerBlockThreads ? min(8, kPowerBlockThreads / cols) : 1;
}

__global__ void k_power_cols(const float *W, int rows, int cols, const float *u, double *part) {
    pdl_enter();
    const int j = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y, G = gridDim.y;
    if (j >= cols) return;
    const int rpg = (rows + G - 1) / G, i1 = min(rows, (g + 1) * rpg);
    double acc = 0;
#pragma unroll 8
    for (int i = g * rpg; i < i1; ++i) acc += (double)W[(size_t)i * cols + j] * u[i];
    part[(size_t)g * cols + j] = acc;
}

__global__ void k_power_v(const double *part, int cols, int G, float *v) {
    pdl_enter();
    __shared__ double sh[kPowerBlockThreads];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        double acc = 0;
        for (int k = 0; k < G; ++k) acc += part[(size_t)k * cols + j];
        v[j] = (float)acc;
    }
    __syncthreads();
    normalize_block(v, cols, sh);
}

__global__ void k_power_rows(const float *W, const float *Wt, int rows, int cols,
                             const float *v, double *row, double *rowt, float *u_out) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int i = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    if (i >= rows) return;
    double acc = 0;
#pragma unroll 4
    for (int j = lane; j < cols; j += 32) acc += (double)W[(size_t)i * cols + j] * v[j];
    acc = warp_sum(acc);
    if (lane == 0) {
        row[i] = acc;
        u_out[i] = (float)acc;
    }
    if (!Wt) return;
    double r = 0;
#pragma unroll 4
    for (int j = lane; j < cols; j += 32) r += (double)Wt[(size_t)i * cols + j] * v[j];
    r = warp_sum(r);
    if (lane == 0) rowt[i] = r;
}

__global__ void k_power_sigma(const double *row, const double *rowt, int rows, float *u_out,
                              float *sigma, float *sigma_t) {
    pdl_enter();
    __shared__ double sh[kPowerBlockThreads];
    normalize_block(u_out, rows, sh);
    double acc = 0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) acc += (double)u_out[i] * row[i];
    const double sg = block_sum(acc, sh);
    if (threadIdx.x == 0) *sigma = (float)sg;
    if (!rowt) return;
    acc = 0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) acc += (double)u_out[i] * rowt[i];
    const double st = block_sum(acc, sh);
    if (threadIdx.x == 0) *sigma_t = (float)st;
}

__global__ void k_sn_scale(const float *W, const float *sigma, float *out, const float *Wt,
                           const float *sigma_t, float *out_t, size_t n) {
    pdl_enter();
    const float s = *sigma;
    const float st = Wt ? *sigma_t : 1.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        out[i] = __fdiv_rn(W[i], s);
        if (Wt) out_t[i] = __fdiv_rn(Wt[i], st);
    }
}

__global__ void k_sn_backward(float *dW, const float *ip, const float *u, const float *v,
                              const float *sigma, int rows, int cols) {
    pdl_enter();
    const float p = *ip, s = *sigma;
    const size_t n = (size_t)rows * cols;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / cols, j = k % cols;
        const float corr = __fmul_rn(__fmul_rn(p, u[i]), v[j]);
        dW[k] = __fdiv_rn(__fadd_rn(dW[k], -corr), s);
    }
}

}  // namespace

void power_iteration(const float *W, const float *Wt, int rows, int cols, const float *u_in,
                     float *u_out, float *v, double *scratch, float *sigma, float *sigma_t,
                     cudaStream_t s) {
    double *row = scratch, *rowt = scratch + rows, *part = scratch + 2 * (size_t)rows;
    const int G = power_groups(cols);
    FH_LAUNCH(k_power_cols, dim3((cols + 255) / 256, G), 256, 0, s, W, rows, cols, u_in, part);
    FH_LAUNCH(k_power_v, 1, kPowerBlockThreads, 0, s, part, cols, G, v);
    FH_LAUNCH(k_power_rows, (rows + 7) / 8, 256, 0, s, W, Wt, rows, cols, v, row,
              Wt ? rowt : nullptr, u_out);
    FH_LAUNCH(k_power_sigma, 1, kPowerBlockThreads, 0, s, row, Wt ? rowt : nullptr, rows, u_out,
              sigma, sigma_t);
}

void sn_scale(const float *W, const float *sigma, float *out, const float *Wt,
              const float *sigma_t, float *out_t, size_t n, cudaStream_t s) {
    FH_LAUNCH(k_sn_scale, grid_for(n), kThreads, 0, s, W, sigma, out, Wt, sigma_t, out_t, n);
}

void sn_backward(float *dW, const float *ip, const float *u, const float *v, const float *sigma,
                 int rows, int cols, cudaStream_t s) {
    FH_LAUNCH(k_sn_backward, grid_for((size_t)rows * cols), kThreads, 0, s, dW, ip, u, v, sigma,
              rows, cols);
}

void spectral_power(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const int H = (int)d.H;
    const size_t off[2] = {st.L.q.W1, st.L.q.W2};
    const int cols[2] = {(int)d.D, H};
    const bool sn[2] = {d.sn1, d.sn2};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        const float *W = st.buf[BUF_Q] + off[k], *Wt = st.buf[BUF_Q_TARGET] + off[k];
        float *u = st.buf[BUF_SN_U] + (size_t)k * H;
        power_iteration(W, Wt, H, cols[k], u, u, st.sn_v[k], st.sn_row, &st.dm->sigma[k],
                        &st.dm->sigma_t[k], l.stream);
        sn_scale(W, &st.dm->sigma[k], st.weff[k], Wt, &st.dm->sigma_t[k], st.weff_t[k],
                 (size_t)H * cols[k], l.stream);
    }
}

}  // namespace fh::cuda
