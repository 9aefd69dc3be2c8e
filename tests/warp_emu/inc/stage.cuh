#pragma once
// stage.cuh's stage_batched without its batching (the same stores), and cp.async as copies
// deferred to the thread's wait that covers them (cp_async_wait_all(), or cp_async_wait<N>() for
// committed groups): a read of the destination before that wait sees what was there before (NaN
// at a tile's start), as the GPU may.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

namespace fh::cuda {
template <int U, class T, class Load, class Store>
inline void stage_batched(int n, Load load, Store store) {
    for (int e = threadIdx.x; e < n; e += (int)blockDim.x) store(e, load(e));
}

using CpGroup = std::vector<std::pair<void *, const void *>>;
inline thread_local CpGroup gCpAsync;                // copies not yet committed
inline thread_local std::deque<CpGroup> gCpGroups;  // committed groups, oldest first
inline void cp_async16(void *smem, const void *gmem) {
    if ((uintptr_t)smem % 16 || (uintptr_t)gmem % 16) abort();  // cp.async's 16-byte alignment
    gCpAsync.emplace_back(smem, gmem);
}
inline void cp_land(CpGroup &g) {
    for (const auto &c : g) memcpy(c.first, c.second, 16);
    g.clear();
}
inline void cp_async_commit() {
    gCpGroups.push_back(std::move(gCpAsync));
    gCpAsync.clear();
}
// Lands all but the N newest committed groups (and never the uncommitted copies), as late as
// the GPU may: a read of a slot whose group is still in flight sees the old contents.
template <int N>
inline void cp_async_wait() {
    while (gCpGroups.size() > (size_t)N) {
        cp_land(gCpGroups.front());
        gCpGroups.pop_front();
    }
}
inline void cp_async_wait_all() {
    cp_async_wait<0>();
    cp_land(gCpAsync);
}
}  // namespace fh::cuda
