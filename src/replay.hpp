// SPEC §2.1's replay on the host: the checks of inserted rows (the CUDA backend checks its
// host and device inserts with the same list), the CPU backend's ring with its episode table,
// and the image of the valid rows that a checkpoint holds.
#pragma once
#include <foxhunt.h>
#include <cstdint>
#include <vector>

#include "batch.hpp"
#include "config.hpp"
#include "element_check.hpp"
#include "replay_math.hpp"

namespace fh {

// The arrays of fh_replay_rows in its field order, so that copies loop over them.
enum RowField {
    RF_OBS, RF_GOAL, RF_ACTION, RF_REWARD, RF_DONE, RF_NEXT_OBS, RF_NAG, RF_REGIME,
    RF_EPISODE_END, RF_COUNT
};

// Bytes of field f per transition (0 for the goal fields when goal_dim = 0).
size_t row_field_bytes(const Dims &d, int f);
// Field f's array in @p r (regime may be NULL: zeros).
const void *row_field(const fh_replay_rows &r, int f);

// The caller's rows as this version lays them out. Throws FH_ERR_NULL_POINTER or
// FH_ERR_STRUCT_SIZE.
fh_replay_rows read_rows(const fh_replay_rows *r);
// What needs no element read: num_rows >= 1, num_envs = E, the arrays the config needs, the
// memory kind. Throws fh::Error naming the field.
void check_rows_header(const Dims &d, const fh_replay_rows &r);
// SPEC §8 and §2.1's element checks in the order they are made (the first failure is the one
// reported): obs, goal, action, reward, done, next_obs, next_achieved_goal, regime,
// episode_end, then done = 1 ⇒ episode_end = 1.
std::vector<ElementCheck> rows_checks(const Dims &d, const fh_replay_rows &r);

// Rows in host memory: field f of row r, environment e at byte (r·E + e)·row_field_bytes(f).
struct HostRows {
    uint64_t R = 0;
    uint32_t E = 0;
    std::vector<uint8_t> field[RF_COUNT];
    void resize(const Dims &d, uint64_t rows);
    fh_replay_rows view() const;  // host memory; regime always present
};

// What a checkpoint holds of a replay: the count of rows ever inserted and the valid rows,
// oldest first (N = min(n_ins, K) of them). The episode table follows from them.
struct ReplayImage {
    uint64_t n_ins = 0;
    HostRows rows;
};

class HostReplay {
public:
    explicit HostReplay(const Dims &d);
    // Appends rows whose header passed check_rows_header(): every element is checked first,
    // in one read-only pass, so a refused insert changes nothing; then only the rows that stay
    // (the newest K) are copied.
    void insert(const fh_replay_rows &r);
    // SPEC §5.0: the batch of step `step` (row0 = SPEC §9's rank offset r·B) into @p out;
    // @p draws, when given, receives the B draws. Requires rows_inserted() >= 1.
    void sample(uint64_t seed, uint64_t step, uint32_t row0, const BatchDst &out,
                ReplayDraw *draws = nullptr) const;
    uint64_t rows_inserted() const { return n_ins_; }
    uint64_t bytes() const;
    ReplayImage image() const;
    // Replaces the contents by @p img, whose rows passed rows_checks() and number
    // min(img.n_ins, K).
    void restore(const ReplayImage &img);

private:
    void append(const fh_replay_rows &r);  // no checks

    Dims d_;
    HostRows ring_;                    // K rows
    std::vector<uint32_t> end_slot_;   // [K, E], replay_math.hpp
    std::vector<uint64_t> open_start_; // [E]
    uint64_t n_ins_ = 0;
};

}  // namespace fh
