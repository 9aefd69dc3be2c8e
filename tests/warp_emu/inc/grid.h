#pragma once
// Running a grid on the CPU (tests/warp_emu/README.md): block after block, each block's shared
// memory first filled with NaN and staged thread by thread by `stage`, then its warps one after
// another, each warp 32 threads calling `kernel`; with together = 4, a warpgroup (4 warps, 128
// threads) at a time, for kernels whose warpgroup products need all four (wgmma_emu.h); with
// together = nwarps (not 4), the whole block at once, __syncthreads its barrier.
#include <cuda_runtime.h>

#include <thread>
#include <vector>

template <class Stage, class Kernel>
void run_grid(int blocks, int nwarps, size_t smem_bytes, Stage &&stage, Kernel &&kernel,
              int together = 1) {
    gridDim.x = blocks;
    blockDim.x = 32 * nwarps;
    std::vector<float4> sm(smem_bytes / 16 + 1);
    for (int b = 0; b < blocks; ++b) {
        for (auto &f : sm) f = make_float4(NAN, NAN, NAN, NAN);
        gSmem = sm.data();
        blockIdx.x = b;
        for (unsigned t = 0; t < blockDim.x; ++t) {
            threadIdx.x = t;
            stage();
        }
        for (int w0 = 0; w0 < nwarps; w0 += together) {
            std::vector<Warp> W(together);
            Warpgroup G;
            std::barrier<> blk(32 * together);
            const bool whole = together == nwarps && together != 4;
            std::vector<std::thread> th;
            for (int l = 0; l < 32 * together; ++l)
                th.emplace_back([&, l] {
                    threadIdx.x = 32 * w0 + l;
                    blockIdx.x = b;
                    gW = &W[l / 32];
                    gWG = together == 4 ? &G : nullptr;
                    gBlk = whole ? &blk : nullptr;
                    kernel();
                });
            for (auto &t : th) t.join();
        }
    }
}
