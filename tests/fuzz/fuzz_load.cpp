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
    if (!fuzz::accepted(p, "load", s, before,
                        {FH_ERR_IO, FH_ERR_CHECKPOINT_TRUNCATED, FH_ERR_CHECKPOINT_CORRUPT,
                         FH_ERR_CHECKPOINT_CONFIG}))
        return 0;
    // Any finite state a checkpoint can hold must step (the guard absorbs what overflows).
    FUZZ_ASSERT(fh_pipeline_step(p) == FH_OK, "step after load: %s", fh_last_error_message());
    fuzz::step_was_skipped(p);
    return 0;
}
