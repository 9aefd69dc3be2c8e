// The layer pieces the Q net and the auxiliary learners share (as src/cpu/nn.hpp is the
// CPU's): bias + SiLU.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace fh::cuda {

// pre += bias (per column), act = SiLU(pre), on Z stacked row-major [rows, cols] matrices
// (matrix z at z·rows·cols) whose biases lie zbias floats apart. The float expression of
// src/cpu/nn.hpp, element by element (vectorised by four where alignment allows).
void bias_silu(float *pre, float *act, const float *bias, size_t rows, int cols, cudaStream_t s,
               int Z = 1, size_t zbias = 0);

}  // namespace fh::cuda
