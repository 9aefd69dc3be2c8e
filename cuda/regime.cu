// SPEC §5.5 step 8 on the GPU, as src/cpu/regime.cpp: per regime the EMA s_k of its mean
// squared TD error (sums in double over blocks of rows, then over the blocks, in fixed orders),
// then ρ_k = clamp(sqrt(mean_k s_k / (s_k + 1e-8)), min, max), which weights the next step's TD
// loss.
// In a data-parallel step (SPEC §9) the sums and counts are summed across the ranks (float64,
// exact for the counts) before the update, so m_k is the mean over every rank's rows.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "memory_plan.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// Per block of kRegimeRows rows, a thread a row: e = mean_b δ², then for each regime k the
// warp's sum of e over its rows in regime k (a fixed butterfly) and their count (a ballot),
// and the block's warps added in warp order into the block's partial row [sum_0, count_0, ...].
// k_regime_sums then adds the blocks' rows in a fixed pattern. The sums of a regime ran as one
// block each (R blocks scanning all B rows): 14.9 µs at B = 16384 with R = 4 on an H100, the
// single-stream step waiting on 4 of 132 SMs (docs/cuda.md, Findings).
constexpr int kRegimeWarps = (int)kRegimeRows / 32;
__global__ void __launch_bounds__(kRegimeRows) k_regime_partial(const float *delta,
                                                                 const int32_t *regime, int B,
                                                                 int NB, int R, double *part) {
    pdl_enter();
    __shared__ double sh[kRegimeWarps][2 * FH_MAX_REGIMES];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i = blockIdx.x * (int)kRegimeRows + threadIdx.x;
    int z = -1;
    double e = 0;
    if (i < B) {
        z = regime[i];
        const float *row = delta + (size_t)i * NB;
        for (int b = 0; b < NB; ++b) {
            const float d = row[b];
            e += (double)d * d;
        }
        e /= NB;
    }
    for (int k = 0; k < R; ++k) {
        const unsigned in = __ballot_sync(0xffffffffu, z == k);
        const double s = in ? warp_sum(z == k ? e : 0.0) : 0.0;  // in is uniform in the warp
        if (lane == 0) {
            sh[warp][2 * k] = s;
            sh[warp][2 * k + 1] = (double)__popc(in);
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < 2 * R; t += blockDim.x) {
        double a = 0;
        for (int w = 0; w < kRegimeWarps; ++w) a += sh[w][t];
        part[(size_t)blockIdx.x * 2 * R + t] = a;
    }
}

// scratch[t] = Σ_b part[b][t] (SUM; a warp per column t, lane l the blocks b ≡ l mod 32 in
// order, then a butterfly), then (UPDATE, thread 0) s_k and ρ_k from scratch, as the CPU does.
// A data-parallel step sums scratch across the ranks between the two.
template <bool SUM, bool UPDATE>
__global__ void __launch_bounds__(kThreads) k_regime_sums(const double *part, int nb,
                                                          double *scratch, int R, float beta,
                                                          float rmin, float rmax, float *buf) {
    pdl_enter();
    if constexpr (SUM) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        for (int t = warp; t < 2 * R; t += kThreads / 32) {
            double a = 0;
            for (int b = lane; b < nb; b += 32) a += part[(size_t)b * 2 * R + t];
            a = warp_sum(a);
            if (lane == 0) scratch[t] = a;
        }
        if constexpr (UPDATE) __syncthreads();  // scratch's stores seen by thread 0
    }
    if (!UPDATE || threadIdx.x != 0) return;
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
    const int R = (int)d.R, nb = (int)regime_blocks(d.B);
    double *part = st.regime_scr + 2 * (size_t)R;
    FH_LAUNCH(k_regime_partial, nb, (int)kRegimeRows, 0, l.stream, st.delta, st.regime,
              (int)d.B, (int)d.NB, R, part);
    // k_regime_sums in one of its three forms, all with the same arguments.
    auto sums = [&](void (*k_regime_sums_form)(const double *, int, double *, int, float, float,
                                                float, float *)) {
        FH_LAUNCH(k_regime_sums_form, 1, kThreads, 0, l.stream, part, nb, st.regime_scr, R,
                  c.regime_beta, c.regime_min, c.regime_max, st.buf[BUF_REGIME]);
    };
    if (st.dp.active()) {
        sums(k_regime_sums<true, false>);
        st.dp.sum({SumBuf::f64s(st.regime_scr, 2 * (size_t)R)}, l.stream);
        sums(k_regime_sums<false, true>);
    } else {
        sums(k_regime_sums<true, true>);
    }
}

}  // namespace fh::cuda
