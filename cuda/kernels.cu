// Kernels of the CUDA backend. See kernels.cuh for the contract of each launcher.
//
// Floating-point expressions that the CPU reference evaluates in a given order are written with
// __fmul_rn / __fadd_rn / __fdiv_rn so that nvcc cannot contract them into FMAs: those kernels
// then produce the CPU's float bits from the same inputs.
#include "kernels.cuh"

#include <algorithm>
#include <cmath>

#include "common.hpp"
#include "device_math.cuh"
#include "philox.hpp"

namespace fh::cuda::kern {

namespace {

__global__ void k_set_u64(uint64_t *p, uint64_t v) { *p = v; }
__global__ void k_inc_u64(uint64_t *p) { *p += 1; }
__global__ void k_fill(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

// ---- HER ------------------------------------------------------------------------------------------





// ---- network pieces --------------------------------------------------------------------------------
__global__ void k_bias_silu(float *pre, float *act, const float *b, int M, int N) {
    const size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float z = __fadd_rn(pre[i], b[i % N]);
        pre[i] = z;
        act[i] = dev_silu(z);
    }
}

__global__ void k_bias_silu4(float4 *pre, float4 *act, const float4 *b, int M, int N4) {
    const size_t n = (size_t)M * N4;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 z = pre[i];
        const float4 bb = b[i % N4];
        z.x = __fadd_rn(z.x, bb.x);
        z.y = __fadd_rn(z.y, bb.y);
        z.z = __fadd_rn(z.z, bb.z);
        z.w = __fadd_rn(z.w, bb.w);
        pre[i] = z;
        act[i] = make_float4(dev_silu(z.x), dev_silu(z.y), dev_silu(z.z), dev_silu(z.w));
    }
}






// ---- aux tail -------------------------------------------------------------------------------------
__global__ void k_polyak(float *t, const float *o, size_t n, float tau) {
    const float keep = __fadd_rn(1.0f, -tau);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        t[i] = __fadd_rn(__fmul_rn(tau, o[i]), __fmul_rn(keep, t[i]));
}

__global__ void k_cql(const float *q, const float *z, const int32_t *action, const float *omega,
                      int B, int NB, int A, float alpha, float q_clip, float *dzc,
                      double *loss_elt) {
    const float scale = __fdiv_rn(1.0f, __fmul_rn((float)B, (float)NB));
    const size_t n = (size_t)B * NB;
    for (size_t ib = blockIdx.x * (size_t)blockDim.x + threadIdx.x; ib < n;
         ib += (size_t)gridDim.x * blockDim.x) {
        const size_t i = ib / NB, b = ib % NB;
        const size_t base = b * (size_t)B * A + i * A;
        const int a = action[ib];
        const float *qr = q + base;
        float m = qr[0];
        for (int k = 1; k < A; ++k) m = fmaxf(m, qr[k]);
        double se = 0;
        for (int k = 0; k < A; ++k) se += exp((double)qr[k] - m);
        const double lse = (double)m + log(se);
        loss_elt[ib] = (double)omega[i] * (lse - (double)qr[a]);
        const float coef = __fmul_rn(__fmul_rn(alpha, omega[i]), scale);
        for (int k = 0; k < A; ++k) {
            const float p = (float)(exp((double)qr[k] - lse));
            const float zk = z[base + k];
            const bool inside = zk > -q_clip && zk < q_clip;
            dzc[base + k] = inside ? __fmul_rn(coef, __fadd_rn(p, k == a ? -1.0f : 0.0f)) : 0.0f;
        }
    }
}

__global__ void k_add_inplace(float *dst, const float *src, size_t n, size_t s_dst,
                              size_t s_src) {
    dst += blockIdx.y * s_dst;
    src += blockIdx.y * s_src;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(dst[i], src[i]);
}

__global__ void k_ensemble(const float *qbar_sa, const float *v_hi, const float *v_lo,
                           const float *z_mean, int B, float *mean, float *var,
                           double *std_elt) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B;
         i += (size_t)gridDim.x * blockDim.x) {
        const double e[4] = {qbar_sa[i], v_hi[i], v_lo[i], z_mean[i]};
        const double mu = (e[0] + e[1] + e[2] + e[3]) / 4.0;
        double s2 = 0;
        for (int k = 0; k < 4; ++k) s2 += (e[k] - mu) * (e[k] - mu);
        s2 /= 4.0;
        mean[i] = (float)mu;
        var[i] = (float)s2;
        std_elt[i] = sqrt((double)(float)s2);
    }
}

