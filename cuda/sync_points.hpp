// The only places where upload() and step() of the CUDA executor may block the host, and the
// test seam that plants a forbidden one. tests/test_cuda_nosync.cpp watches every CUDA runtime
// and driver call made inside upload() and step() through CUPTI: a blocking call (any
// synchronize, a blocking memcpy or memset, an allocation) made inside back_pressure_wait() is
// back-pressure, the host more than two uploads ahead of the GPU; any other is a host
// synchronisation, which must never happen. docs/cuda.md says where the executor calls these.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace fh::cuda {

// upload(): wait for a pinned staging slot whose copy to the device has not run yet.
void back_pressure_wait(cudaEvent_t slot_free);

enum class PlantAt : int { NONE = 0, UPLOAD = 1, STEP = 2 };
// At the end of upload() (UPLOAD) and after the graph launch in step() (STEP): a
// cudaStreamSynchronize(s) when a test asked for one there (fh_cuda_debug_plant_sync), so the
// no-sync test can show that it catches a synchronisation. Otherwise one atomic load.
void planted_sync(PlantAt where, cudaStream_t s);

}  // namespace fh::cuda

// Test hooks (internal, not exported from the shared library; tests declare them weak).
extern "C" {
uint64_t fh_cuda_debug_back_pressure_waits(void);  // back_pressure_wait() calls that blocked
int fh_cuda_debug_in_back_pressure(void);          // 1 while this thread is inside one
void fh_cuda_debug_plant_sync(int where);          // a PlantAt value; 0 plants none
}
