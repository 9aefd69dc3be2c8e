// fh_pipeline_write_tensor of arbitrary values into arbitrary tensors, then step and act.
// Promises checked: a refused write changes nothing; an accepted one reads back bitwise; the
// state it makes steps (FH_OK, the guard absorbing overflow) and acts (FH_OK or
// FH_ERR_NON_FINITE, never a NaN q-value with FH_OK).
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const fh_config c = fuzz::tiny_config();
    fh_pipeline *p = fuzz::load_start();
    fuzz::Bytes in{data, size};
    uint32_t n = 0;
    fh_pipeline_num_tensors(p, &n);
    const uint8_t flags = in.u8();
    fh_tensor_info info;
    info.struct_size = sizeof info;
    FUZZ_ASSERT(fh_pipeline_tensor_info(p, in.u8() % n, &info) == FH_OK, "tensor_info");
    std::string name = info.name;
    if ((flags & 7) == 7) name += (char)('a' + in.u8() % 26);  // an unknown name
    size_t count = (size_t)info.rows * info.cols;
    if ((flags & 0x18) == 0x18) {  // a wrong count, never below 0
        const long delta = (int8_t)in.u8();
        count = delta < 0 && (size_t)-delta > count ? 0 : (size_t)((long)count + delta);
    }
    std::vector<float> values(count + 1);
    const int mode = (flags >> 5) & 3;
    for (float &x : values) {
        if (mode == 0) x = in.f32();                                    // raw bits
        else if (mode == 1) x = (float)(int8_t)in.u8() / 16.0f;           // small
        else if (mode == 2) x = (float)(int8_t)in.u8() * 1e36f;           // huge, finite or inf
        else x = (float)(int8_t)in.u8() / 16.0f * (float)(1u << (in.u8() % 30));
    }
    const uint64_t before = fuzz::digest(p);
    if (!fuzz::accepted(p, "write_tensor",
                        fh_pipeline_write_tensor(p, name.c_str(), values.data(), count), before,
                        {FH_ERR_UNKNOWN_NAME, FH_ERR_BUFFER_SIZE, FH_ERR_NON_FINITE,
                         FH_ERR_BAD_VALUE}))
        return 0;
    std::vector<float> back(count);
    FUZZ_ASSERT(fh_pipeline_read_tensor(p, name.c_str(), back.data(), count) == FH_OK, "read");
    FUZZ_ASSERT(memcmp(back.data(), values.data(), count * sizeof(float)) == 0,
                "%s does not read back what was written", name.c_str());
    FUZZ_ASSERT(fh_pipeline_step(p) == FH_OK, "step: %s", fh_last_error_message());
    fuzz::step_was_skipped(p);
    const size_t rows = 3;
    std::vector<float> obs(rows * c.obs_dim, 0.5f), goal(rows * c.goal_dim, -0.5f),
        q(rows * c.num_branches * c.actions_per_branch);
    std::vector<int32_t> actions(rows * c.num_branches);
    const fh_status a = fh_pipeline_act(p, obs.data(), goal.data(), (uint32_t)rows, 0.0f,
                                        actions.data(), q.data());
    FUZZ_ASSERT(a == FH_OK || a == FH_ERR_NON_FINITE, "act: %s", fh_status_string(a));
    if (a == FH_OK)
        for (float x : q) FUZZ_ASSERT(x == x && x - x == 0, "act gave q = %g with FH_OK", (double)x);
    return 0;
}