// One warp per row: the double dot of the target trunk features with the target head.
__global__ void k_confidence(const float *h2t_next, const float *wt_u, const float *bt_u,
                             const float *var, const float *done, const float *u,
                             const float *pre_u, int B, int H, float gamma, float *dpre,
                             double *loss_elt, float *conf) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= B) return;
    double acc = 0;
    for (int j = lane; j < H; j += 32) acc += (double)h2t_next[(size_t)row * H + j] * wt_u[j];
    acc = warp_sum(acc);
    if (lane != 0) return;
    const float ubar = dev_softplus(__fadd_rn((float)acc, *bt_u));
    const float g2 = __fmul_rn(gamma, gamma);
    const float t = __fadd_rn(var[row], __fmul_rn(__fmul_rn(g2, __fadd_rn(1.0f, -done[row])), ubar));
    const float uu = u[row];
    const float e = __fadd_rn(uu, -t);
    loss_elt[row] = 0.5 * (double)e * e;
    dpre[row] = __fmul_rn(__fdiv_rn(e, (float)B), dev_sigmoid(pre_u[row]));
    conf[row] = __fdiv_rn(1.0f, __fadd_rn(1.0f, sqrtf(uu)));
}

// Block k sums regime k's rows (fixed order), writes (sum, count) to scratch[2k], [2k+1].
__global__ void k_regime_partial(const float *delta, const int32_t *regime, int B, int NB,
                                 double *scratch) {
    __shared__ double sh[kThreads];
    const int kreg = blockIdx.x;
    double sum = 0, cnt = 0;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        if (regime[i] != kreg) continue;
        double e = 0;
        for (int b = 0; b < NB; ++b) {
            const float d = delta[(size_t)i * NB + b];
            e += (double)d * d;
        }
        sum += e / NB;
        cnt += 1;
    }
    const double s = block_sum(sum, sh);
    const double c = block_sum(cnt, sh);
    if (threadIdx.x == 0) {
        scratch[2 * kreg] = s;
        scratch[2 * kreg + 1] = c;
    }
}

__global__ void k_regime_update(const double *scratch, int R, float beta, float rmin, float rmax,
                                float *buf) {
    float *sk = buf, *rho = buf + R;
    for (int k = 0; k < R; ++k) {
        const double cnt = scratch[2 * k + 1];
        if (cnt > 0) {
            const float m = (float)(scratch[2 * k] / cnt);
            sk[k] = __fadd_rn(__fmul_rn(beta, sk[k]), __fmul_rn(__fadd_rn(1.0f, -beta), m));
        }
    }
    double mean = 0;
    for (int k = 0; k < R; ++k) mean += sk[k];
    const float sbar = (float)(mean / R);
    for (int k = 0; k < R; ++k)
        rho[k] = fminf(fmaxf(sqrtf(__fdiv_rn(sbar, __fadd_rn(sk[k], 1e-8f))), rmin), rmax);
}

// ---- adam --------------------------------------------------------------------------------------------
__global__ void k_adam_prep(const float *norm, float clip, const uint64_t *step, float beta1,
                            float beta2, AdamScalars *out) {
    const float nrm = *norm;
    const double t = (double)(*step + 1);
    out->scale = nrm > clip ? __fdiv_rn(clip, nrm) : 1.0f;
    out->bc1 = (float)(1.0 - pow((double)beta1, t));
    out->bc2 = (float)(1.0 - pow((double)beta2, t));
}

__global__ void k_adam(float *p, float *m, float *v, const float *g, size_t n, float lr,
                       float beta1, float beta2, float eps, const AdamScalars *sc) {
    const float scale = sc->scale, bc1 = sc->bc1, bc2 = sc->bc2;
    const float ob1 = __fadd_rn(1.0f, -beta1), ob2 = __fadd_rn(1.0f, -beta2);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adam_update(p[i], m[i], v[i], __fmul_rn(g[i], scale), lr, beta1, beta2, ob1, ob2, bc1,
                    bc2, eps);
}

// ---- act ------------------------------------------------------------------------------------------------
__global__ void k_act_select(const float *q, int n, int NB, int A, uint64_t seed, uint32_t row0,
                             uint32_t act_call, float epsilon, int32_t *actions,
                             float *q_values) {
    const size_t total = (size_t)n * NB;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / NB, b = k % NB;
        const float *row = q + b * (size_t)n * A + i * A;
        uint32_t best = (uint32_t)dev_first_argmax(row, A);
        const Words w = philox(seed, row0 + (uint32_t)i, (uint32_t)b, act_call, PURPOSE_ACT);
        if (uniform24(w.w[0]) < epsilon) {
            const uint32_t r = (uint32_t)__fmul_rn(uniform24(w.w[1]), (float)A);
            best = r < (uint32_t)A - 1 ? r : (uint32_t)A - 1;
        }
        actions[k] = (int32_t)best;
        if (q_values)
            for (int a = 0; a < A; ++a) q_values[k * A + a] = row[a];
    }
}

}  // namespace

// ============================================================================================
// Launchers
// ============================================================================================

