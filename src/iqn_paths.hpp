// Which of the IQN learner's passes the CUDA executor runs fused on tensor cores
// (cuda/iqn_target.cu, iqn_online.cu, iqn_backward.cu; cuda/iqn.cu picks them): plain data
// here so that the memory plan counts the buffers the learner allocates.
#pragma once
#include <cstdint>

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
    // TF32 with the fused backward: dWφ by cuda/iqn_dwphi.cu's kernel, which forms the
    // cosines from τ, so the online pass stores none and cos's buffer holds the kernel's
    // partials (iqn_dwphi_partial_floats) instead. In BF16 too with the trial switch
    // FOXHUNT_TRIAL_DWPHI_BF16=1 (the kernel's bfloat16 instance).
    bool dwphi_kernel = false;
    // A trial (FOXHUNT_TRIAL_IQN_DWM=1, TF32 with the fused backward): dWm by cuda/iqn_dwm.cu's
    // kernel, which recomputes m, so the online pass stores none and m's buffer holds the
    // kernel's partials (iqn_dwm_partial_floats) instead.
    bool dwm_kernel = false;
};

// The grids of IQN's weight-gradient kernels over `rows` rows (cuda/iqn_dwphi.cu, and
// cuda/iqn_dwm.cu's trial): contiguous chunks of whole 64-row stages, at most max_blocks of them,
// each block writing one partial. A function of the rows alone, so that the memory plan counts
// the partials without a device.
constexpr uint64_t kIqnWgradStageRows = 64;
inline uint64_t iqn_wgrad_chunk(uint64_t rows, uint64_t max_blocks) {
    const uint64_t stages = rows ? (rows + kIqnWgradStageRows - 1) / kIqnWgradStageRows : 1;
    return (stages + max_blocks - 1) / max_blocks * kIqnWgradStageRows;
}
inline uint64_t iqn_wgrad_blocks(uint64_t rows, uint64_t max_blocks) {
    const uint64_t chunk = iqn_wgrad_chunk(rows, max_blocks);
    return rows ? (rows + chunk - 1) / chunk : 1;
}
// dWφ: at most 256 blocks (two per SM on a 132-SM H100 or H200), [128, 64] partials.
constexpr uint64_t kIqnDwphiMaxBlocks = 256;
inline uint64_t iqn_dwphi_partial_floats(uint64_t rows) {
    return iqn_wgrad_blocks(rows, kIqnDwphiMaxBlocks) * kIqnFusedHidden * kIqnFusedCos;
}
// dWm (the FOXHUNT_TRIAL_IQN_DWM trial): at most 128 blocks (one per SM), [128, 128] partials.
constexpr uint64_t kIqnDwmMaxBlocks = 128;
inline uint64_t iqn_dwm_partial_floats(uint64_t rows) {
    return iqn_wgrad_blocks(rows, kIqnDwmMaxBlocks) * kIqnFusedHidden * kIqnFusedHidden;
}

// TF32 and BF16 modes fuse every pass whose shapes fit; strict FP32 none. The trial switches
// above are "1" to turn on; any other value leaves them off.
// FOXHUNT_IQN_KERNELS = unfused | target | online | fused | auto (the default, = fused) caps
// how many (for tests and side-by-side timing); any other value fails with FH_ERR_BAD_VALUE.
IqnPaths iqn_paths(const Dims &d, const fh_config &c);

}  // namespace fh
