// Every device and pinned host allocation of a CUDA pipeline, counted by fh_memory_report
// category (fh_pipeline_memory) and freed together.
#pragma once
#include <cstddef>
#include <vector>

namespace fh::cuda {

// fh_memory_report's fields: parameters, activations, workspaces, batch_staging, replay.
enum MemCat { MEM_PARAMS = 0, MEM_ACT, MEM_WS, MEM_STAGING, MEM_REPLAY, MEM_CATS };

class DeviceMemory {
public:
    DeviceMemory() = default;
    DeviceMemory(const DeviceMemory &) = delete;
    DeviceMemory &operator=(const DeviceMemory &) = delete;
    ~DeviceMemory() { release(); }

    // cudaMalloc'd (so 256-byte aligned) and zeroed; `bytes` = 0 still gets a small block.
    void *alloc(MemCat cat, size_t bytes);
    template <class T>
    T *alloc_n(MemCat cat, size_t n) { return static_cast<T *>(alloc(cat, n * sizeof(T))); }
    float *floats(MemCat cat, size_t n) { return alloc_n<float>(cat, n); }
    // Pinned host memory, zeroed; counted under `cat`, or not at all when cat is MEM_CATS.
    void *pinned(MemCat cat, size_t bytes);

    size_t bytes(MemCat cat) const { return bytes_[cat]; }
    // Frees everything (the caller has synchronised the streams that use it).
    void release() noexcept;

private:
    std::vector<void *> dev_, host_;
    size_t bytes_[MEM_CATS] = {};
};

}  // namespace fh::cuda
