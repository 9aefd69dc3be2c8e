#pragma once
// stage.cuh's stage_batched without its batching (the same stores), and cp.async as copies
// deferred to the wait that covers them (cp_async_wait_all(), or for a committed group the
// cp.async.wait_group that leaves fewer groups pending): a read of the destination before it sees
// what was there before (NaN at a tile's start), as the GPU may.
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

// The thread's copies not yet committed, then its committed groups, oldest first.
inline thread_local std::vector<std::pair<void *, const void *>> gCpAsync;
inline thread_local std::vector<std::vector<std::pair<void *, const void *>>> gCpGroups;
inline void cp_async16(void *smem, const void *gmem) {
    if ((uintptr_t)smem % 16 || (uintptr_t)gmem % 16) abort();  // cp.async's 16-byte alignment
    gCpAsync.emplace_back(smem, gmem);
}
inline void cp_async_land(const std::vector<std::pair<void *, const void *>> &g) {
    for (const auto &c : g) memcpy(c.first, c.second, 16);
}
// cp.async.commit_group: the copies since the last commit become the newest group (maybe empty).
inline void cp_async_commit() {
    gCpGroups.push_back(std::move(gCpAsync));
    gCpAsync.clear();
}
// cp.async.wait_group n: every group but the newest n has landed.
template <int N>
inline void cp_async_wait_group() {
    while ((int)gCpGroups.size() > N) {
        cp_async_land(gCpGroups.front());
        gCpGroups.erase(gCpGroups.begin());
    }
}
// cp.async.wait_all: every copy, committed or not.
inline void cp_async_wait_all() {
    cp_async_wait_group<0>();
    cp_async_land(gCpAsync);
    gCpAsync.clear();
}
}  // namespace fh::cuda
