// fh_pipeline_load on arbitrary files, into a pipeline with a replay (so that both formats, with
// and without the replay section, load). The first input byte's bit 0 asks the harness to write
// a correct checksum over the rest, so mutations reach the structure behind the checksum.
// Promise checked: a refused load changes nothing (digest of every tensor, the metrics and the
// checkpoint with the replay); a load that succeeds gives a pipeline that steps.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fh_pipeline *p = fuzz::load_start(fuzz::tiny_replay_config());
    const uint64_t before = fuzz::digest(p);
    std::vector<uint8_t> file(data + (size ? 1 : 0), data + size);
    if (size && (data[0] & 1) && file.size() >= 16) {
        const uint64_t h = fuzz::fnv1a(file.data(), file.size() - 8);
        memcpy(&file[file.size() - 8], &h, 8);
    }
    const std::string path = fuzz::scratch_path("input.ckpt");
    fuzz::write_file(path, file.data(), file.size());
    const fh_status s = fh_pipeline_load(p, path.c_str());
    unlink(path.c_str());
    FUZZ_ASSERT(s == FH_OK || s == FH_ERR_IO || s == FH_ERR_CHECKPOINT_TRUNCATED ||
                    s == FH_ERR_CHECKPOINT_CORRUPT || s == FH_ERR_CHECKPOINT_CONFIG,
                "load returned %s, not a documented status: %s", fh_status_string(s),
                fh_last_error_message());
    if (s != FH_OK) {
        FUZZ_ASSERT(fuzz::digest(p) == before, "a refused load (%s: %s) changed the pipeline",
                    fh_status_string(s), fh_last_error_message());
        return 0;
    }
    // Any finite state a checkpoint can hold must step (the guard absorbs what overflows).
    FUZZ_ASSERT(fh_pipeline_step(p) == FH_OK, "step after load: %s", fh_last_error_message());
    fh_metrics m;
    m.struct_size = sizeof m;
    FUZZ_ASSERT(fh_pipeline_metrics(p, &m) == FH_OK, "metrics: %s", fh_last_error_message());
    const fh_status c = fh_pipeline_check(p);
    FUZZ_ASSERT(c == FH_OK || c == FH_ERR_NON_FINITE, "check: %s", fh_status_string(c));
    FUZZ_ASSERT((c == FH_ERR_NON_FINITE) == (m.last_step_skipped == 1),
                "check says %s but last_step_skipped = %u", fh_status_string(c),
                m.last_step_skipped);
    return 0;
}
