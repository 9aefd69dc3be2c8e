// fh_pipeline_upload of arbitrary batches, then step, metrics, check and act. Promises checked:
// a refused upload changes nothing; an accepted batch steps (FH_OK), and a step the divergence
// guard skips leaves every parameter, target and state tensor bitwise as it was and is reported
// by fh_pipeline_check exactly then; act returns FH_OK or FH_ERR_NON_FINITE.
#include "fuzz_common.hpp"

namespace {

std::vector<float> state_tensors(fh_pipeline *p) {
    std::vector<float> all, buf;
    uint32_t n = 0;
    fh_pipeline_num_tensors(p, &n);
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info;
        info.struct_size = sizeof info;
        fh_pipeline_tensor_info(p, i, &info);
        if (info.group == FH_GROUP_OUTPUT) continue;
        buf.resize((size_t)info.rows * info.cols);
        fh_pipeline_read_tensor(p, info.name, buf.data(), buf.size());
        all.insert(all.end(), buf.begin(), buf.end());
    }
    return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const fh_config c = fuzz::tiny_config();
    fh_pipeline *p = fuzz::load_start();
    fuzz::Bytes in{data, size};
    const uint8_t flags = in.u8(), sizes = in.u8();
    const size_t B = c.batch_size, O = c.obs_dim, G = c.goal_dim, NB = c.num_branches;
    // Floats: raw bit patterns (NaN, infinities, huge values) or small finite ones.
    auto value = [&] { return (flags & 0x10) ? in.f32() : (float)(int8_t)in.u8() / 16.0f; };
    std::vector<float> obs(B * O), next_obs(B * O), goal(B * G), nag(B * G), her(B * G),
        reward(B);
    for (auto *v : {&obs, &next_obs, &goal, &nag, &her, &reward})
        for (float &x : *v) x = value();
    if (flags & 0x20) {  // one huge finite scale, as the divergence reports had
        const float scale = (float)(1u << (in.u8() % 32)) * 1e9f;
        for (float &x : obs) x *= scale;
        for (float &x : reward) x *= scale;
    }
    std::vector<int32_t> action(B * NB), regime(B);
    for (int32_t &a : action) {
        const uint8_t v = in.u8();
        a = v < 240 ? (int32_t)(v % c.actions_per_branch) : (int32_t)in.u32();
    }
    for (int32_t &r : regime) {
        const uint8_t v = in.u8();
        r = v < 240 ? (int32_t)(v % c.num_regimes) : (int32_t)in.u32();
    }
    std::vector<uint8_t> done(B);
    for (uint8_t &d : done) {
        const uint8_t v = in.u8();
        d = v < 240 ? (v & 1) : v;
    }
    fh_batch b = FH_BATCH_INIT;
    b.batch_size = (sizes & 7) == 7 ? in.u32() : (uint32_t)B;
    if ((sizes & 0x38) == 0x38) b.struct_size = in.u32();
    b.obs = (flags & 1) ? nullptr : obs.data();
    b.goal = (flags & 2) ? nullptr : goal.data();
    b.action = action.data();
    b.reward = reward.data();
    b.done = done.data();
    b.next_obs = next_obs.data();
    b.next_achieved_goal = (flags & 4) ? nullptr : nag.data();
    b.her_goal = her.data();
    b.regime = (flags & 8) ? nullptr : regime.data();

    const uint64_t before = fuzz::digest(p);
    if (!fuzz::accepted(p, "upload", fh_pipeline_upload(p, &b), before,
                        {FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE, FH_ERR_BUFFER_SIZE,
                         FH_ERR_NON_FINITE, FH_ERR_OUT_OF_RANGE}))
        return 0;
    const std::vector<float> state0 = state_tensors(p);
    FUZZ_ASSERT(fh_pipeline_step(p) == FH_OK, "step: %s", fh_last_error_message());
    if (fuzz::step_was_skipped(p)) {
        const std::vector<float> state1 = state_tensors(p);
        FUZZ_ASSERT(memcmp(state0.data(), state1.data(), state0.size() * sizeof(float)) == 0,
                    "a skipped step changed the state");
    }
    std::vector<int32_t> actions(B * NB);
    const fh_status a = fh_pipeline_act(p, obs.data(), goal.data(), (uint32_t)B, 0.1f,
                                        actions.data(), nullptr);
    FUZZ_ASSERT(a == FH_OK || a == FH_ERR_NON_FINITE, "act: %s: %s", fh_status_string(a),
                fh_last_error_message());
    if (a == FH_OK)
        for (int32_t x : actions)
            FUZZ_ASSERT(x >= 0 && x < (int32_t)c.actions_per_branch, "act chose action %d", x);
    return 0;
}
