// SPEC §5.1 on the GPU: hindsight relabelling (Andrychowicz et al. 2017) as src/cpu/her.cpp,
// one warp per transition: x̃ and x̃' into one [2B, D] buffer, r̃, d̃, and private copies of
// action and regime (the upload of the next batch may overwrite the batch block once this
// child is done), then the relabel count.
#include "common.hpp"
#include "cuda_step.hpp"
#include "device_math.cuh"
#include "philox.hpp"
#include "reduce.cuh"
#include "launch.cuh"
#include "mma_tf32.cuh"

namespace fh::cuda {

namespace {

struct HerArgs {
    uint32_t B, O, G, D, NB;
    uint32_t row0;  // SPEC §9: this rank's first row, r·B (Philox c0 = row0 + i)
    uint64_t seed;
    const uint64_t *step;
    float her_ratio, her_epsilon;
    int sparse, terminal_on_success;
    const float *obs, *next_obs, *reward, *goal, *nag, *her_goal;
    const int32_t *action, *regime;
    const uint8_t *done;
    float *x2;          // [2B, D]: x~ rows 0..B-1, x~' rows B..2B-1
    float *x_bf16;      // null, or [B, D]: x~ rounded to bfloat16 values (FH_MATH_BF16)
    float *r, *done_f;  // [B]
    float *relabelled;  // [B] 0/1, summed for the metric
    int32_t *action_out, *regime_out;  // private copies: the upload may overwrite the batch
};

// One warp per transition.
__global__ void k_her(HerArgs a) {
    pdl_enter();
    const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= a.B) return;
    const size_t i = warp;
    float *x = a.x2 + i * a.D;
    float *xn = a.x2 + ((size_t)a.B + i) * a.D;
    float *xr = a.x_bf16 ? a.x_bf16 + i * a.D : nullptr;
    for (uint32_t j = lane; j < a.O; j += 32) {
        const float v = a.obs[i * a.O + j];
        x[j] = v;
        xn[j] = a.next_obs[i * a.O + j];
        if (xr) xr[j] = mma::rounded<true>(v);
    }
    for (uint32_t b = lane; b < a.NB; b += 32) a.action_out[i * a.NB + b] = a.action[i * a.NB + b];
    int relabel = 0;
    if (a.G > 0) {
        if (lane == 0) {
            const float u = uniform24(
                philox(a.seed, a.row0 + (uint32_t)i, 0, (uint32_t)*a.step, PURPOSE_HER).w[0]);
            relabel = u < a.her_ratio;
        }
        relabel = __shfl_sync(0xffffffffu, relabel, 0);
        const float *g = relabel ? a.her_goal + i * a.G : a.goal + i * a.G;
        for (uint32_t j = lane; j < a.G; j += 32) {
            x[a.O + j] = g[j];
            xn[a.O + j] = g[j];
            if (xr) xr[a.O + j] = mma::rounded<true>(g[j]);
        }
    }
    if (lane != 0) return;
    float r = a.reward[i];
    float done = a.done[i] ? 1.0f : 0.0f;
    if (relabel) {
        const float *g = a.her_goal + i * a.G;
        const float *ag = a.nag + i * a.G;
        double ss = 0;
        for (uint32_t j = 0; j < a.G; ++j) {
            const float diff = __fadd_rn(ag[j], -g[j]);
            ss += (double)diff * diff;
        }
        const float dist = (float)sqrt(ss);
        const bool reached = dist <= a.her_epsilon;
        if (a.sparse) {
            r = reached ? 0.0f : -1.0f;
            if (reached && a.terminal_on_success) done = 1.0f;
        } else {
            r = -dist;
        }
    }
    a.r[i] = r;
    a.done_f[i] = done;
    a.relabelled[i] = relabel ? 1.0f : 0.0f;
    a.regime_out[i] = a.regime[i];
}

}  // namespace

void her_relabel(CudaStep &st, const LaneCtx &l) {
    const Dims &d = st.d;
    const fh_config &cfg = st.cfg;
    HerArgs a{};
    a.B = d.B; a.O = d.O; a.G = d.G; a.D = d.D; a.NB = d.NB;
    a.row0 = d.row0;
    a.seed = cfg.seed;
    a.step = st.step;
    a.her_ratio = cfg.her_ratio;
    a.her_epsilon = cfg.her_epsilon;
    a.sparse = cfg.her_reward == FH_HER_REWARD_SPARSE;
    a.terminal_on_success = cfg.her_terminal_on_success;
    a.obs = st.in.at<float>(st.in.obs);
    a.next_obs = st.in.at<float>(st.in.next_obs);
    a.reward = st.in.at<float>(st.in.reward);
    a.goal = st.in.at<float>(st.in.goal);
    a.nag = st.in.at<float>(st.in.nag);
    a.her_goal = st.in.at<float>(st.in.her_goal);
    a.action = st.in.at<int32_t>(st.in.action);
    a.regime = st.in.at<int32_t>(st.in.regime);
    a.done = st.in.at<uint8_t>(st.in.done);
    a.x2 = st.x2;
    a.x_bf16 = st.x_bf16;
    a.r = st.r;
    a.done_f = st.done_f;
    a.relabelled = st.relab;
    a.action_out = st.action;
    a.regime_out = st.regime;
    const int warps_per_block = kThreads / 32;
    const int grid = (int)((a.B + warps_per_block - 1) / warps_per_block);
    FH_LAUNCH(k_her, grid, kThreads, 0, l.stream, a);
    reduce_f32(st.relab, d.B, 0, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(d.B), &st.dm->relabelled, 0, 1.0, l.stream);
}

}  // namespace fh::cuda
