// Whether the CUDA IQL learner runs its forward pass, expectile head and input-side backward as
// one fused tensor-core kernel (cuda/iql_fused.cu; cuda/iql.cu picks it): plain data here so that
// the memory plan counts the buffers the learner allocates.
#pragma once
#include <foxhunt.h>

#include "config.hpp"

namespace fh {

// The hidden width the fused kernel is written for, and the widest input x̃ it stages.
constexpr uint32_t kIqlFusedHidden = 128, kIqlFusedMaxInput = 128;

// TF32 and BF16 modes at iql_hidden = 128 with D = obs_dim + goal_dim a multiple of 8 up to 128;
// strict FP32 and other widths run the cuBLAS GEMMs with separate bias, SiLU and head kernels.
// FOXHUNT_IQL_KERNELS = unfused | fused | auto (the default, = fused where it fits) picks the
// path for tests and side-by-side timing; any other value fails with FH_ERR_BAD_VALUE.
bool iql_fused(const Dims &d, const fh_config &c);

}  // namespace fh
