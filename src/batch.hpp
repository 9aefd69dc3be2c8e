// Batch validation (SPEC §2, §8) fused with the copy out of the caller's arrays.
#pragma once
#include <foxhunt.h>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "element_check.hpp"

namespace fh {

// The CPU backend's copy of a batch (and the tests' input to the CPU step's parts).
struct HostBatch {
    std::vector<float> obs, goal, reward, next_obs, next_achieved_goal, her_goal;
    std::vector<int32_t> action, regime;  // regime is all zeros when the caller passed none
    std::vector<uint8_t> done;
};

// Where pack_batch() writes each tensor: row-major as in fh_batch; the goal pointers are unused
// when goal_dim = 0; regime gets zeros when the caller passed none (SPEC §2).
struct BatchDst {
    float *obs, *goal, *reward, *next_obs, *next_achieved_goal, *her_goal;
    int32_t *action, *regime;
    uint8_t *done;
};

// The caller's batch as this version lays it out (a 0.1 batch, without `memory`, is host
// memory). Throws FH_ERR_NULL_POINTER or FH_ERR_STRUCT_SIZE.
fh_batch read_batch(const fh_batch *b);

// Checks what needs no element read, on read_batch()'s result: batch_size, that every tensor
// the config needs is present, the memory kind. Throws fh::Error naming the field.
void check_batch_header(const Dims &d, const fh_batch *b);

// SPEC §8's element checks of a batch, in the order pack_batch() makes them (the CUDA backend
// checks device batches with the same list).
std::vector<ElementCheck> batch_checks(const Dims &d, const fh_batch &b);

// Copies every tensor of a batch that passed check_batch_header() to @p dst and checks every
// element on the way (floats finite, actions, regimes and done flags in range): one pass over the
// caller's arrays. Throws fh::Error naming tensor, row, column and value at the first problem;
// @p dst is then partly written, so write into a buffer not in use and switch to it only after
// this returns.
void pack_batch(const Dims &d, const fh_batch &b, const BatchDst &dst);

// Sizes @p h for the dims (no-op once sized) and returns its BatchDst.
BatchDst host_batch_dst(const Dims &d, HostBatch &h);

// check_batch_header() then pack_batch() into a new HostBatch (tests build CPU-step inputs
// with it).
HostBatch copy_batch(const Dims &d, const fh_batch *b);

// Throws FH_ERR_NON_FINITE naming @p what and the first bad element of [rows, cols].
void check_finite(const char *what, const float *x, size_t rows, size_t cols);

}  // namespace fh
