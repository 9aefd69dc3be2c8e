// The attention learner's factored parameter maps (attention.cu's header, steps 1 and 4): the
// composite weights Wc, Wgc, cc and ebar before the forward, and the parameter gradients from the
// backward's three batch sums after it. Both are small (at the default sizes ~7700 and ~15000
// outputs, each a float64 dot of 32 to 192 terms), so the cost is latency, not arithmetic:
// one warp per output (a quarter warp for dW's short sums), the lanes taking the inner index in
// turn, and a fixed butterfly over their float64 partials. No atomics: the same inputs give the
// same bits.
// (A thread per output, the code before, left each thread a chain of up to 3d dependent float64
// adds behind its loads. Together with the reward head's registers (attention.cu) this took the
// attention lane from 0.482 to 0.460 ms single-stream at B = 16384 on the H200:
// bench/results/h200-2026-12-02-attention-small-kernels-before-after.json.)
#include <algorithm>

#include "attention_paths.hpp"
#include "common.hpp"
#include "device_math.cuh"
#include "launch.cuh"

namespace fh::cuda::attn {

namespace {

constexpr int kWarpsPerBlock = 8;
// k_attn_fin's dW outputs per warp: each a sum of td + G + T terms (40 at the default), which a
// whole warp's lanes left mostly idle (k_attn_fin 14.0 → 10.9 µs, Nsight warm, and attention
// lane 0.366 → 0.362 ms single-stream at B = 16384 on the H200, side by side in
// bench/results/h200-2026-12-04-attn-head-bwd-rejected*.json: "head" → "new").
constexpr int kFinDwPerWarp = 4;
int warp_blocks(int outputs) { return (outputs + kWarpsPerBlock - 1) / kWarpsPerBlock; }

// Wc = W Wt, Wgc = W Wg, cc_t = W e0_t + b, ebar = Σ_t e0_t (float64 sums, rounded once).
__global__ void k_attn_comp(Geom g, const float *__restrict__ W, const float *__restrict__ b,
                            const float *__restrict__ Wt, const float *__restrict__ bt,
                            const float *__restrict__ Wg, const float *__restrict__ bg,
                            const float *__restrict__ P, float *__restrict__ comp) {
    pdl_enter();
    const int n1 = g.d3 * g.td, n2 = g.d3 * g.G, n3 = g.T * g.d3, n4 = g.d;
    const int total = n1 + n2 + n3 + n4, lane = threadIdx.x & 31;
    const int nw = gridDim.x * (blockDim.x >> 5);
    for (int idx = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); idx < total; idx += nw) {
        double s = 0.0, add = 0.0;
        if (idx < n1) {
            const int c = idx / g.td, kk = idx - c * g.td;
            for (int a = lane; a < g.d; a += 32)
                s += (double)W[(size_t)c * g.d + a] * (double)Wt[a * g.td + kk];
        } else if (idx < n1 + n2) {
            const int r = idx - n1, c = r / g.G, kk = r - c * g.G;
            for (int a = lane; a < g.d; a += 32)
                s += (double)W[(size_t)c * g.d + a] * (double)Wg[a * g.G + kk];
        } else if (idx < n1 + n2 + n3) {
            const int r = idx - n1 - n2, t = r / g.d3, c = r - t * g.d3;
            const float *bias = t < g.To ? bt : bg;
            add = (double)b[c];
            for (int a = lane; a < g.d; a += 32)
                s += (double)W[(size_t)c * g.d + a] *
                     ((double)bias[a] + (double)P[(size_t)t * g.d + a]);
        } else {
            const int a = idx - n1 - n2 - n3;
            for (int t = lane; t < g.T; t += 32)
                s += (double)(t < g.To ? bt[a] : bg[a]) + (double)P[(size_t)t * g.d + a];
        }
        s = warp_sum(s);
        // The regions are contiguous in this order (c_wg = n1, ...).
        if (lane == 0) comp[idx] = (float)(add + s);
    }
}

// Σ_c W[c, a] · X[c·ld + col] over the d3 rows of W [d3, d], in double: the lanes take every
// 32nd c in order, then a fixed-order warp sum (every lane gets it). The chain rule through the
// composite weights for dP, dWt and dWg, which differ only in the column of S, M1 or M2.
__device__ __forceinline__ double w_col_dot(const float *__restrict__ W, int d, int d3, int a,
                                            const float *__restrict__ X, int ld, int col) {
    double s = 0.0;
    for (int c = threadIdx.x & 31; c < d3; c += 32)
        s += (double)W[(size_t)c * d + a] * (double)X[c * ld + col];
    return warp_sum(s);
}

// The parameter gradients from the batch sums (attention.cu's header, step 4).
__global__ void k_attn_fin(Geom g, FinArgs f) {
    pdl_enter();
    const float *S = f.tot, *M1 = S + g.T * g.d3, *M2 = M1 + g.d3 * g.td;
    const int d = g.d, d3 = g.d3, td = g.td, G = g.G, T = g.T, na = g.na;
    const int n1 = d3 * d, n2 = d3, n3 = T * d, n4 = d * td, n5 = d * G, n6 = d;
    const int lane = threadIdx.x & 31;
    // dW's outputs 4 to a warp, 8 lanes each (kFinDwPerWarp).
    constexpr int per = kFinDwPerWarp, lanes = 32 / per;
    const int w1 = (n1 + per - 1) / per;
    const int total = w1 + n2 + n3 + n4 + n5 + n6;
    const int nw = gridDim.x * (blockDim.x >> 5);
    const double Td = (double)T;
    for (int idx = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); idx < total; idx += nw) {
        int r = idx;
        double s = 0.0;
        if (r < w1) {  // dW[c, a]: M1 Wt, M2 Wg, S e0 over one index j
            r = r * per + lane / lanes;
            const int c = r / d, a = r - c * d, sub = lane % lanes;
            for (int j = sub; r < n1 && j < td + G + T; j += lanes) {
                if (j < td) {
                    s += (double)M1[c * td + j] * (double)f.Wt[a * td + j];
                } else if (j < td + G) {
                    const int kk = j - td;
                    s += (double)M2[c * G + kk] * (double)f.Wg[a * G + kk];
                } else {
                    const int t = j - td - G;
                    s += (double)S[t * d3 + c] *
                         ((double)(t < g.To ? f.bt[a] : f.bg[a]) + (double)f.P[t * d + a]);
                }
            }
            s = warp_sum<lanes>(s);
            if (sub == 0 && r < n1) f.gW[r] = (float)s;
            continue;
        }
        r -= w1;
        if (r < n2) {  // db[c]
            for (int t = lane; t < T; t += 32) s += (double)S[t * d3 + r];
            s = warp_sum(s);
            if (lane == 0) f.gb[r] = (float)s;
            continue;
        }
        r -= n2;
        if (r < n3) {  // dP[t, a]
            const int t = r / d, a = r - t * d;
            s = w_col_dot(f.W, d, d3, a, S + t * d3, 1, 0);
            if (lane == 0) f.gP[r] = (float)(s + (double)f.R[(size_t)a * f.ldG + na - 1] / Td);
            continue;
        }
        r -= n3;
        if (r < n4) {  // dWt[a, k]
            const int a = r / td, kk = r - a * td;
            s = w_col_dot(f.W, d, d3, a, M1, td, kk);
            if (lane == 0) f.gWt[r] = (float)(s + (double)f.R[(size_t)a * f.ldG + kk] / Td);
            continue;
        }
        r -= n4;
        if (r < n5) {  // dWg[a, k]
            const int a = r / G, kk = r - a * G;
            s = w_col_dot(f.W, d, d3, a, M2, G, kk);
            if (lane == 0) f.gWg[r] = (float)(s + (double)f.R[(size_t)a * f.ldG + td + kk] / Td);
            continue;
        }
        r -= n5;
        if (lane == 0) f.gbo[r] = f.R[(size_t)r * f.ldG + na - 1];  // dbo = Σ_i dpool_i
    }
}

