/* detach_event_records (cuda/graph_events.hpp) on a graph of empty nodes and event-record nodes:
 * afterwards every event-record node is a leaf that keeps its own dependencies, every node that
 * waited on an event waits on that event's dependencies instead (once, where it already waited on
 * one of them too), the other edges are untouched, and the graph still instantiates, runs and
 * records every event. The step's graphs (cuda/executor.cpp) take the same pass; its kernels'
 * programmatic edges are covered by every CUDA test that runs a step.
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/graph_events.hpp"
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <algorithm>
#include <vector>

#include "test_cuda_util.h"

namespace {

#if FOXHUNT_HAVE_CUDA
void ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) fail_msg("%s: %s", what, cudaGetErrorString(e));
}

std::vector<cudaGraphNode_t> deps_of(cudaGraphNode_t n) {
    size_t k = 0;
    ok(FH_GRAPH_EDGE_API(cudaGraphNodeGetDependencies)(n, nullptr, nullptr, &k), "count");
    std::vector<cudaGraphNode_t> v(k);
    std::vector<cudaGraphEdgeData> e(k);
    if (k) ok(FH_GRAPH_EDGE_API(cudaGraphNodeGetDependencies)(n, v.data(), e.data(), &k), "deps");
    std::sort(v.begin(), v.end());
    return v;
}

size_t dependents_of(cudaGraphNode_t n) {
    size_t k = 0;
    ok(FH_GRAPH_EDGE_API(cudaGraphNodeGetDependentNodes)(n, nullptr, nullptr, &k), "dependents");
    return k;
}

std::vector<cudaGraphNode_t> sorted(std::vector<cudaGraphNode_t> v) {
    std::sort(v.begin(), v.end());
    return v;
}

void test_events_become_leaves(void **) {
    if (!fh_test_have_cuda()) skip();
    cudaGraph_t g = nullptr;
    ok(cudaGraphCreate(&g, 0), "cudaGraphCreate");
    cudaEvent_t ev[5];
    for (cudaEvent_t &e : ev) ok(cudaEventCreate(&e), "cudaEventCreate");
    auto empty = [&](std::vector<cudaGraphNode_t> d) {
        cudaGraphNode_t n = nullptr;
        ok(cudaGraphAddEmptyNode(&n, g, d.data(), d.size()), "cudaGraphAddEmptyNode");
        return n;
    };
    auto event = [&](std::vector<cudaGraphNode_t> d, cudaEvent_t e) {
        cudaGraphNode_t n = nullptr;
        ok(cudaGraphAddEventRecordNode(&n, g, d.data(), d.size(), e), "add event node");
        return n;
    };
    /* A -> E1 -> B; C waits on A and E1; E0 (a root) and X -> D; B -> E2 (already a leaf);
     * B -> E3 -> F and G; E3 -> E4 -> H (two marks in a row, as a lane's end and begin marks). */
    const cudaGraphNode_t A = empty({}), X = empty({});
    const cudaGraphNode_t E1 = event({A}, ev[0]), E0 = event({}, ev[1]);
    const cudaGraphNode_t B = empty({E1}), C = empty({A, E1}), D = empty({E0, X});
    const cudaGraphNode_t E2 = event({B}, ev[2]), E3 = event({B}, ev[3]);
    const cudaGraphNode_t F = empty({E3}), G = empty({E3}), E4 = event({E3}, ev[4]);
    const cudaGraphNode_t H = empty({E4});

    fh::cuda::detach_event_records(g);

    for (cudaGraphNode_t e : {E0, E1, E2, E3, E4})
        if (const size_t n = dependents_of(e)) fail_msg("an event node has %zu dependents", n);
    assert_true(deps_of(E1) == sorted({A}));
    assert_true(deps_of(E0).empty());
    assert_true(deps_of(E2) == sorted({B}));
    assert_true(deps_of(E3) == sorted({B}));
    assert_true(deps_of(B) == sorted({A}));
    assert_true(deps_of(C) == sorted({A}));  /* once, not twice */
    assert_true(deps_of(D) == sorted({X}));
    assert_true(deps_of(F) == sorted({B}));
    assert_true(deps_of(G) == sorted({B}));
    assert_true(deps_of(E4) == sorted({B}) && deps_of(H) == sorted({B}));
    assert_true(deps_of(A).empty() && deps_of(X).empty());

    /* Every event recorded by the launch: the time from an event recorded before it is
     * defined only for an event that was recorded (cudaEventQuery succeeds on one never
     * recorded, so it would prove nothing). */
    cudaEvent_t start = nullptr;
    ok(cudaEventCreate(&start), "cudaEventCreate");
    cudaGraphExec_t x = nullptr;
    ok(cudaGraphInstantiate(&x, g, 0), "cudaGraphInstantiate");
    ok(cudaEventRecord(start, 0), "cudaEventRecord");
    ok(cudaGraphLaunch(x, 0), "cudaGraphLaunch");
    ok(cudaStreamSynchronize(0), "cudaStreamSynchronize");
    for (cudaEvent_t e : ev) {
        float ms = -1.0f;
        ok(cudaEventElapsedTime(&ms, start, e), "an event recorded by the graph");
        if (!(ms >= 0.0f)) fail_msg("an event recorded %g ms before the launch", (double)ms);
    }
    ok(cudaEventDestroy(start), "cudaEventDestroy");
    printf("[GRAPH] 5 event-record nodes detached: leaves, their waiters on their dependencies\n");
    ok(cudaGraphExecDestroy(x), "cudaGraphExecDestroy");
    ok(cudaGraphDestroy(g), "cudaGraphDestroy");
    for (cudaEvent_t e : ev) ok(cudaEventDestroy(e), "cudaEventDestroy");
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_events_become_leaves)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
