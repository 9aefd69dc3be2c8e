// Host references of the tensor cores' operand roundings, for the CUDA tests that check a
// product against float64 sums of the rounded operands: TF32 as the kernels round (round to
// nearest, 10 stored mantissa bits; tf32 below) and bfloat16 as __float2bfloat16_rn rounds
// (round to nearest even, 7 stored bits), both kept as floats. NaN stays NaN. Header-only.
#ifndef FOXHUNT_TEST_OPERAND_ROUND_HPP
#define FOXHUNT_TEST_OPERAND_ROUND_HPP

#include <cmath>
#include <cstdint>
#include <cstring>

namespace operand_round {

// TF32 as cuda/mma_tf32.cuh's to_tf32 rounds: ties away (cvt.rna), or, under its trial
// FOXHUNT_TF32_OPERAND=1 (defined for these tests too by run_device_quick.sh ab-build), ties to
// even (cvt.rn).
inline float tf32(float x) {
    if (std::isnan(x)) return x;
    uint32_t u;
    std::memcpy(&u, &x, 4);
#if defined(FOXHUNT_TF32_OPERAND) && FOXHUNT_TF32_OPERAND == 1
    u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
#else
    u = (u + 0x1000u) & ~0x1FFFu;
#endif
    std::memcpy(&x, &u, 4);
    return x;
}

inline float bf16_rne(float x) {
    if (std::isnan(x)) return x;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

}  // namespace operand_round

#endif
