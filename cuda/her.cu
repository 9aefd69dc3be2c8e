// SPEC §5.1 on the GPU: hindsight relabelling (Andrychowicz et al. 2017) as src/cpu/her.cpp,
// one warp per transition: x̃ and x̃' into one [2B, D] buffer, r̃, d̃, and private copies of
// action and regime (the upload of the next batch may overwrite the batch block once the HER
// child is done). The relabel count (her_metrics) is a task of its own, on ddqn's lane 0:
// nothing in the step reads it.
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

// Up to kRowPer row elements a lane: a row of up to 32·kRowPer floats (the default O = 124)
// takes one round of loads and one of stores.
constexpr int kRowPer = 4;

// A lane's share of one 32-wide chunk of the goal, loaded ahead of its use.
struct GoalChunk {
    float g, ag;  // the goal stored (her_goal when relabelled) and, when relabelled, nag's
};

__device__ __forceinline__ GoalChunk load_goal(const HerArgs &a, size_t i, bool relabel,
                                               uint32_t j) {
    GoalChunk c{0.0f, 0.0f};
    if (j < a.G) {
        c.g = relabel ? a.her_goal[i * a.G + j] : a.goal[i * a.G + j];
        if (relabel) c.ag = a.nag[i * a.G + j];
    }
    return c;
}

// One warp per transition. A warp issues its loads before its stores: lane 0's scalars, the
// first chunk of the goal and a chunk of the row, then their stores. Written load, store,
// load, store per element, each of a warp's stores waited for the load before it, and the
// kernel took 17.7 µs multi-stream for its ~34 MB at B = 16384 on an H100 (docs/cuda.md,
// Findings, "The step's start without the whole snapshot on its path").
__global__ void k_her(HerArgs a) {
    pdl_enter();
    const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint32_t lane = threadIdx.x & 31;
    if (warp >= a.B) return;
    const size_t i = warp;
    float r = 0.0f;
    uint8_t done_in = 0;
    int32_t regime = 0;
    if (lane == 0) {
        r = a.reward[i];
        done_in = a.done[i];
        regime = a.regime[i];
    }
    // Every lane draws the same number (no broadcast needed).
    const bool relabel =
        a.G > 0 && uniform24(philox(a.seed, a.row0 + (uint32_t)i, 0, (uint32_t)*a.step,
                                    PURPOSE_HER).w[0]) < a.her_ratio;
    const GoalChunk goal0 = load_goal(a, i, relabel, lane);

    float *x = a.x2 + i * a.D;
    float *xn = a.x2 + ((size_t)a.B + i) * a.D;
    float *xr = a.x_bf16 ? a.x_bf16 + i * a.D : nullptr;
    const float *obs = a.obs + i * a.O, *next_obs = a.next_obs + i * a.O;
    for (uint32_t j0 = 0; j0 < a.O; j0 += 32 * kRowPer) {
        float v[kRowPer], w[kRowPer];
#pragma unroll
        for (int k = 0; k < kRowPer; ++k) {
            const uint32_t j = j0 + lane + 32 * k;
            v[k] = j < a.O ? obs[j] : 0.0f;
            w[k] = j < a.O ? next_obs[j] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kRowPer; ++k) {
            const uint32_t j = j0 + lane + 32 * k;
            if (j >= a.O) continue;
            x[j] = v[k];
            xn[j] = w[k];
            if (xr) xr[j] = mma::rounded<true>(v[k]);
        }
    }
    for (uint32_t b = lane; b < a.NB; b += 32) a.action_out[i * a.NB + b] = a.action[i * a.NB + b];

    // The goal, and when relabelled the distance to it: Σ_j (ag_j − g_j)² in double in the
    // CPU's order j = 0, 1, ..., each lane's difference broadcast in turn.
    double ss = 0;
    for (uint32_t j0 = 0; j0 < a.G; j0 += 32) {
        const GoalChunk c = j0 == 0 ? goal0 : load_goal(a, i, relabel, j0 + lane);
        const uint32_t j = j0 + lane;
        if (j < a.G) {
            x[a.O + j] = c.g;
            xn[a.O + j] = c.g;
            if (xr) xr[a.O + j] = mma::rounded<true>(c.g);
        }
        if (!relabel) continue;
        const float diff = __fadd_rn(c.ag, -c.g);
        const uint32_t n = min(32u, a.G - j0);
        for (uint32_t t = 0; t < n; ++t) {
            const float dt = __shfl_sync(0xffffffffu, diff, (int)t);
            ss += (double)dt * dt;
        }
    }
    if (lane != 0) return;
    float done = done_in ? 1.0f : 0.0f;
    if (relabel) {
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
    a.regime_out[i] = regime;
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
}

void her_metrics(CudaStep &st, const LaneCtx &l) {
    reduce_f32(st.relab, st.d.B, 0, l.red, l.stream);
    reduce_final(l.red, reduce_blocks(st.d.B), &st.dm->relabelled, 0, 1.0, l.stream);
}

}  // namespace fh::cuda
