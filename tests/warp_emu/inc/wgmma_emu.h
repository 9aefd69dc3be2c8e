#pragma once
// The warpgroup product of cuda/wgmma.cuh, emulated (prepare.py puts a call to this in place of
// its asm): wgmma.mma_async m64n32k8 .f32.tf32.tf32 with A from registers and B from shared memory
// by descriptor (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": the register
// fragments of A and D, the matrix descriptor, the 128-byte swizzle), the products summed in
// double. The warpgroup's 128 threads exchange their A registers at its barrier (grid.h's
// run_grid with together = 4); the emulation completes at once, so fence, commit and wait are
// no-ops.
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "mma_emu.h"

namespace emu {

inline void tf32_or_abort(uint32_t r, const char *what) {
    // The tensor cores read a TF32 operand's top 19 bits (see mma_emu.h).
    if (r & 0x1fffu) {
        fprintf(stderr, "warp_emu: a TF32 %s operand not rounded to TF32\n", what);
        std::abort();
    }
}

// B[k][n] (k < 8) of a K-major operand in the 128-byte swizzled layout, by descriptor: row n at
// start + (n / 8)·SBO + (n mod 8)·128, element k 4 bytes further, and the 16-byte piece index
// (address bits 4..6) XOR-ed with the row within the 1024-byte pattern (bits 7..9).
inline float b_element(uint64_t desc, int k, int n) {
    if ((desc >> 62) != 1) {
        fprintf(stderr, "warp_emu: a wgmma descriptor without the 128-byte swizzle\n");
        std::abort();
    }
    const uint32_t start = (uint32_t)(desc & 0x3fffu) << 4;
    const uint32_t sbo = (uint32_t)((desc >> 32) & 0x3fffu) << 4;
    const uint32_t logical = start + (uint32_t)(n >> 3) * sbo + (uint32_t)(n & 7) * 128 + 4 * k;
    const uint32_t physical = logical ^ (((logical >> 7) & 7u) << 4);
    uint32_t r;
    memcpy(&r, reinterpret_cast<const char *>(gSmem) + physical, 4);
    tf32_or_abort(r, "B");
    return __uint_as_float(r);
}

// d[64 × 32] += A[64 × 8] · B[8 × 32]: thread (warp v of the warpgroup, g, t) holds A's
// (16v + g, t), (16v + g + 8, t), (16v + g, t + 4), (16v + g + 8, t + 4) and D's rows 16v + g
// (+ 8), columns 8i + 2t (+ 1) in d[i].
inline void wgmma_m64n32k8(float (&d)[4][4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                           uint64_t desc) {
    Warpgroup &G = *gWG;
    const int me = threadIdx.x & 127;
    G.bar.arrive_and_wait();
    G.A[me][0] = a0;
    G.A[me][1] = a1;
    G.A[me][2] = a2;
    G.A[me][3] = a3;
    G.bar.arrive_and_wait();
    auto A = [&](int row, int k) {  // the owner of A[row][k] and its register
        const int v = row >> 4, g = row & 7, hi = (row & 15) >> 3, t = k & 3;
        const uint32_t r = G.A[32 * v + 4 * g + t][hi + 2 * (k >> 2)];
        tf32_or_abort(r, "A");
        return (double)__uint_as_float(r);
    };
    const int v = me >> 5, g = (me & 31) >> 2, t = me & 3;
    float out[4][4];
    for (int i = 0; i < 4; ++i)
        for (int e = 0; e < 4; ++e) {
            const int row = 16 * v + g + 8 * (e >> 1), col = 8 * i + 2 * t + (e & 1);
            double sum = 0;
            for (int k = 0; k < 8; ++k) sum += A(row, k) * (double)b_element(desc, k, col);
            out[i][e] = (float)(sum + (double)d[i][e]);
        }
    G.bar.arrive_and_wait();
    for (int i = 0; i < 4; ++i)
        for (int e = 0; e < 4; ++e) d[i][e] = out[i][e];
}

}  // namespace emu
