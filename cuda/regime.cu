// SPEC §5.5 step 8 on the GPU, as src/cpu/regime.cpp: per regime the EMA s_k of its mean
// squared TD error (one block per regime, rows in a fixed order, double), then
// ρ_k = clamp(sqrt(mean_k s_k / (s_k + 1e-8)), min, max), which weights the next step's TD loss.
// In a data-parallel step (SPEC §9) the sums and counts are summed across the ranks (float64,
// exact for the counts) before the update, so m_k is the mean over every rank's rows.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "reduce.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// Block k sums regime k's rows (fixed order), writes (sum, count) to scratch[2k], [2k+1]. Each
// of the T threads reads U rows' regimes at once: with R blocks in all, one row at a time was
// latency-bound (61 µs at B = 16384 with 256 threads; bench/results/
// h200-2026-12-01-row-batch-before-after.json).
constexpr int U = kRowBatch, T = 1024;
__global__ void __launch_bounds__(T) k_regime_partial(const float *delta, const int32_t *regime,
                                                      int B, int NB, double *scratch) {
    pdl_enter();
    __shared__ double sh[T];
    const int kreg = blockIdx.x;
    double sum = 0, cnt = 0;
    for (int i = threadIdx.x; i < B; i += U * T) {
        int z[U];
#pragma unroll
        for (int u = 0; u < U; ++u) z[u] = i + u * T < B ? regime[i + u * T] : -1;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (z[u] != kreg) continue;
            const size_t row = (size_t)(i + u * T) * NB;
            double e = 0;
            for (int b = 0; b < NB; ++b) {
                const float d = delta[row + b];
                e += (double)d * d;
            }
            sum += e / NB;
            cnt += 1;
        }
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
    pdl_enter();
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
    FH_LAUNCH(k_regime_partial, d.R, T, 0, l.stream, st.delta, st.regime, (int)d.B, (int)d.NB,
              st.regime_scr);
    st.dp.sum({SumBuf::f64s(st.regime_scr, 2 * (size_t)d.R)}, l.stream);
    FH_LAUNCH(k_regime_update, 1, 1, 0, l.stream, st.regime_scr, (int)d.R, c.regime_beta,
              c.regime_min, c.regime_max, st.buf[BUF_REGIME]);
}

}  // namespace fh::cuda
