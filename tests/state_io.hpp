/* The whole persistent state of a pipeline (parameters, targets, Adam moments, spectral u,
 * regime state), its counters and its replay, read back through a checkpoint: what the
 * divergence guard and every refused call promise to leave bitwise as it was. Header-only; for
 * tests and fuzz harnesses that link the library's objects. */
#ifndef FOXHUNT_TEST_STATE_IO_HPP
#define FOXHUNT_TEST_STATE_IO_HPP

#include <foxhunt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "checkpoint.hpp"
#include "config.hpp"
#include "error.hpp"
#include "layout.hpp"

namespace fhtest {

/* Saves @p p to @p path (with its replay, if it has one) and reads it back as a Checkpoint (the
 * file stays). Returns false (with the library's message on stderr) if the save is refused. */
inline bool read_state(fh_pipeline *p, const std::string &path, fh::Checkpoint &out) {
    fh_config c;
    c.struct_size = sizeof c;
    fh_pipeline_config(p, &c);
    if (fh_pipeline_save_ex(p, path.c_str(), c.replay_capacity ? FH_SAVE_REPLAY : 0) != FH_OK) {
        fprintf(stderr, "save: %s\n", fh_last_error_message());
        return false;
    }
    const fh::Layout L = fh::make_layout(fh::make_dims(c));
    try {
        out = fh::load_checkpoint(path.c_str(), c, L);
    } catch (const fh::Error &e) {
        fprintf(stderr, "load_checkpoint: %s\n", e.message.c_str());
        return false;
    }
    return true;
}

/* read_state() that aborts the test program (a failure under cmocka) when it cannot. */
inline fh::Checkpoint state_of(fh_pipeline *p, const std::string &path) {
    fh::Checkpoint ck;
    if (!read_state(p, path, ck)) abort();
    return ck;
}

/* Index of the first persistent buffer where a and b differ, or -1. */
inline int first_different_buffer(const fh::Checkpoint &a, const fh::Checkpoint &b) {
    for (int k = 0; k < fh::NUM_PERSISTENT; ++k)
        if (a.bufs[k].size() != b.bufs[k].size() ||
            memcmp(a.bufs[k].data(), b.bufs[k].data(), a.bufs[k].size() * sizeof(float)) != 0)
            return k;
    return -1;
}

/* Whether a and b hold the same replay: rows inserted and every byte of the valid rows. */
inline bool same_replay(const fh::Checkpoint &a, const fh::Checkpoint &b) {
    if (a.has_replay != b.has_replay || a.replay.n_ins != b.replay.n_ins) return false;
    for (int f = 0; f < fh::RF_COUNT; ++f)
        if (a.replay.rows.field[f] != b.replay.rows.field[f]) return false;
    return true;
}

}  // namespace fhtest

#endif
