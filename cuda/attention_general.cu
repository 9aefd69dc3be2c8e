// The attention learner's per-(transition, head) work for every config the CPU backend accepts
// (the GENERAL path of attention_paths.hpp): float32 SIMT, no limit on the number of tokens,
// the head width, attn_token_dim or goal_dim.
//
// Tiling. One block of kThreads threads works through (transition i, head h) items
// item = blockIdx.x + k·gridDim.x in order. Its item's q, k, v [T, 3·dh], probabilities
// P [T, T] and gradients live in a slice of device scratch that belongs to the block (so any T
// fits; at large T they are L2-resident rather than in shared memory), and the block's partial
// row of S | M1 | M2 (attention_paths.hpp) is read, added to and written by that block alone,
// item after item: fixed order, no atomics. The grid is as large as the scratch budget allows.
// Each phase is a loop over its outputs with a __syncthreads() between phases; the softmax and
// the row sums take one warp per row.
//
// Why: this path exists for correctness at any size (obs_dim 1024 gives 257 tokens; d_head 64;
// token and goal widths of 32); the default sizes run on tensor cores (attention_tc.cu).
#include <algorithm>
#include <cmath>

#include "attention_paths.hpp"
#include "aux_common.cuh"
#include "launch.cuh"

namespace fh::cuda::attn {

namespace {

constexpr int kThreads = 256;
constexpr size_t kScratchBudget = size_t(64) << 20;

struct GenArgs {
    Geom g;
    const float *x, *comp;
    const float *dabar;  // backward only
    float *abar;         // forward only, rows ld apart
    int ld;
    float *partial;      // backward only: [gridDim.x, pw]
    float *scratch;      // [gridDim.x, slot]
    int slot;            // floats per block: qkv | P | dqkv | c | β | rs
};

struct Slot {
    float *qkv, *P, *dqkv, *c, *beta, *rs;
};

__device__ __forceinline__ Slot slot_of(const GenArgs &a) {
    const Geom &g = a.g;
    float *base = a.scratch + (size_t)blockIdx.x * a.slot;
    const size_t n3 = (size_t)g.T * 3 * g.dh;
    Slot s;
    s.qkv = base;
    s.P = s.qkv + n3;
    s.dqkv = s.P + (size_t)g.T * g.T;
    s.c = s.dqkv + n3;
    s.beta = s.c + g.T;
    s.rs = s.beta + g.T;
    return s;
}

// qkv[t][p·dh + j] of head h (fixed-order fmaf over the token's features), then the softmax
// probabilities P = softmax_s(q_t k_sᵀ/√dh) and their column sums c_s.
__device__ void head_forward(const GenArgs &a, const Slot &s, int i, int h) {
    const Geom &g = a.g;
    const int w3 = 3 * g.dh;
    const float *xi = a.x + (size_t)i * g.D;
    for (int e = threadIdx.x; e < g.T * w3; e += blockDim.x) {
        const int t = e / w3, r = e - t * w3, p = r / g.dh, j = r - p * g.dh;
        const int c = p * g.d + h * g.dh + j;
        float acc = __ldg(a.comp + g.c_cc + (size_t)t * g.d3 + c);
        if (t < g.To) {
            const float *w = a.comp + (size_t)c * g.td;
            for (int f = 0; f < g.td; ++f) acc = fmaf(__ldg(w + f), __ldg(xi + t * g.td + f), acc);
        } else {
            const float *w = a.comp + g.c_wg + (size_t)c * g.G;
            for (int f = 0; f < g.G; ++f) acc = fmaf(__ldg(w + f), __ldg(xi + g.O + f), acc);
        }
        s.qkv[(size_t)t * w3 + r] = acc;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < g.T * g.T; e += blockDim.x) {
        const int t = e / g.T, u = e - t * g.T;
        const float *q = s.qkv + (size_t)t * w3, *k = s.qkv + (size_t)u * w3 + g.dh;
        float acc = 0.0f;
        for (int j = 0; j < g.dh; ++j) acc = fmaf(q[j], k[j], acc);
        s.P[e] = __fmul_rn(acc, g.scale);
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int t = warp; t < g.T; t += nw) {
        float *row = s.P + (size_t)t * g.T;
        float mx = -INFINITY;
        for (int u = lane; u < g.T; u += 32) mx = fmaxf(mx, row[u]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.0f;
        for (int u = lane; u < g.T; u += 32) {
            const float e = expf(__fadd_rn(row[u], -mx));
            row[u] = e;
            sum = __fadd_rn(sum, e);
        }
        sum = warp_sum(sum);
        for (int u = lane; u < g.T; u += 32) row[u] = __fdiv_rn(row[u], sum);
    }
    __syncthreads();
    for (int u = threadIdx.x; u < g.T; u += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < g.T; ++t) acc = __fadd_rn(acc, s.P[(size_t)t * g.T + u]);
        s.c[u] = acc;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads) k_attn_gen_fwd(GenArgs a) {
    pdl_enter();
    const Geom &g = a.g;
    const Slot s = slot_of(a);
    const int w3 = 3 * g.dh;
    const float Tf = (float)g.T;
    for (int item = blockIdx.x; item < g.B * g.heads; item += gridDim.x) {
        const int i = item / g.heads, h = item - i * g.heads;
        head_forward(a, s, i, h);
        for (int j = threadIdx.x; j < g.dh; j += blockDim.x) {
            float acc = 0.0f;
            for (int u = 0; u < g.T; ++u) acc = fmaf(s.c[u], s.qkv[(size_t)u * w3 + 2 * g.dh + j], acc);
            a.abar[(size_t)i * a.ld + h * g.dh + j] = __fdiv_rn(acc, Tf);
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(kThreads) k_attn_gen_bwd(GenArgs a) {
    pdl_enter();
    const Geom &g = a.g;
    const Slot s = slot_of(a);
    const int w3 = 3 * g.dh;
    const float Tf = (float)g.T;
    float *out = a.partial + (size_t)blockIdx.x * g.pw;
    float *M1 = out + (size_t)g.T * g.d3, *M2 = M1 + (size_t)g.d3 * g.td;
    for (int e = threadIdx.x; e < g.pw; e += blockDim.x) out[e] = 0.0f;
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int item = blockIdx.x; item < g.B * g.heads; item += gridDim.x) {
        const int i = item / g.heads, h = item - i * g.heads;
        const float *dai = a.dabar + (size_t)i * g.d + h * g.dh;
        const float *xi = a.x + (size_t)i * g.D;
        head_forward(a, s, i, h);
        // β_u = γ · v_u with γ = dā_h / T.
        for (int u = threadIdx.x; u < g.T; u += blockDim.x) {
            float b = 0.0f;
            for (int j = 0; j < g.dh; ++j)
                b = fmaf(__fdiv_rn(__ldg(dai + j), Tf), s.qkv[(size_t)u * w3 + 2 * g.dh + j], b);
            s.beta[u] = b;
        }
        __syncthreads();
        // dS = A (β − Σ_u A β) / √dh in place, one warp per query row.
        for (int t = warp; t < g.T; t += nw) {
            float *row = s.P + (size_t)t * g.T;
            float rs = 0.0f;
            for (int u = lane; u < g.T; u += 32) rs = fmaf(row[u], s.beta[u], rs);
            rs = warp_sum(rs);
            for (int u = lane; u < g.T; u += 32)
                row[u] = __fmul_rn(__fmul_rn(row[u], __fadd_rn(s.beta[u], -rs)), g.scale);
        }
        __syncthreads();
        // dq_t = Σ_u dS[t][u] k_u, dk_u = Σ_t dS[t][u] q_t, dv_u = c_u γ.
        for (int e = threadIdx.x; e < g.T * w3; e += blockDim.x) {
            const int t = e / w3, r = e - t * w3, p = r / g.dh, j = r - p * g.dh;
            float acc = 0.0f;
            if (p == 0) {
                for (int u = 0; u < g.T; ++u)
                    acc = fmaf(s.P[(size_t)t * g.T + u], s.qkv[(size_t)u * w3 + g.dh + j], acc);
            } else if (p == 1) {
                for (int u = 0; u < g.T; ++u)
                    acc = fmaf(s.P[(size_t)u * g.T + t], s.qkv[(size_t)u * w3 + j], acc);
            } else {
                acc = __fmul_rn(s.c[t], __fdiv_rn(__ldg(dai + j), Tf));
            }
            s.dqkv[e] = acc;
        }
        __syncthreads();
        // The block's partial row: S[t][c] += dqkv_t[c]; M1[c][f] += Σ_{t<To} dqkv_t[c] tok_t[f];
        // M2[c][f] += dqkv_To[c] g[f]. Each element has one owner thread.
        for (int e = threadIdx.x; e < g.T * w3; e += blockDim.x) {
            const int t = e / w3, r = e - t * w3, p = r / g.dh, j = r - p * g.dh;
            float *o = out + (size_t)t * g.d3 + p * g.d + h * g.dh + j;
            *o = __fadd_rn(*o, s.dqkv[e]);
        }
        for (int e = threadIdx.x; e < w3 * (g.td + g.G); e += blockDim.x) {
            const int r = e / (g.td + g.G), f = e - r * (g.td + g.G), p = r / g.dh, j = r - p * g.dh;
            const int c = p * g.d + h * g.dh + j;
            if (f < g.td) {
                float acc = 0.0f;
                for (int t = 0; t < g.To; ++t)
                    acc = fmaf(s.dqkv[(size_t)t * w3 + r], __ldg(xi + t * g.td + f), acc);
                float *o = M1 + (size_t)c * g.td + f;
                *o = __fadd_rn(*o, acc);
            } else {
                const int fg = f - g.td;
                float *o = M2 + (size_t)c * g.G + fg;
                *o = fmaf(s.dqkv[(size_t)g.To * w3 + r], __ldg(xi + g.O + fg), *o);
            }
        }
        __syncthreads();
    }
}

class GeneralPath final : public Path {
public:
    explicit GeneralPath(const Geom &g) : g_(g) {
        const size_t n3 = (size_t)g.T * 3 * g.dh;
        slot_ = 2 * n3 + (size_t)g.T * g.T + 3 * (size_t)g.T;
        slot_ = (slot_ + 63) / 64 * 64;  // 256-byte aligned slices
        const size_t items = (size_t)g.B * g.heads;
        const size_t by_budget = std::max<size_t>(1, kScratchBudget / (slot_ * sizeof(float)));
        blocks_ = (int)std::min({items, by_budget, (size_t)sm_count() * 8});
    }
    Kernels kind() const override { return Kernels::GENERAL; }
    size_t scratch_bytes() const override { return (size_t)blocks_ * slot_ * sizeof(float); }
    void bind_scratch(void *p) override { scratch_ = static_cast<float *>(p); }
    int partial_rows() const override { return blocks_; }

    void forward(const FwdArgs &f, cudaStream_t s) override {
        GenArgs a = args(f.x, f.comp);
        a.abar = f.abar;
        a.ld = f.ld;
        FH_LAUNCH(k_attn_gen_fwd, blocks_, kThreads, 0, s, a);
        pool_aug(g_, f, s);
    }
    void backward(const BwdArgs &b, cudaStream_t s) override {
        GenArgs a = args(b.x, b.comp);
        a.dabar = b.dabar;
        a.partial = b.partial;
        FH_LAUNCH(k_attn_gen_bwd, blocks_, kThreads, 0, s, a);
    }

private:
    GenArgs args(const float *x, const float *comp) const {
        GenArgs a{};
        a.g = g_;
        a.x = x;
        a.comp = comp;
        a.scratch = scratch_;
        a.slot = (int)slot_;
        return a;
    }

    Geom g_;
    size_t slot_ = 0;
    int blocks_ = 1;
    float *scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Path> make_general_path(const Geom &g) { return std::make_unique<GeneralPath>(g); }

}  // namespace fh::cuda::attn
