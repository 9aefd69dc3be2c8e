#pragma once
// stage.cuh's stage_batched without its batching (the same stores), and cp.async as copies
// deferred to the thread's next cp_async_wait_all(), or to the cp_async_wait_group() that waits
// for their group: a read of the destination before the wait sees what was there before (NaN at
// a tile's start), as the GPU may.
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
// Committed groups (cp_async_commit), oldest first; cp_async_wait_all() lands them all.
inline thread_local std::vector<std::vector<std::pair<void *, const void *>>> gCpGroups;
inline void cp_async_wait_all() {
    for (const auto &g : gCpGroups)
        for (const auto &c : g) memcpy(c.first, c.second, 16);
    gCpGroups.clear();
    for (const auto &c : gCpAsync) memcpy(c.first, c.second, 16);
    gCpAsync.clear();
}
inline void cp_async_commit() {
    gCpGroups.push_back(std::move(gCpAsync));
    gCpAsync.clear();
}
// Lands the thread's oldest groups until at most N are in flight.
template <int N>
inline void cp_async_wait_group() {
    while (gCpGroups.size() > (size_t)N) {
        for (const auto &c : gCpGroups.front()) memcpy(c.first, c.second, 16);
        gCpGroups.erase(gCpGroups.begin());
    }
}
}  // namespace fh::cuda
