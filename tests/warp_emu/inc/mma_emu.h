#pragma once
// The PTX instructions of cuda/mma_tf32.cuh and cuda/mma_bf16.cuh, emulated (prepare.py puts
// calls to these in place of their asm): cvt.rn.tf32.f32, and mma.sync m16n8k8 TF32 and m16n8k16
// bfloat16 by the PTX ISA's fragment tables ("Matrix Fragments for mma.m16n8k8" / "m16n8k16"),
// the products summed in double. The warp's lanes exchange their fragments at its barrier.
#include <cstdio>
#include <cstdlib>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace emu {

// Round to TF32, to nearest with ties to even (cvt.rn), kept as a float32 bit pattern. Infinity
// stays; a NaN becomes 0x7fffe000, as the H100 printed for 0x7fc00000 (bench/repro/tf32_cvt.cu).
inline uint32_t to_tf32(float x) {
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x007fffffu) ? 0x7fffe000u : u;
    return (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
}

// c += A·B for the warp, K = 8 (TF32: each register one element) or 16 (bfloat16: two, the lower
// index in the low half). A [16 x K] row-major, B [K x 8] "col", C [16 x 8].
template <int K>
inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    Warp &W = *gW;
    const int l = threadIdx.x & 31;
    W.bar.arrive_and_wait();
    for (int i = 0; i < 4; ++i) W.A[l][i] = a[i];
    W.B[l][0] = b0;
    W.B[l][1] = b1;
    W.bar.arrive_and_wait();
    double Am[16][K], Bm[K][8];
    auto lo = [](uint32_t r) { return (double)bf16_to_f((uint16_t)(r & 0xffffu)); };
    auto hi = [](uint32_t r) { return (double)bf16_to_f((uint16_t)(r >> 16)); };
    for (int L = 0; L < 32; ++L) {
        const int g = L >> 2, t = L & 3;
        const uint32_t *A = W.A[L], *B = W.B[L];
        // The tensor cores read a TF32 operand's top 19 bits: one with any of the low 13 set was
        // not rounded (cvt.rna) where the kernel should have rounded it.
        if (K == 8 && ((A[0] | A[1] | A[2] | A[3] | B[0] | B[1]) & 0x1fffu)) {
            fprintf(stderr, "warp_emu: a TF32 operand not rounded to TF32 (lane %d)\n", L);
            std::abort();
        }
        if constexpr (K == 8) {  // a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
            Am[g][t] = __uint_as_float(A[0]);
            Am[g + 8][t] = __uint_as_float(A[1]);
            Am[g][t + 4] = __uint_as_float(A[2]);
            Am[g + 8][t + 4] = __uint_as_float(A[3]);
            Bm[t][g] = __uint_as_float(B[0]);  // b0 = B[t][g], b1 = B[t+4][g]
            Bm[t + 4][g] = __uint_as_float(B[1]);
        } else {  // a0 = A[g][2t, 2t+1], a1 = A[g+8][..], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][..]
            Am[g][2 * t] = lo(A[0]);
            Am[g][2 * t + 1] = hi(A[0]);
            Am[g + 8][2 * t] = lo(A[1]);
            Am[g + 8][2 * t + 1] = hi(A[1]);
            Am[g][2 * t + 8] = lo(A[2]);
            Am[g][2 * t + 9] = hi(A[2]);
            Am[g + 8][2 * t + 8] = lo(A[3]);
            Am[g + 8][2 * t + 9] = hi(A[3]);
            Bm[2 * t][g] = lo(B[0]);  // b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
            Bm[2 * t + 1][g] = hi(B[0]);
            Bm[2 * t + 8][g] = lo(B[1]);
            Bm[2 * t + 9][g] = hi(B[1]);
        }
    }
    // c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
    const int g = l >> 2, t = l & 3;
    const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    float out[4];
    for (int e = 0; e < 4; ++e) {
        double sum = 0;
        for (int k = 0; k < K; ++k) sum += Am[rr[e]][k] * Bm[k][cc[e]];
        out[e] = (float)(sum + (double)c[e]);
    }
    W.bar.arrive_and_wait();
    for (int e = 0; e < 4; ++e) c[e] = out[e];
}

}  // namespace emu
