#include "sync_points.hpp"

#include <atomic>

#include "common.hpp"

namespace {
std::atomic<uint64_t> g_back_pressure{0};
std::atomic<int> g_plant{0};
thread_local int t_in_back_pressure = 0;
}  // namespace

namespace fh::cuda {

void back_pressure_wait(cudaEvent_t slot_free) {
    const cudaError_t q = cudaEventQuery(slot_free);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) FH_CUDA(q);
    g_back_pressure.fetch_add(1);
    t_in_back_pressure = 1;
    const cudaError_t e = cudaEventSynchronize(slot_free);
    t_in_back_pressure = 0;
    FH_CUDA(e);
}

void planted_sync(PlantAt where, cudaStream_t s) {
    if (where != PlantAt::NONE && g_plant.load(std::memory_order_relaxed) == (int)where)
        FH_CUDA(cudaStreamSynchronize(s));
}

}  // namespace fh::cuda

extern "C" uint64_t fh_cuda_debug_back_pressure_waits(void) { return g_back_pressure.load(); }
extern "C" int fh_cuda_debug_in_back_pressure(void) { return t_in_back_pressure; }
extern "C" void fh_cuda_debug_plant_sync(int where) { g_plant.store(where); }
