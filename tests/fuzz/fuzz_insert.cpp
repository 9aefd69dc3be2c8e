// fh_pipeline_insert of arbitrary rows into a pipeline with a replay (SPEC §2.1), then a step.
// Rows: raw or small floats, actions, regimes and flags mostly valid (done = 1 without
// episode_end now and then), NULL arrays, wrong num_envs, struct_size or memory kind, more rows
// than the ring keeps. Promises checked: a refused insert changes nothing (the digest: every
// tensor, the metrics, the checkpoint with the replay); an accepted one leaves the replay as
// SPEC §2.1 says, read back from a checkpoint: n_ins grown by R, the newest min(R, K) rows the
// inserted ones byte for byte (regime absent: 0), the older ones those kept from before. A step
// then runs, changes no byte of the replay, and is skipped exactly when fh_pipeline_check says
// so, leaving the state unchanged.
#include "fuzz_common.hpp"
#include "../state_io.hpp"

namespace {

fh::Checkpoint state(fh_pipeline *p) {
    fh::Checkpoint ck;
    FUZZ_ASSERT(fhtest::read_state(p, fuzz::scratch_path("state.ckpt"), ck), "read state");
    return ck;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const fh_config c = fuzz::tiny_replay_config();
    fh_pipeline *p = fuzz::load_start(c);
    fuzz::Bytes in{data, size};
    const uint8_t flags = in.u8(), sizes = in.u8();
    const uint32_t K = c.replay_capacity;
    const uint32_t R = 1 + in.u8() % (2 * K);
    fuzz::Rows w;
    fuzz::fill_valid_rows(c, R, in.u8(), w);
    auto value = [&] { return (flags & 0x10) ? in.f32() : (float)(int8_t)in.u8() / 16.0f; };
    if (flags & 0x40)  // fuzzed values over the valid ones
        for (auto *v : {&w.obs, &w.goal, &w.reward, &w.next_obs, &w.nag})
            for (float &x : *v) x = value();
    if (flags & 0x20) {  // one huge finite scale
        const float scale = (float)(1u << (in.u8() % 32)) * 1e9f;
        for (float &x : w.obs) x *= scale;
        for (float &x : w.reward) x *= scale;
    }
    for (int32_t &a : w.action)
        if (in.u8() >= 250) a = (int32_t)in.u32();
    for (int32_t &z : w.regime)
        if (in.u8() >= 250) z = (int32_t)in.u32();
    for (size_t i = 0; i < w.done.size(); ++i) {
        const uint8_t v = in.u8();
        if (v >= 250) w.done[i] = v;             // not a flag
        else if (v >= 245) w.done[i] = 1;        // terminal, perhaps without episode_end
        if (in.u8() >= 250) w.episode_end[i] = in.u8();
    }
    fh_replay_rows &r = w.r;
    if ((sizes & 7) == 7) r.num_envs = in.u32();
    if ((sizes & 0x38) == 0x38) r.struct_size = in.u32();
    if ((sizes & 0xc0) == 0xc0) r.memory = (int32_t)in.u32();
    if (flags & 1) r.obs = nullptr;
    if (flags & 2) r.goal = nullptr;
    if (flags & 4) r.episode_end = nullptr;
    if (flags & 8) r.regime = nullptr;  // allowed: regime 0
    if ((flags & 0x80) && in.u8() < 16) r.action = nullptr;

    const fh::Checkpoint before = state(p);
    const uint64_t digest_before = fuzz::digest(p);
    if (!fuzz::accepted(p, "insert", fh_pipeline_insert(p, &r), digest_before,
                        {FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE, FH_ERR_BUFFER_SIZE,
                         FH_ERR_NON_FINITE, FH_ERR_OUT_OF_RANGE, FH_ERR_BAD_VALUE,
                         FH_ERR_UNSUPPORTED}))
        return 0;
    const fh::Checkpoint ins = state(p);
    FUZZ_ASSERT(fhtest::first_different_buffer(before, ins) < 0, "an insert changed the state");
    FUZZ_ASSERT(ins.replay.n_ins == before.replay.n_ins + R, "n_ins %llu after %llu + %u rows",
                (unsigned long long)ins.replay.n_ins, (unsigned long long)before.replay.n_ins, R);
    const uint64_t N0 = before.replay.rows.R, N = ins.replay.rows.R, fresh = R < K ? R : K;
    FUZZ_ASSERT(N == (N0 + R < K ? N0 + R : K), "%llu valid rows", (unsigned long long)N);
    const void *src[fh::RF_COUNT] = {r.obs, r.goal, r.action, r.reward, r.done, r.next_obs,
                                     r.next_achieved_goal, r.regime, r.episode_end};
    for (int f = 0; f < fh::RF_COUNT; ++f) {
        const std::vector<uint8_t> &got = ins.replay.rows.field[f];
        const std::vector<uint8_t> &old = before.replay.rows.field[f];
        const size_t row = got.size() / (N ? N : 1);  // bytes of one row of E transitions
        if (row == 0) continue;  // goal fields with goal_dim = 0
        std::vector<uint8_t> want((size_t)fresh * row, 0);
        if (src[f])
            memcpy(want.data(), (const uint8_t *)src[f] + (size_t)(R - fresh) * row, want.size());
        FUZZ_ASSERT(memcmp(got.data() + (N - fresh) * row, want.data(), want.size()) == 0,
                    "field %d: the newest rows are not the inserted ones", f);
        const size_t kept = (size_t)(N - fresh) * row;
        FUZZ_ASSERT(memcmp(got.data(), old.data() + old.size() - kept, kept) == 0,
                    "field %d: the rows kept from before changed", f);
    }
    FUZZ_ASSERT(fh_pipeline_train(p, 1) == FH_OK, "step: %s", fh_last_error_message());
    const bool skipped = fuzz::step_was_skipped(p);
    const fh::Checkpoint after = state(p);
    FUZZ_ASSERT(fhtest::same_replay(ins, after), "a step changed the replay");
    if (skipped)
        FUZZ_ASSERT(fhtest::first_different_buffer(ins, after) < 0,
                    "a skipped step changed the state");
    return 0;
}
