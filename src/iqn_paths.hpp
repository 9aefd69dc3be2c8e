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
    // The backward through m, with the online pass. With it dWφ is cuda/iqn_dwphi.cu's
    // kernel, which forms the cosines from τ: the online pass stores none, and cos's buffer
    // holds the kernel's partials (iqn_dwphi_partial_floats) instead.
    bool backward = false;
    // FH_MATH_BF16 with the fused backward: the weight gradients' other operands (m, dhpre,
    // dφpre) are stored as bfloat16, so dhpre takes half its float32 buffer, m and dφpre share
    // m's, and φ's float32 buffer is not allocated.
    bool bf16_operands = false;
};

// The grid of IQN's dWφ kernel (cuda/iqn_dwphi.cu) over `rows` rows: contiguous chunks of whole
// 64-row stages, at most max_blocks of them, each block writing one partial. A function of the
// rows alone, so that the memory plan counts the partials without a device.
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

// TF32 and BF16 modes fuse every pass whose shapes fit; strict FP32 none.
// FOXHUNT_IQN_KERNELS = unfused | target | online | fused | auto (the default, = fused) caps
// how many (for tests and side-by-side timing); any other value fails with FH_ERR_BAD_VALUE.
IqnPaths iqn_paths(const Dims &d, const fh_config &c);

}  // namespace fh