void set_u64(uint64_t *p, uint64_t v, cudaStream_t s) {
    k_set_u64<<<1, 1, 0, s>>>(p, v);
    FH_LAUNCHED("k_set_u64");
}
void inc_u64(uint64_t *p, cudaStream_t s) {
    k_inc_u64<<<1, 1, 0, s>>>(p);
    FH_LAUNCHED("k_inc_u64");
}
void fill(float *p, size_t n, float v, cudaStream_t s) {
    k_fill<<<grid_for(n), kThreads, 0, s>>>(p, n, v);
    FH_LAUNCHED("k_fill");
}





void bias_silu(float *pre, float *act, const float *b, int M, int N, cudaStream_t s) {
    const bool vec = N % 4 == 0 && ((uintptr_t)pre % 16 == 0) && ((uintptr_t)act % 16 == 0) &&
                     ((uintptr_t)b % 16 == 0);
    if (vec) {
        const size_t n4 = (size_t)M * (N / 4);
        k_bias_silu4<<<grid_for(n4, kThreads, 32768), kThreads, 0, s>>>(
            (float4 *)pre, (float4 *)act, (const float4 *)b, M, N / 4);
    } else {
        k_bias_silu<<<grid_for((size_t)M * N, kThreads, 32768), kThreads, 0, s>>>(pre, act, b,
                                                                                    M, N);
    }
    FH_LAUNCHED("k_bias_silu");
}






void polyak(float *target, const float *online, size_t n, float tau, cudaStream_t s) {
    k_polyak<<<grid_for(n), kThreads, 0, s>>>(target, online, n, tau);
    FH_LAUNCHED("k_polyak");
}

void cql(const float *q, const float *z, const int32_t *action, const float *omega, int B,
         int NB, int A, float alpha, float q_clip, float *dzc, double *loss_elt,
         cudaStream_t s) {
    k_cql<<<grid_for((size_t)B * NB), kThreads, 0, s>>>(q, z, action, omega, B, NB, A, alpha,
                                                        q_clip, dzc, loss_elt);
    FH_LAUNCHED("k_cql");
}

void add_inplace(float *dst, const float *src, size_t n, cudaStream_t s, int batch,
                 size_t s_dst, size_t s_src) {
    k_add_inplace<<<dim3(grid_for(n), batch), kThreads, 0, s>>>(dst, src, n, s_dst, s_src);
    FH_LAUNCHED("k_add_inplace");
}

void ensemble(const float *qbar_sa, const float *v_hi, const float *v_lo, const float *z_mean,
              int B, float *mean, float *var, double *std_elt, cudaStream_t s) {
    k_ensemble<<<grid_for(B), kThreads, 0, s>>>(qbar_sa, v_hi, v_lo, z_mean, B, mean, var,
                                                std_elt);
    FH_LAUNCHED("k_ensemble");
}

void confidence(const float *h2t_next, const float *wt_u, const float *bt_u, const float *var,
                const float *done, const float *u, const float *pre_u, int B, int H, float gamma,
                float *dpre, double *loss_elt, float *conf, cudaStream_t s) {
    const int grid = (B + kThreads / 32 - 1) / (kThreads / 32);
    k_confidence<<<grid, kThreads, 0, s>>>(h2t_next, wt_u, bt_u, var, done, u, pre_u, B, H,
                                           gamma, dpre, loss_elt, conf);
    FH_LAUNCHED("k_confidence");
}

void regime_scale(const float *delta, const int32_t *regime, int B, int NB, int R, float beta,
                  float rmin, float rmax, double *scratch, float *regime_buf, cudaStream_t s) {
    k_regime_partial<<<R, kThreads, 0, s>>>(delta, regime, B, NB, scratch);
    FH_LAUNCHED("k_regime_partial");
    k_regime_update<<<1, 1, 0, s>>>(scratch, R, beta, rmin, rmax, regime_buf);
    FH_LAUNCHED("k_regime_update");
}

void adam_prep(const float *norm, float clip, const uint64_t *step, float beta1, float beta2,
               AdamScalars *out, cudaStream_t s) {
    k_adam_prep<<<1, 1, 0, s>>>(norm, clip, step, beta1, beta2, out);
    FH_LAUNCHED("k_adam_prep");
}

void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const AdamScalars *sc, cudaStream_t s) {
    k_adam<<<grid_for(n), kThreads, 0, s>>>(p, m, v, g, n, lr, beta1, beta2, eps, sc);
    FH_LAUNCHED("k_adam");
}

void act_select(const float *q, int n, int NB, int A, uint64_t seed, uint32_t row0,
                uint32_t act_call, float epsilon, int32_t *actions, float *q_values,
                cudaStream_t s) {
    k_act_select<<<grid_for((size_t)n * NB), kThreads, 0, s>>>(q, n, NB, A, seed, row0, act_call,
                                                               epsilon, actions, q_values);
    FH_LAUNCHED("k_act_select");
}

}  // namespace fh::cuda::kern
