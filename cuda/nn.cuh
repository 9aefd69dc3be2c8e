// The layer pieces the Q net and the auxiliary learners share (as src/cpu/nn.hpp is the
// CPU's): bias + SiLU.
#pragma once
#include <cuda_runtime.h>

namespace fh::cuda {

// pre += b (row bias), act = SiLU(pre); [M, N] row-major.
void bias_silu(float *pre, float *act, const float *b, int M, int N, cudaStream_t s);

}  // namespace fh::cuda
