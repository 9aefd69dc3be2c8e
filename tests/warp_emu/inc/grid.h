#pragma once
// Running a grid on the CPU (tests/warp_emu/README.md): block after block, each block's shared
// memory first filled with NaN and staged thread by thread by `stage`, then its warps one after
// another, each warp 32 threads calling `kernel`.
#include <cuda_runtime.h>

#include <thread>
#include <vector>

template <class Stage, class Kernel>
void run_grid(int blocks, int nwarps, size_t smem_bytes, Stage &&stage, Kernel &&kernel) {
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
        for (int w = 0; w < nwarps; ++w) {
            Warp W;
            std::vector<std::thread> th;
            for (int l = 0; l < 32; ++l)
                th.emplace_back([&, l] {
                    threadIdx.x = 32 * w + l;
                    blockIdx.x = b;
                    gW = &W;
                    kernel();
                });
            for (auto &t : th) t.join();
        }
    }
}
