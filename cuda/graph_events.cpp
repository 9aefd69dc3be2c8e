// See graph_events.hpp. An event-record node between two kernels of a captured lane (a timing
// mark) or between two child graphs of the parent held the next node back by the event's own
// latency, about 4 to 6 µs: the longest gaps with no kernel running in a step's trace were at
// those nodes. As leaves, side by side on an H100 at B = 16384, both orders, the same bits:
// wall 1.357 / 1.361 → 1.330 / 1.341 ms TF32 multi-stream, 1.603 / 1.605 → 1.583 / 1.586
// single-stream, 1.281 / 1.286 → 1.264 / 1.268 BF16 multi-stream; the time with no kernel
// running 36.7 → 19.5 µs multi-stream, 67.7 → 28.8 single-stream
// (bench/results/h100-2026-12-07-leaf-events-*; docs/cuda.md, Findings).
#include "graph_events.hpp"

#include <algorithm>
#include <vector>

#include "common.hpp"

namespace fh::cuda {

namespace {

// A node's dependencies or dependents (cudaGraphNodeGetDependencies or ...GetDependentNodes).
// The query takes the edges' data too: without it, it fails (cudaErrorLossyQuery) on a node with
// a programmatic edge (the lanes' kernels launched with programmatic dependent launch).
using Query = cudaError_t (*)(cudaGraphNode_t, cudaGraphNode_t *, cudaGraphEdgeData *, size_t *);
std::vector<cudaGraphNode_t> neighbours(cudaGraphNode_t n, Query query, const char *what) {
    size_t k = 0;
    cudaError_t e = query(n, nullptr, nullptr, &k);
    std::vector<cudaGraphNode_t> v(k);
    std::vector<cudaGraphEdgeData> data(k);
    if (e == cudaSuccess && k) e = query(n, v.data(), data.data(), &k);
    if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
    return v;
}

std::vector<cudaGraphNode_t> dependencies(cudaGraphNode_t n) {
    return neighbours(n, FH_GRAPH_EDGE_API(cudaGraphNodeGetDependencies),
                      "cudaGraphNodeGetDependencies");
}

std::vector<cudaGraphNode_t> dependents(cudaGraphNode_t n) {
    return neighbours(n, FH_GRAPH_EDGE_API(cudaGraphNodeGetDependentNodes),
                      "cudaGraphNodeGetDependentNodes");
}

}  // namespace

void detach_event_records(cudaGraph_t g) {
    size_t n = 0;
    FH_CUDA(cudaGraphGetNodes(g, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n) FH_CUDA(cudaGraphGetNodes(g, nodes.data(), &n));
    for (cudaGraphNode_t e : nodes) {
        cudaGraphNodeType type;
        FH_CUDA(cudaGraphNodeGetType(e, &type));
        if (type != cudaGraphNodeTypeEventRecord) continue;
        const std::vector<cudaGraphNode_t> pre = dependencies(e);
        for (cudaGraphNode_t s : dependents(e)) {
            FH_CUDA(FH_GRAPH_EDGE_API(cudaGraphRemoveDependencies)(g, &e, &s, nullptr, 1));
            const std::vector<cudaGraphNode_t> has = dependencies(s);
            for (cudaGraphNode_t p : pre)
                if (std::find(has.begin(), has.end(), p) == has.end())
                    FH_CUDA(FH_GRAPH_EDGE_API(cudaGraphAddDependencies)(g, &p, &s, nullptr, 1));
        }
    }
}

}  // namespace fh::cuda
