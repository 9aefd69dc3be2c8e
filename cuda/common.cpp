#include "common.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "backend.hpp"

namespace fh {

bool cuda_available(int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    if (device < 0 || device >= n) return false;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    // The library carries sm_90 code and compute_90 PTX: Hopper or newer.
    return prop.major >= 9;
}

}  // namespace fh

namespace fh::cuda {

int sm_count() {
    int dev = 0, sms = 0;
    FH_CUDA(cudaGetDevice(&dev));
    FH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms > 1 ? sms : 1;
}

namespace {

// run_probe's answers per (device, probe): the loaded code cannot change while the process lives,
// and each pipeline's creation asks again.
std::mutex g_probe_mutex;
std::map<std::pair<int, const void *>, int> g_probe_answers;

}  // namespace

int run_probe(const void *probe) {
    int dev = 0;
    FH_CUDA(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(g_probe_mutex);
    const auto key = std::make_pair(dev, probe);
    const auto it = g_probe_answers.find(key);
    if (it != g_probe_answers.end()) return it->second;
    int *flag = nullptr, host = 0;
    FH_CUDA(cudaMalloc(&flag, sizeof(int)));
    void *args[] = {&flag};
    const cudaError_t launched = cudaLaunchKernel(probe, dim3(1), dim3(1), args, 0, nullptr);
    const cudaError_t copied = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(flag);
    FH_CUDA(launched);
    FH_CUDA(copied);
    g_probe_answers.emplace(key, host);
    return host;
}

void throw_cuda(cudaError_t e, const char *call, const char *file, int line) {
    const char *base = strrchr(file, '/');
    fail(e == cudaErrorMemoryAllocation ? FH_ERR_OUT_OF_MEMORY : FH_ERR_CUDA,
         "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e), cudaGetErrorString(e),
         base ? base + 1 : file, line);
}

void throw_cublas(cublasStatus_t s, const char *call, const char *file, int line) {
    const char *base = strrchr(file, '/');
    fail(s == CUBLAS_STATUS_ALLOC_FAILED ? FH_ERR_OUT_OF_MEMORY : FH_ERR_CUDA,
         "%s failed: %s (%s) at %s:%d", call, cublasGetStatusName(s), cublasGetStatusString(s),
         base ? base + 1 : file, line);
}

}  // namespace fh::cuda
