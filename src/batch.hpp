// One validated batch (SPEC §2, §8), copied out of the caller's arrays.
#pragma once
#include <foxhunt.h>
#include <cstdint>
#include <vector>

#include "config.hpp"

namespace fh {

struct HostBatch {
    std::vector<float> obs, goal, reward, next_obs, next_achieved_goal, her_goal;
    std::vector<int32_t> action, regime;  // regime is all zeros when the caller passed none
    std::vector<uint8_t> done;
};

// Validates every element first and throws fh::Error (naming tensor, row, column and value)
// before anything is copied, so a refused batch changes nothing. Copies into `out`, reusing its
// storage: fresh multi-megabyte buffers per upload cost more in page faults than the copy.
void copy_batch(const Dims &d, const fh_batch *b, HostBatch &out);
HostBatch copy_batch(const Dims &d, const fh_batch *b);

// Throws FH_ERR_NON_FINITE naming @p what and the first bad element of [rows, cols].
void check_finite(const char *what, const float *x, size_t rows, size_t cols);

}  // namespace fh
