// SPEC §5.5 step 6 on the GPU, as src/cpu/ensemble.cpp: per sample the mean and population
// variance (divisor 4) of {Q̄sa, V_hi, V_lo, mean_n Z}, two passes in double; the metric is
// the mean of the standard deviations.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "memory_plan.hpp"
#include "reduce.cuh"
#include "launch.cuh"

namespace fh::cuda {

namespace {

// Each block also sums its threads' standard deviations (block_sum, a fixed tree) into
// part[block]; one block's tree over those finishes the metric (reduce_final). Writing the
// per-sample terms and summing them in two more kernels cost the aux tail one kernel more.
__global__ void k_ensemble(const float *qbar_sa, const float *v_hi, const float *v_lo,
                           const float *z_mean, int B, float *mean, float *var, double *part) {
    pdl_enter();
    __shared__ double sh[kThreads];
    double mine = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B;
         i += (size_t)gridDim.x * blockDim.x) {
        const double e[4] = {qbar_sa[i], v_hi[i], v_lo[i], z_mean[i]};
        const double mu = (e[0] + e[1] + e[2] + e[3]) / 4.0;
        double s2 = 0;
        for (int k = 0; k < 4; ++k) s2 += (e[k] - mu) * (e[k] - mu);
        s2 /= 4.0;
        mean[i] = (float)mu;
        var[i] = (float)s2;
        mine += sqrt((double)(float)s2);
    }
    const double t = block_sum(mine, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = t;
}

}  // namespace

void ensemble(CudaStep &st, const LaneCtx &l) {
    const int B = (int)st.d.B, blocks = ensemble_blocks(B);
    FH_LAUNCH(k_ensemble, blocks, kThreads, 0, l.stream, st.qbar_sa, st.v_hi, st.v_lo, st.z_mean, B,
              st.buf[BUF_ENS_MEAN], st.buf[BUF_ENS_VAR], st.ens_part);
    reduce_final(st.ens_part, blocks, &st.dm->ensemble_std, 0, (double)st.d.Bg, l.stream);
}

}  // namespace fh::cuda
