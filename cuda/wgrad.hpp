// The step's weight gradients dW = dyᵀ x (a contraction over the batch's rows, K ≥ 8192, into
// a small output) as our own TF32 tensor-core kernel, in place of cuBLAS's split-K GEMM and its
// reduction kernel; cuda/wgrad.cu says why and how. gemm() (gemm.cpp) hands it the TF32 GEMMs
// of the tn form (gemm.hpp) that wgrad_fits() accepts when the lane's Blas::own_wgrad is set.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#include "gemm.hpp"

namespace fh::cuda {

// Whether wgrad() computes g (cuBLAS's terms: C[m, n] = A[m, k] · op_T(B)[k, n], i.e. the tn
// form's row-major dW[M = n, N = m] = G[K, M]ᵀ X[K, N] with G = g.b, X = g.a) with `beta` within
// `ws_bytes` of workspace: opa N, opb T, beta 0, k ≥ 8192, M and N in [64, 1024] and multiples
// of 4, C packed (ldc = N), G's and X's row strides multiples of 4 floats and both 16-byte
// aligned, and the chunk partials fit.
bool wgrad_fits(const GemmDesc &g, float beta, size_t ws_bytes);

// C = op(a)·op(b) for a g (and beta = 0) that wgrad_fits() accepts, on the handle's stream, its chunk
// partials in the handle's workspace (bl.ws). Operands rounded to TF32 (to nearest, ties away,
// as cvt.rna), products accumulated in float32 per chunk of rows, the chunks summed in order in
// float64. Deterministic (no atomics; the chunking depends on the shape only).
void wgrad(const Blas &bl, const GemmDesc &g, float beta, cudaStream_t s);

}  // namespace fh::cuda
