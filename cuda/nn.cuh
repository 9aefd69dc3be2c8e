// The layer pieces the Q net and the auxiliary learners share (as src/cpu/nn.hpp is the
// CPU's): bias + SiLU, and Adam.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace fh::cuda {

// act = SiLU(pre + bias) (bias per column) on Z stacked row-major [rows, cols] matrices
// (matrix z at z·rows·cols) whose biases lie zbias floats apart. The float expression of
// src/cpu/nn.hpp, element by element (vectorised by four where alignment allows). pre keeps the
// GEMM's product without the bias: a backward that needs the pre-activation adds the bias to it
// itself, in the same float addition (so the same bits), and the layer's activations are
// written once, not twice (bench/results/h200-2026-12-01-pre-bias-before-after.json). act may be
// pre (a forward-only pass, in place).
void bias_silu(const float *pre, float *act, const float *bias, size_t rows, int cols,
               cudaStream_t s, int Z = 1, size_t zbias = 0);

// Adam (Kingma & Ba 2015, Algorithm 1; SPEC §5.6) on n flat parameters, as src/cpu/nn.cpp
// adam(): t = *step + 1 read on the device, 1 − β^t in float64 rounded to float32. Unclipped
// (the learners' Adam steps).
void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s);

// ‖g‖ not yet summed: the nb partial sums of squares reduce_f32 (op 1) left (reduce.cuh).
struct NormPartials {
    const double *partial;
    int nb;
    float *out;  // ‖g‖, the metric: written by block 0, read by no other block
};
// The same with SPEC §5.6's global-norm clipping (g scaled by clip / ‖g‖ when ‖g‖ > clip), the
// norm's final sum folded in: each block forms (float)sqrt(Σ partial) itself, with the double
// additions of reduce_final in its order (device_math.cuh wide_block_sum), so the norm, the
// scale and every parameter keep the bits of reduce_final then Adam, one kernel fewer in the
// adam child's chain (adam_q.cu).
void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s, const NormPartials &norm,
          float clip);

}  // namespace fh::cuda
