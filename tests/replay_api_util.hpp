// Helpers of the replay's API tests (test_replay_api.cpp, test_cuda_replay_api.cpp,
// test_cuda_device_input.cpp): pipelines, status expectations, and a pipeline's whole state as
// the bytes of its checkpoint with the replay. Header-only; include after cmocka.h.
#ifndef FOXHUNT_TEST_REPLAY_API_UTIL_HPP
#define FOXHUNT_TEST_REPLAY_API_UTIL_HPP

#include <foxhunt.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "testutil.h"

namespace replay_api {

inline fh_pipeline *make(const fh_config &c) {
    fh_pipeline *p = nullptr;
    if (fh_pipeline_create(&c, &p) != FH_OK) fail_msg("create: %s", fh_last_error_message());
    return p;
}

inline void expect(fh_status got, fh_status want, const char *must_mention) {
    if (got != want)
        fail_msg("status %s, expected %s (%s)", fh_status_string(got), fh_status_string(want),
                 fh_last_error_message());
    if (must_mention && !strstr(fh_last_error_message(), must_mention))
        fail_msg("message '%s' does not mention '%s'", fh_last_error_message(), must_mention);
}

inline void ok(fh_status s) { expect(s, FH_OK, nullptr); }

inline std::vector<uint8_t> file_bytes(const char *path) {
    std::vector<uint8_t> b;
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    int ch;
    while ((ch = fgetc(f)) != EOF) b.push_back((uint8_t)ch);
    fclose(f);
    return b;
}

// Everything a pipeline holds, the replay included: its checkpoint with the replay.
inline std::vector<uint8_t> digest(fh_pipeline *p) {
    const char *path = fh_test_tmp_path("replay_digest.ckpt");
    ok(fh_pipeline_save_ex(p, path, FH_SAVE_REPLAY));
    return file_bytes(path);
}

}  // namespace replay_api

#endif
