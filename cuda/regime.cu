// SPEC §5.5 step 8 on the GPU, as src/cpu/regime.cpp: per regime the EMA s_k of its mean
// squared TD error (one block per regime, rows in a fixed order, double), then
// ρ_k = clamp(sqrt(mean_k s_k / (s_k + 1e-8)), min, max), which weights the next step's TD loss.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"

namespace fh::cuda {

namespace {

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

}  // namespace

void regime_scale(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const fh_config &c = st.cfg;
    k_regime_partial<<<d.R, kThreads, 0, l.stream>>>(st.delta, st.regime, (int)d.B, (int)d.NB,
                                                     st.regime_scr);
    FH_LAUNCHED("k_regime_partial");
    k_regime_update<<<1, 1, 0, l.stream>>>(st.regime_scr, (int)d.R, c.regime_beta, c.regime_min,
                                           c.regime_max, st.buf[BUF_REGIME]);
    FH_LAUNCHED("k_regime_update");
}

}  // namespace fh::cuda
