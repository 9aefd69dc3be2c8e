// Device memory for the CUDA tests: a checked CUDA call and a device copy of host data freed with
// its object (so a failing test, which longjmps out, leaks nothing it allocated this way).
// Header-only; include after cmocka.h, in a build with CUDA.
#ifndef FOXHUNT_TEST_CUDA_DEV_HPP
#define FOXHUNT_TEST_CUDA_DEV_HPP

#include <cuda_runtime.h>

#include <vector>

namespace cuda_test {

inline void cuda_ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) fail_msg("%s: %s", what, cudaGetErrorString(e));
}

// cudaMemcpy from host to device, then waits for it: from pageable memory cudaMemcpy may return
// before its DMA has landed (CUDA's "API synchronization behavior"), and the library reads device
// input on its own non-blocking streams, which do not wait for the legacy stream's copy. Without
// the wait a test that pokes a NaN into a device batch can see the library read the old value
// (test_cuda_device_input did, under ctest -j16 on the H200).
inline void to_device(void *dst, const void *src, size_t bytes, const char *what) {
    cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
    cuda_ok(cudaStreamSynchronize(cudaStreamLegacy), what);
}

// A device copy of host data, freed with the object.
struct Dev {
    void *p = nullptr;
    size_t n = 0;
    Dev(const void *src, size_t bytes) : n(bytes) {
        cuda_ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
        if (src && bytes) to_device(p, src, bytes, "to device");
    }
    explicit Dev(size_t bytes) : Dev(nullptr, bytes) {}
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    Dev(Dev &&o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
    ~Dev() { cudaFree(p); }
    template <class T> std::vector<T> get() const {
        std::vector<T> v(n / sizeof(T));
        cuda_ok(cudaMemcpy(v.data(), p, n, cudaMemcpyDeviceToHost), "to host");
        return v;
    }
};

template <class T> Dev dev_of(const std::vector<T> &v) { return Dev(v.data(), v.size() * sizeof(T)); }

}  // namespace cuda_test

#endif
