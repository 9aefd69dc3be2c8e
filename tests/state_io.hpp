/* The whole persistent state of a pipeline (parameters, targets, Adam moments, spectral u,
 * regime state) and its counters, read back through a checkpoint: what the divergence guard
 * and every refused call promise to leave bitwise as it was. Header-only; for tests and fuzz
 * harnesses that link the library's objects. */
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

/* Saves @p p to @p path and reads it back as a Checkpoint (the file stays). Returns false (with
 * the library's message on stderr) if the save is refused. */
inline bool read_state(fh_pipeline *p, const std::string &path, fh::Checkpoint &out) {
    if (fh_pipeline_save(p, path.c_str()) != FH_OK) {
        fprintf(stderr, "save: %s\n", fh_last_error_message());
        return false;
    }
    fh_config c;
    c.struct_size = sizeof c;
    fh_pipeline_config(p, &c);
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

}  // namespace fhtest

#endif
