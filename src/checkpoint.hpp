// Checkpoint file: everything a continued run needs, with a checksum (SPEC-independent format).
//   "FOXHUNT1" | u32 format version | u32 config bytes | config fields | u64 step | u64 act calls
//   | for each persistent buffer: u64 count, count float32
//   | format 2 only, the replay: u32 K | u32 E | u64 rows inserted | the N = min(rows, K) valid
//     rows, oldest first, field by field in fh_replay_rows' order ([N, E, ...] each; the goal
//     fields only when goal_dim > 0; regime always)
//   | u64 FNV-1a of all preceding bytes
// Format 1 is written whenever the replay is not saved, so that 0.1 libraries read those files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "init.hpp"
#include "layout.hpp"
#include "replay.hpp"

namespace fh {

struct Checkpoint {
    uint64_t step = 0, act_calls = 0;
    HostBuffers bufs;  // persistent buffers only are filled
    bool has_replay = false;
    ReplayImage replay;
};

// The config fields that change the math (not backend, device or execution switches).
std::vector<uint8_t> config_fingerprint(const fh_config &c);

void save_checkpoint(const char *path, const fh_config &c, const Checkpoint &ck);

// The first non-finite value among the persistent buffers of @p ck, as "q.W1[3, 5] = nan" (Adam
// moments as "adam_m of q.W1[3, 5] = nan"); an empty string when every value is finite.
std::string first_non_finite(const Layout &L, const Checkpoint &ck);
// Validates everything (size, magic, checksum, config, buffer sizes, the replay's shape against
// L.dims and its rows as an insert would) before returning.
Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L);

}  // namespace fh
