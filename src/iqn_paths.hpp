// Which of the IQN learner's passes the CUDA executor runs fused on tensor cores
// (cuda/iqn_target.cu, iqn_online.cu, iqn_backward.cu; cuda/iqn.cu picks them): plain data
// here so that the memory plan counts the buffers the learner allocates.
#pragma once
#include <foxhunt.h>

#include "config.hpp"

namespace fh {

// The widths the fused kernels are written for.
constexpr uint32_t kIqnFusedHidden = 128, kIqnFusedCos = 64;

struct IqnPaths {
    bool target = false;    // the target pass after ψ̄: iqn_hidden = 128, iqn_cos = 64
    bool online = false;    // the online pass and head: also 16 % iqn_n == 0
    bool backward = false;  // the backward through m: with the online pass
    // FH_MATH_BF16 with the fused backward: the weight gradients' operands (cos, m, dhpre, dφpre)
    // are stored as bfloat16, so cos and dhpre take half their float32 buffers, m and dφpre
    // share m's, and φ's float32 buffer is not allocated.
    bool bf16_operands = false;
};

// TF32 and BF16 modes fuse every pass whose shapes fit; strict FP32 none.
// FOXHUNT_IQN_KERNELS = unfused | target | online | fused | auto (the default, = fused) caps
// how many (for tests and side-by-side timing); any other value fails with FH_ERR_BAD_VALUE.
IqnPaths iqn_paths(const Dims &d, const fh_config &c);

}  // namespace fh
