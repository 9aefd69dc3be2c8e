// Copying a block's operands from global into shared memory with many loads in flight.
//
// Why: the plain loop `for (e = tid; e < n; e += blockDim.x) dst[f(e)] = g(__ldg(src + e))`
// compiles to one load, a wait for it and one store per trip: every thread waits a full memory
// round trip per element. Nsight's per-instruction samples on the H200 (2026-12-02, B = 16384)
// put 11 to 37 % of the fused IQN kernels' stalls on that wait (IQN's three kernels stage 64 or
// 96 elements per thread) and 5 to 7 % of the tensor-core attention kernels'. stage_batched
// issues U loads per thread before it stores any of them, so a thread waits ⌈n / (U·blockDim)⌉
// round trips instead of ⌈n / blockDim⌉. The copies are the same: the same values land in the
// same places. Samples before and after: bench/results/h200-2026-12-02-ncu-source-iqn.txt.
#pragma once

namespace fh::cuda {

// For e in [0, n), grid-stride over the block's threads: store(e, load(e)), U loads at a time.
template <int U, class T, class Load, class Store>
__device__ __forceinline__ void stage_batched(int n, Load load, Store store) {
    for (int e0 = threadIdx.x; e0 < n; e0 += U * (int)blockDim.x) {
        T v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int e = e0 + u * (int)blockDim.x;
            if (e < n) v[u] = load(e);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int e = e0 + u * (int)blockDim.x;
            if (e < n) store(e, v[u]);
        }
    }
}

// Asynchronous 16-byte copies global → shared (cp.async.cg: through L2 only, PTX ISA
// "cp.async"): a warp starts a tile's copies, computes, then waits for them with
// cp_async_wait_all() and __syncwarp(). Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace fh::cuda
