// The divergence guard's kernels (guard.cuh). Fixed grids: kBlocks partial minima, reduced by
// one block in index order; min is exact, so the result does not depend on scheduling.
#include "guard.cuh"

#include <algorithm>
#include <climits>

#include "common.hpp"
#include "launch.cuh"

namespace fh::cuda {

namespace {

constexpr int kBlocks = 1024;       // partial minima of the search
constexpr int kCopyBlocks = 256;    // per segment at most, grid-stride, for the snapshot
// The restore's grid is small: it copies only on a step that diverged, and on every other step
// each of its blocks reads the code and returns, so a small grid is the cheap launch (adam
// child 0.033 → 0.030 ms at B = 16384 against 256 blocks per segment,
// bench/results/h200-2026-12-02-guard-restore-before-after.json).
constexpr int kRestoreBlocks = 16;  // per segment
constexpr long long kNone = LLONG_MAX;

struct Segment {
    float *live;
    float *shadow;
    unsigned long long n, base;  // elements; first guard code - NUM_GUARD_SCALARS
};

}  // namespace

// Lives at the start of the scratch allocation.
struct DivergenceGuard::Dev {
    Segment seg[NUM_PERSISTENT];
    const float *scalars[NUM_GUARD_SCALARS];
    uint64_t *step;
    unsigned long long total;
    long long partial[kBlocks];
    // Counters (GuardReport's meaning).
    long long code;  // this step's first non-finite quantity, -1 for none
    int last_skipped;
    unsigned long long skipped, pending, first_step;
    long long first_code;
    float first_value;
};
static_assert(sizeof(DivergenceGuard::Dev) <= DivergenceGuard::kScratchBytes, "scratch");
static_assert(NUM_PERSISTENT <= 32, "k_copy's segment mask");

namespace {

// A snapshot part's index into part_mask_ and copy_blocks_.
int part_slot(int part) { return part == kSnapshotSpectral ? 0 : 1; }

__device__ __forceinline__ bool non_finite(float x) {
    return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

// Copies the segments in @p mask (bit b: persistent buffer b), blockIdx.y a segment: the
// snapshot (live → shadow) or the restore (shadow → live, only when the step diverged). Four
// loads in flight a thread before their stores: the snapshot of the rest ends the HER child.
__global__ void k_copy(DivergenceGuard::Dev *g, bool restore, uint32_t mask) {
    pdl_enter();
    if (!(mask >> blockIdx.y & 1u) || (restore && g->code < 0)) return;
    const Segment s = g->seg[blockIdx.y];
    float *__restrict__ dst = restore ? s.live : s.shadow;
    const float *__restrict__ src = restore ? s.shadow : s.live;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < s.n; i += 4 * stride) {
        const float a = src[i], b = src[i + stride], c = src[i + 2 * stride],
                    d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < s.n; i += stride) dst[i] = src[i];
}

// Block b searches codes [b·chunk, (b+1)·chunk) of the code space: scalars first, then the
// segments end to end.
// A thread's codes rise, so the segment index k only moves forward: it is carried from one
// code to the next instead of searched from 0 for each, a chain of dependent loads per code
// (adam child 0.036 → 0.032 ms at B = 16384 on the H200,
// bench/results/h200-2026-12-02-guard-find-before-after.json).
__global__ void k_find_partial(DivergenceGuard::Dev *g) {
    pdl_enter();
    __shared__ long long best[kThreads];
    const unsigned long long codes = NUM_GUARD_SCALARS + g->total;
    const unsigned long long chunk = (codes + kBlocks - 1) / kBlocks;
    const unsigned long long lo = blockIdx.x * chunk, hi = min(codes, lo + chunk);
    long long mine = kNone;
    int k = 0;
    for (unsigned long long c = lo + threadIdx.x; c < hi && mine == kNone; c += blockDim.x) {
        float x;
        if (c < NUM_GUARD_SCALARS) {
            x = *g->scalars[c];
        } else {
            const unsigned long long e = c - NUM_GUARD_SCALARS;
            while (k + 1 < NUM_PERSISTENT && e >= g->seg[k + 1].base) ++k;
            x = g->seg[k].live[e - g->seg[k].base];
        }
        if (non_finite(x)) mine = (long long)c;  // a thread's codes rise: its first is its min
    }
    best[threadIdx.x] = mine;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) best[threadIdx.x] = min(best[threadIdx.x], best[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) g->partial[blockIdx.x] = best[0];
}

// Also the step's step += 1 (ADAM_Q leaves it to this block rather than a kernel of its own:
// adam_q.cu). Nothing between Adam and here reads the counter, and first_step below is the
// incremented count, this step's number.
__global__ void k_find_final(DivergenceGuard::Dev *g) {
    pdl_enter();
    __shared__ long long best[kThreads];
    // Thread 0's loads of the counter go out with the partials' (nothing else touches it here).
    uint64_t step = 0;
    if (threadIdx.x == 0) step = *g->step;
    long long mine = kNone;
    for (int b = threadIdx.x; b < kBlocks; b += blockDim.x) mine = min(mine, g->partial[b]);
    best[threadIdx.x] = mine;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) best[threadIdx.x] = min(best[threadIdx.x], best[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    *g->step = ++step;
    const long long code = best[0] == kNone ? -1 : best[0];
    g->code = code;
    g->last_skipped = code >= 0;
    if (code < 0) return;
    float x;
    if (code < NUM_GUARD_SCALARS) {
        x = *g->scalars[code];
    } else {
        const unsigned long long e = (unsigned long long)code - NUM_GUARD_SCALARS;
        int k = 0;
        while (k + 1 < NUM_PERSISTENT && e >= g->seg[k + 1].base) ++k;
        x = g->seg[k].live[e - g->seg[k].base];
    }
    ++g->skipped;
    if (g->pending++ == 0) {
        g->first_step = step;
        g->first_code = code;
        g->first_value = x;
    }
}

}  // namespace

DivergenceGuard::DivergenceGuard(float *const bufs[], const size_t sizes[],
                                 const float *const scalars[], uint64_t *step) {
    Dev h{};
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        h.seg[b].live = bufs[b];
        h.seg[b].n = sizes[b];
        h.seg[b].base = total_;
        total_ += sizes[b];
        // A part's grid: enough blocks for its largest buffer, kCopyBlocks at most.
        const int p = part_slot(snapshot_part(b));
        part_mask_[p] |= 1u << b;
        const size_t blocks = (sizes[b] + kThreads - 1) / kThreads;
        copy_blocks_[p] = std::max(copy_blocks_[p], (int)std::min<size_t>(blocks, kCopyBlocks));
    }
    shadow_floats_ = total_;
    FH_CUDA(cudaMalloc(&shadow_, (total_ ? total_ : 1) * sizeof(float)));
    const cudaError_t e = cudaMalloc(&scratch_, kScratchBytes);
    if (e != cudaSuccess) {
        cudaFree(shadow_);  // the destructor does not run for a constructor that throws
        FH_CUDA(e);
    }
    for (int b = 0; b < NUM_PERSISTENT; ++b) h.seg[b].shadow = shadow_ + h.seg[b].base;
    for (int k = 0; k < NUM_GUARD_SCALARS; ++k) h.scalars[k] = scalars[k];
    h.step = step;
    h.total = total_;
    h.code = -1;
    h.first_code = -1;
    FH_CUDA(cudaMemset(scratch_, 0, kScratchBytes));
    FH_CUDA(cudaMemcpy(scratch_, &h, sizeof h, cudaMemcpyHostToDevice));
}

DivergenceGuard::~DivergenceGuard() {
    if (shadow_) cudaFree(shadow_);  // a destructor cannot report; the pointers came from cudaMalloc
    if (scratch_) cudaFree(scratch_);
}

void DivergenceGuard::snapshot(cudaStream_t s, int part) {
    check_snapshot_part(part);
    const int p = part_slot(part);
    FH_LAUNCH(k_copy, dim3(copy_blocks_[p], NUM_PERSISTENT), kThreads, 0, s, (Dev *)scratch_,
              false, part_mask_[p]);
}

void DivergenceGuard::check(cudaStream_t s) {
    Dev *g = (Dev *)scratch_;
    FH_LAUNCH(k_find_partial, kBlocks, kThreads, 0, s, g);
    FH_LAUNCH(k_find_final, 1, kThreads, 0, s, g);
    FH_LAUNCH(k_copy, dim3(kRestoreBlocks, NUM_PERSISTENT), kThreads, 0, s, g, true,
              part_mask_[0] | part_mask_[1]);
}

GuardReport DivergenceGuard::report(bool clear) {
    Dev h;
    FH_CUDA(cudaMemcpy(&h, scratch_, sizeof h, cudaMemcpyDeviceToHost));
    GuardReport r;
    r.available = true;
    r.skipped = h.skipped;
    r.last_skipped = h.last_skipped != 0;
    r.pending = h.pending;
    r.first_step = h.first_step;
    r.first_code = h.first_code;
    r.first_value = h.first_value;
    if (clear) {
        h.pending = 0;
        h.first_step = 0;
        h.first_code = -1;
        h.first_value = 0;
        FH_CUDA(cudaMemcpy(scratch_, &h, sizeof h, cudaMemcpyHostToDevice));
    }
    return r;
}

void DivergenceGuard::reset_counters() {
    Dev h;
    FH_CUDA(cudaMemcpy(&h, scratch_, sizeof h, cudaMemcpyDeviceToHost));
    h.code = -1;
    h.last_skipped = 0;
    h.skipped = h.pending = h.first_step = 0;
    h.first_code = -1;
    h.first_value = 0;
    FH_CUDA(cudaMemcpy(scratch_, &h, sizeof h, cudaMemcpyHostToDevice));
}

size_t DivergenceGuard::bytes() const { return shadow_floats_ * sizeof(float) + kScratchBytes; }

}  // namespace fh::cuda
