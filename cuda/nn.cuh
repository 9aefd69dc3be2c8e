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
// itself (pre_bias), in the same float addition, so that the layer's activations are written
// once, not twice. act may be pre (a forward-only pass, in place).
void bias_silu(float *pre, float *act, const float *bias, size_t rows, int cols, cudaStream_t s,
               int Z = 1, size_t zbias = 0);

// Trial switch, read at each call (capture time), removed once its before/after table is
// archived: FOXHUNT_PRE=stored keeps the earlier bias_silu, which wrote pre + bias back into pre.
bool pre_stores_bias();
// The bias a reader of a bias_silu layer's `pre` adds to it: `b`, or nullptr when pre already
// holds it (FOXHUNT_PRE=stored).
inline const float *pre_bias(const float *b) { return pre_stores_bias() ? nullptr : b; }

// Adam (Kingma & Ba 2015, Algorithm 1; SPEC §5.6) on n flat parameters, as src/cpu/nn.cpp
// adam(): t = *step + 1 read on the device, 1 − β^t in float64 rounded to float32. With
// grad_norm given (on the device), g is first scaled by clip / ‖g‖ when ‖g‖ > clip (SPEC §5.6
// global-norm clipping); without, by 1.
void adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
          float beta2, float eps, const uint64_t *step, cudaStream_t s,
          const float *grad_norm = nullptr, float clip = 0.0f);

}  // namespace fh::cuda
