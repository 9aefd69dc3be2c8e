// The NCCL calls of the data-parallel step (allreduce.hpp says where and why), and the
// communicator's rank and size for the pipeline's dimensions. The only file that includes
// nccl.h; built with NCCL only when CMake found it (FOXHUNT_HAVE_NCCL).
#include "allreduce.hpp"

#include <atomic>
#include <cstring>

#include "backend.hpp"
#include "common.hpp"
#include "debug_hooks.h"
#include "error.hpp"

#ifdef FOXHUNT_HAVE_NCCL
#include <nccl.h>
#endif

namespace fh {

namespace {
std::atomic<long> g_captured_groups{0};  // NCCL groups enqueued under stream capture
}  // namespace

#ifdef FOXHUNT_HAVE_NCCL

namespace {

// NCCL >= 2.9 captures collectives into CUDA graphs.
constexpr int kMinNcclVersion = 20900;

[[noreturn]] void throw_nccl(ncclResult_t r, ncclComm_t comm, const char *call, const char *file,
                             int line) {
    const char *base = strrchr(file, '/');
    const char *last = comm ? ncclGetLastError(comm) : nullptr;
    fail(FH_ERR_CUDA, "%s failed: %s%s%s at %s:%d", call, ncclGetErrorString(r),
         last && *last ? ": " : "", last ? last : "", base ? base + 1 : file, line);
}

}  // namespace

#define FH_NCCL(comm, call)                                                           \
    do {                                                                              \
        ncclResult_t fh_r_ = (call);                                                  \
        if (fh_r_ != ncclSuccess) throw_nccl(fh_r_, (comm), #call, __FILE__, __LINE__); \
    } while (0)

void nccl_rank_world(void *comm_ptr, int device, uint32_t *rank, uint32_t *world) {
    int version = 0;
    FH_NCCL(nullptr, ncclGetVersion(&version));
    if (version < kMinNcclVersion)
        fail(FH_ERR_UNSUPPORTED, "config.nccl_comm: the NCCL library loaded is version %d; "
             "capturing its all-reduces into the step graph needs 2.9 or newer", version);
    ncclComm_t comm = static_cast<ncclComm_t>(comm_ptr);
    int r = -1, n = 0, dev = -1;
    FH_NCCL(comm, ncclCommCount(comm, &n));
    FH_NCCL(comm, ncclCommUserRank(comm, &r));
    FH_NCCL(comm, ncclCommCuDevice(comm, &dev));
    if (dev != device)
        fail(FH_ERR_BAD_VALUE, "config.nccl_comm is a communicator on CUDA device %d, but "
             "config.device = %d: create the pipeline on its communicator's device", dev,
             device);
    if (n < 1 || r < 0 || r >= n)
        fail(FH_ERR_INTERNAL, "config.nccl_comm: NCCL reports rank %d of %d", r, n);
    *rank = (uint32_t)r;
    *world = (uint32_t)n;
}

namespace cuda {

void Allreduce::sum(std::initializer_list<SumBuf> bufs, cudaStream_t s) const {
    if (!comm_) return;
    ncclComm_t comm = static_cast<ncclComm_t>(comm_);
    FH_NCCL(comm, ncclGroupStart());
    for (const SumBuf &b : bufs) {
        const ncclResult_t r = ncclAllReduce(b.p, b.p, b.n, b.f64 ? ncclFloat64 : ncclFloat32,
                                             ncclSum, comm, s);
        if (r != ncclSuccess) {
            ncclGroupEnd();  // leave no group open behind the error
            throw_nccl(r, comm, "ncclAllReduce", __FILE__, __LINE__);
        }
    }
    FH_NCCL(comm, ncclGroupEnd());
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    FH_CUDA(cudaStreamIsCapturing(s, &st));
    if (st == cudaStreamCaptureStatusActive) ++g_captured_groups;
}

}  // namespace cuda

#else  // no NCCL in this build

void nccl_rank_world(void *, int, uint32_t *, uint32_t *) {
    fail(FH_ERR_UNSUPPORTED, "config.nccl_comm is set, but this build of libfoxhunt has no NCCL "
         "(configure with -DFOXHUNT_NCCL=ON and NCCL_ROOT or NCCL_LIBRARY where CMake does not "
         "find it): no data-parallel step (SPEC §9)");
}

namespace cuda {
// A pipeline with a communicator is refused before it exists (nccl_rank_world), so no
// Allreduce here ever has one.
void Allreduce::sum(std::initializer_list<SumBuf>, cudaStream_t) const {
    if (comm_) fail(FH_ERR_INTERNAL, "an NCCL all-reduce in a build without NCCL");
}
}  // namespace cuda

#endif

}  // namespace fh

extern "C" long fh_cuda_debug_nccl_groups_captured(void) { return fh::g_captured_groups.load(); }
