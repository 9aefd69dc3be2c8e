// Event-record nodes off the critical path of a captured graph (graph machinery, no math).
#pragma once
#include <cuda_runtime.h>

namespace fh::cuda {

// Every event-record node E of g becomes a leaf: each node S that waited on E waits on E's
// own dependencies instead (full completion, as through E), and E keeps them, so it records
// when it did before. What changes is that S no longer waits for the event's own latency
// between the kernels it separated. Throws FH_ERR_CUDA naming the call that failed.
void detach_event_records(cudaGraph_t g);

}  // namespace fh::cuda
