// SPEC §5.0: which transitions a step draws from the replay, and the episode bookkeeping of
// §2.1 that the HER "future" goal needs, in exact unsigned 64-bit integer arithmetic. The same
// functions run on the host (the CPU backend) and on the device (cuda/replay.cu), so both
// backends draw bitwise the same indices.
//
// The ring: row n (numbered by insertion, 0, 1, ...) lives in slot n mod K; transition (n, e)
// at index slot·E + e of every [K, E, ...] array. After n_ins rows the valid rows are the
// newest N = min(n_ins, K).
//
// The episode table end_slot [K, E] holds, for each valid (row, env), the slot of the row that
// ends its episode (the first row at or after it with episode_end = 1), or kEpisodeOpen while
// the episode is open at the newest row. f, the rows after n in n's episode, is then one
// lookup: the end row is at most K - 1 rows later, so its slot fixes the distance. The table is
// kept at insert time (replay_close_episodes): every row is written twice at most, once when
// inserted (open) and once when its episode ends, so an insert costs O(rows inserted) amortised,
// however long the episodes.
#pragma once
#include <cstdint>

#include "hd.hpp"
#include "philox.hpp"

namespace fh {

constexpr uint32_t kEpisodeOpen = 0xffffffffu;  // never a slot: K <= 2^32 - 1

// One transition of the batch, SPEC §5.0's names.
struct ReplayDraw {
    uint64_t row;         // n
    uint64_t slot;        // n mod K
    uint32_t env;         // e
    uint64_t rows_after;  // f
    uint64_t her_offset;  // o in [0, f]; her_goal is ag' of (n + o, e)
    uint64_t her_slot;    // (n + o) mod K
};

FH_HD uint64_t replay_valid_rows(uint64_t n_ins, uint64_t K) { return n_ins < K ? n_ins : K; }

// j = (w0 · N·E) >> 32: N·E <= 2^32 and w0 < 2^32, so the product fits 64 bits exactly.
FH_HD uint64_t replay_index(uint32_t w0, uint64_t valid_transitions) {
    return ((uint64_t)w0 * valid_transitions) >> 32;
}

// o = (w1 · (f + 1)) >> 32, in [0, f]; f + 1 <= K < 2^32.
FH_HD uint64_t replay_her_offset(uint32_t w1, uint64_t rows_after) {
    return ((uint64_t)w1 * (rows_after + 1)) >> 32;
}

// f of valid row n in slot `slot`, given its end_slot entry.
FH_HD uint64_t replay_rows_after(uint32_t end_slot, uint64_t row, uint64_t slot, uint64_t n_ins,
                                 uint64_t K) {
    if (end_slot == kEpisodeOpen) return n_ins - 1 - row;
    return ((uint64_t)end_slot + K - slot) % K;
}

// Transition i of the batch. c0 = row0 + i, where row0 is the rank offset r·B of SPEC §9 (0 on
// one pipeline); c2 = the low 32 bits of `step` (design.md). Requires n_ins >= 1.
FH_HD ReplayDraw replay_draw(uint64_t seed, uint32_t c0, uint64_t step, uint64_t n_ins,
                             uint64_t K, uint32_t E, const uint32_t *end_slot) {
    const Words w = philox(seed, c0, 0, (uint32_t)step, PURPOSE_REPLAY);
    const uint64_t N = replay_valid_rows(n_ins, K);
    const uint64_t j = replay_index(w.w[0], N * E);
    ReplayDraw d;
    d.env = (uint32_t)(j % E);
    d.row = n_ins - N + j / E;  // age j / E: 0 is the oldest valid row
    d.slot = d.row % K;
    d.rows_after = replay_rows_after(end_slot[d.slot * E + d.env], d.row, d.slot, n_ins, K);
    d.her_offset = replay_her_offset(w.w[1], d.rows_after);
    d.her_slot = (d.slot + d.her_offset) % K;
    return d;
}

// The episode table of environment e after rows [first_new, n_ins) were appended and their
// episode_end flags written to the ring (flags [K, E]; rows older than n_ins - K were not
// kept). open_start[e] is the first row of e's open episode (it may lie before the oldest
// valid row: then only its valid part is written). Rows of the open episode get kEpisodeOpen;
// when a row ends it, the whole episode, back to open_start (or the oldest valid row), gets
// that row's slot.
FH_HD void replay_close_episodes(uint32_t e, uint64_t first_new, uint64_t n_ins, uint64_t K,
                                 uint32_t E, const uint8_t *episode_end, uint32_t *end_slot,
                                 uint64_t *open_start) {
    const uint64_t oldest = n_ins > K ? n_ins - K : 0;
    uint64_t start = open_start[e] > oldest ? open_start[e] : oldest;
    for (uint64_t n = first_new > oldest ? first_new : oldest; n < n_ins; ++n) {
        const uint64_t slot = n % K;
        end_slot[slot * E + e] = kEpisodeOpen;
        if (episode_end[slot * E + e]) {
            for (uint64_t m = start; m <= n; ++m) end_slot[(m % K) * E + e] = (uint32_t)slot;
            start = n + 1;
        }
    }
    open_start[e] = start;
}

}  // namespace fh
