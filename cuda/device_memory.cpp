#include "device_memory.hpp"

#include <cstring>

#include <cuda_runtime.h>

#include "common.hpp"

namespace fh::cuda {

void *DeviceMemory::alloc(MemCat cat, size_t bytes) {
    void *p = nullptr;
    if (bytes == 0) bytes = 256;
    FH_CUDA(cudaMalloc(&p, bytes));
    dev_.push_back(p);
    FH_CUDA(cudaMemset(p, 0, bytes));
    bytes_[cat] += bytes;
    return p;
}

void *DeviceMemory::pinned(MemCat cat, size_t bytes) {
    void *h = nullptr;
    FH_CUDA(cudaHostAlloc(&h, bytes, cudaHostAllocDefault));
    host_.push_back(h);
    memset(h, 0, bytes);
    if (cat != MEM_CATS) bytes_[cat] += bytes;
    return h;
}

void DeviceMemory::release() noexcept {
    for (void *p : dev_) cudaFree(p);
    for (void *p : host_) cudaFreeHost(p);
    dev_.clear();
    host_.clear();
    for (size_t &b : bytes_) b = 0;
}

}  // namespace fh::cuda
