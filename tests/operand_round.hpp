// Host references of the tensor cores' operand roundings, for the CUDA tests that check a
// product against float64 sums of the rounded operands: TF32 as cuda/mma_tf32.cuh's to_tf32
// (cvt.rn) rounds (round to nearest even, 10 stored mantissa bits) and bfloat16 as
// __float2bfloat16_rn rounds (round to nearest even, 7 stored bits), both kept as floats. NaN
// stays NaN. Header-only.
#ifndef FOXHUNT_TEST_OPERAND_ROUND_HPP
#define FOXHUNT_TEST_OPERAND_ROUND_HPP

#include <cmath>
#include <cstdint>
#include <cstring>

namespace operand_round {

inline float tf32(float x) {
    if (std::isnan(x)) return x;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
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