// dbt = Σ_{t<To} dP[t], dbg = dP[To]; dWr1 and dWo copied out of the GEMM's output.
__global__ void k_attn_fin2(Geom g, FinArgs f) {
    pdl_enter();
    const int stride = gridDim.x * blockDim.x, d = g.d;
    for (int a = blockIdx.x * blockDim.x + threadIdx.x; a < d; a += stride) {
        double s = 0.0;
        for (int t = 0; t < g.To; ++t) s += (double)f.gP[t * d + a];
        f.gbt[a] = (float)s;
        if (g.G > 0) f.gbg[a] = f.gP[g.To * d + a];
    }
    const int n1 = f.hh * d, n = n1 + d * d;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        const bool wr1 = e < n1;
        const int r = wr1 ? e : e - n1, row = r / d, col = r - row * d;
        (wr1 ? f.gWr1 : f.gWo)[r] = (wr1 ? f.dWr1 : f.dWo)[(size_t)row * f.ldG + col];
    }
}

}  // namespace

void composites(const Geom &g, const float *W, const float *b, const float *Wt, const float *bt,
                const float *Wg, const float *bg, const float *P, float *comp, cudaStream_t s) {
    FH_LAUNCH(k_attn_comp, warp_blocks(g.c_total), 32 * kWarpsPerBlock, 0, s, g, W, b, Wt, bt, Wg,
              bg, P, comp);
}

void param_grads(const Geom &g, const FinArgs &f, cudaStream_t s) {
    const int d = g.d;
    const int n = (g.d3 * d + kFinDwPerWarp - 1) / kFinDwPerWarp + g.d3 + g.T * d + d * g.td +
                  d * g.G + d;
    FH_LAUNCH(k_attn_fin, warp_blocks(n), 32 * kWarpsPerBlock, 0, s, g, f);
    const int copies = f.hh * d + d * d;
    FH_LAUNCH(k_attn_fin2, std::max((d + 127) / 128, std::min((copies + 127) / 128, 64)), 128, 0, s,
              g, f);
}

}  // namespace fh::cuda::attn
