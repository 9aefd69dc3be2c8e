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
#include <functional>
#include <string>
#include <vector>

#include "init.hpp"
#include "layout.hpp"
#include "replay.hpp"

namespace fh {

// The step, act-call and rows-inserted counts a checkpoint holds stay below this: a load
// refuses more (no run gets there: centuries at a million a second), and the calls that
// advance a count refuse to take it there, so every pipeline's state can be saved and loaded.
constexpr uint64_t kCountLimit = 1ull << 63;

struct Checkpoint {
    uint64_t step = 0, act_calls = 0;
    HostBuffers bufs;  // persistent buffers only are filled
    bool has_replay = false;
    ReplayImage replay;
};

// The config fields that change the math (not backend, device or execution switches).
std::vector<uint8_t> config_fingerprint(const fh_config &c);

// Copies @p count floats at @p offset of persistent buffer @p b to @p out (a backend's read()).
using StateReader = std::function<void(Buf b, size_t offset, size_t count, float *out)>;

// Streams the state through fixed 256 KiB buffers into an AtomicFile (atomic_file.hpp), so the
// extra memory does not grow with the checkpoint; with @p replay (not null) writes format 2,
// its rows straight from the image. A non-finite value anywhere in the state is refused
// (FH_ERR_NON_FINITE, naming it; load would refuse the file), and then no file appears.
void save_checkpoint(const char *path, const fh_config &c, const Layout &L, uint64_t step,
                     uint64_t act_calls, const StateReader &read, const ReplayImage *replay);

// Element i of buffer b as "q.W1[3, 5]"; Adam moments as "adam_m of q.W1[3, 5]"; padding between
// nets as "buffer b element i".
std::string state_element_name(const Layout &L, Buf b, size_t i);

// Validates everything (size, magic, checksum, config, buffer sizes, the replay's shape against
// L.dims and its rows as an insert would) before returning. The body is read only when the
// file's size is the one its own header implies (the replay section's header included), so a
// large file that merely starts with the magic is refused after reading its header; it is read
// once, straight into the result, hashed on the way.
Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L);

}  // namespace fh
