// The replay on the CUDA side (SPEC §2.1, §5.0): the ring in device memory, and host functions
// that enqueue its kernels on a stream: element checks of device input into a status record,
// appends (from device memory, conditional on that record, or from pinned host memory), the
// episode table, the sample-and-gather that writes a step's batch, and the copy of a batch
// from device memory. The arithmetic is src/replay_math.hpp's and the checks are
// src/element_check.hpp's, the CPU backend's own, so both backends draw and refuse alike.
//
// The executor calls them from replay_lane.cpp (the ring, the sample task, inserts),
// upload.cpp (device batches) and device_input.cpp (the checks); docs/cuda.md, "The replay and
// device input", has the streams and events. Every function only enqueues work (no host
// wait); the sample is captured into the step graph, the appends, checks and batch copy run
// on the copy stream outside it. A plain C++ header, so host code and tests can include it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "config.hpp"
#include "element_check.hpp"
#include "replay.hpp"

namespace fh::cuda::replay {

// The ring of K rows of E transitions: field f of transition (slot, e) at byte
// (slot·E + e)·row_bytes[f] / E of field[f] (fh_replay_rows' fields in its order, [K, E, ...]).
struct DeviceRing {
    uint32_t K, E, O, G, NB;
    uint32_t row_bytes[RF_COUNT];  // bytes of one row of E transitions (0: field absent)
    uint8_t *field[RF_COUNT];
    uint32_t *end_slot;    // [K, E], replay_math.hpp
    uint64_t *open_start;  // [E]
    uint64_t *n_ins;       // rows inserted, the count the sample kernel reads
};

// Bytes of one device allocation holding a whole ring (each part 256-byte aligned), and the
// ring carved from such an allocation. ring_reset() empties it (enqueued).
size_t ring_bytes(const Dims &d);
DeviceRing ring_at(const Dims &d, void *base);
void ring_reset(const DeviceRing &ring, cudaStream_t s);

// Where a step's batch lives on the device: the executor's batch block (upload.hpp's
// Uploader::targets()), the layout the HER kernel reads.
struct BatchBlock {
    float *obs, *next_obs, *reward, *goal, *nag, *her_goal;
    int32_t *action, *regime;
    uint8_t *done;
};

// The outcome of a device check: key = (check index << 48) | element index of the first
// failing element in check order (the element the host check would name), kAllPassed if none;
// raw = that element's 32 bits.
struct CheckStatus {
    unsigned long long key;
    uint32_t raw, pad;
};
constexpr unsigned long long kAllPassed = ~0ull;
constexpr int kMaxChecks = 12;  // rows_checks() has 11 at most, batch_checks() 9

// Checks every element of `checks` (device pointers) into *status, which it resets first.
void enqueue_checks(const std::vector<ElementCheck> &checks, CheckStatus *status,
                    cudaStream_t s);
// Throws what the host check of the same input throws (fail_element), when `st` (a copy of the
// device record) names a failure; `checks` is the list the device checked.
void throw_check_status(const CheckStatus &st, const std::vector<ElementCheck> &checks);

// Appends `rows` (device memory, already checked into *status by enqueue_checks) behind
// `n_before` rows: copies the newest min(R, K) rows into their slots, updates the episode
// table and sets *ring.n_ins = n_before + R, each kernel doing nothing if a check failed. One
// device-to-device copy of the rows.
void enqueue_append_device(const DeviceRing &ring, const fh_replay_rows &rows, uint64_t n_before,
                           const CheckStatus *status, cudaStream_t s);
// The same for rows checked on the host, in pinned host memory (cudaMemcpyAsync).
void enqueue_append_host(const DeviceRing &ring, const fh_replay_rows &rows, uint64_t n_before,
                         cudaStream_t s);

// SPEC §5.0: the B transitions of the step that reads *step (the device step counter; the
// batch of step `step` = SPEC §3's steps completed), drawn with c0 = row0 + i, gathered into
// `out`; draws [B] receives the indices when not null. Does nothing while *ring.n_ins = 0.
void enqueue_sample(const DeviceRing &ring, uint64_t seed, const uint64_t *step, uint32_t row0,
                    uint32_t B, const BatchBlock &out, ReplayDraw *draws, cudaStream_t s);

// A batch in device memory (checked into *status by enqueue_checks(batch_checks(...))) copied
// into `out` unless a check failed; regime absent: zeros.
void enqueue_batch_copy(const Dims &d, const fh_batch &b, const CheckStatus *status,
                        const BatchBlock &out, cudaStream_t s);

}  // namespace fh::cuda::replay
