#pragma once
// stage.cuh's stage_batched without its batching (the same stores; cp.async is not emulated).
namespace fh::cuda {
template <int U, class T, class Load, class Store>
inline void stage_batched(int n, Load load, Store store) {
    for (int e = threadIdx.x; e < n; e += (int)blockDim.x) store(e, load(e));
}
}  // namespace fh::cuda
