// Checkpoint file: everything a continued run needs, with a checksum (SPEC-independent format).
//   "FOXHUNT1" | u32 format version | u32 config bytes | config fields | u64 step | u64 act calls
//   | for each persistent buffer: u64 count, count float32 | u64 FNV-1a of all preceding bytes
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "init.hpp"
#include "layout.hpp"

namespace fh {

struct Checkpoint {
    uint64_t step = 0, act_calls = 0;
    HostBuffers bufs;  // persistent buffers only are filled
};

// The config fields that change the math (not backend, device or execution switches).
std::vector<uint8_t> config_fingerprint(const fh_config &c);

void save_checkpoint(const char *path, const fh_config &c, const Checkpoint &ck);

// The first non-finite value among the persistent buffers of @p ck, as "q.W1[3, 5] = nan" (Adam
// moments as "adam_m of q.W1[3, 5] = nan"); an empty string when every value is finite.
std::string first_non_finite(const Layout &L, const Checkpoint &ck);
// Validates everything (size, magic, checksum, config, buffer sizes) before returning.
Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L);

}  // namespace fh
