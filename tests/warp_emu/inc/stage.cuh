#pragma once
// stage.cuh's stage_batched without its batching (the same stores), and cp.async as copies
// deferred to the thread's next cp_async_wait_all(): a read of the destination before the wait
// sees what was there before (NaN at a tile's start), as the GPU may.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace fh::cuda {
template <int U, class T, class Load, class Store>
inline void stage_batched(int n, Load load, Store store) {
    for (int e = threadIdx.x; e < n; e += (int)blockDim.x) store(e, load(e));
}

inline thread_local std::vector<std::pair<void *, const void *>> gCpAsync;
inline void cp_async16(void *smem, const void *gmem) {
    if ((uintptr_t)smem % 16 || (uintptr_t)gmem % 16) abort();  // cp.async's 16-byte alignment
    gCpAsync.emplace_back(smem, gmem);
}
inline void cp_async_wait_all() {
    for (const auto &c : gCpAsync) memcpy(c.first, c.second, 16);
    gCpAsync.clear();
}
}  // namespace fh::cuda
