// Event-record nodes off the critical path of a captured graph (graph machinery, no math).
#pragma once
#include <cuda_runtime.h>

// The graph queries and edits that take the edges' data: CUDA 12.3 to 12.9 name them with a _v2
// suffix (the plain names have no edge data there), CUDA 13 without it.
#if CUDART_VERSION >= 13000
#define FH_GRAPH_EDGE_API(name) name
#else
#define FH_GRAPH_EDGE_API(name) name##_v2
#endif

namespace fh::cuda {

// Every event-record node E of g becomes a leaf: each node S that waited on E waits on E's
// own dependencies instead (full completion, as through E), and E keeps them, so it records
// when it did before. What changes is that S no longer waits for the event's own latency
// between the kernels it separated. Throws FH_ERR_CUDA naming the call that failed.
void detach_event_records(cudaGraph_t g);

}  // namespace fh::cuda
