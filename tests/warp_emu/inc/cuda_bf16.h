#pragma once
// Host stand-ins for cuda_bf16.h's bfloat16 type and conversions (round to nearest even).
#include "cuda_runtime.h"

struct __nv_bfloat16 {
    uint16_t x;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float bf16_to_f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {bf16_rne(f)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {{bf16_rne(a)}, {bf16_rne(b)}};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
