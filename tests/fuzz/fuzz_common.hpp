// Shared by the libFuzzer harnesses (tests/fuzz/README.md): a tiny config that steps in well
// under a millisecond, a digest of everything a refused call promises not to change, and the
// assertion that aborts (a libFuzzer crash) with a message.
#pragma once
#include <foxhunt.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#define FUZZ_ASSERT(cond, ...)                                                   \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "FUZZ ASSERTION FAILED (%s:%d): ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
            abort();                                                             \
        }                                                                        \
    } while (0)

namespace fuzz {

inline fh_config tiny_config() {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 4;
    c.obs_dim = 4;
    c.goal_dim = 2;
    c.num_branches = 2;
    c.actions_per_branch = 3;
    c.trunk_hidden = 8;
    c.branch_hidden = 4;
    c.iql_hidden = 4;
    c.iqn_hidden = 4;
    c.iqn_cos = 3;
    c.iqn_n = 2;
    c.iqn_n_target = 2;
    c.attn_token_dim = 2;
    c.attn_d_model = 4;
    c.attn_heads = 2;
    c.attn_head_hidden = 4;
    c.num_regimes = 2;
    return c;
}

// tiny_config() with a replay of 6 rows of 2 environments (SPEC §2.1).
inline fh_config tiny_replay_config() {
    fh_config c = tiny_config();
    c.replay_capacity = 6;
    c.replay_envs = 2;
    return c;
}

inline uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
    const uint8_t *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < n; ++i) { h ^= p[i]; h *= 1099511628211ull; }
    return h;
}

inline std::string scratch_path(const char *name) {
    const char *dir = getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/foxhunt-fuzz-" + std::to_string(getpid()) +
           "-" + name;
}

inline std::vector<uint8_t> read_file(const std::string &path) {
    std::vector<uint8_t> out;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return out;
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
    fclose(f);
    return out;
}

inline void write_file(const std::string &path, const void *data, size_t n) {
    FILE *f = fopen(path.c_str(), "wb");
    FUZZ_ASSERT(f, "cannot write %s", path.c_str());
    FUZZ_ASSERT(fwrite(data, 1, n, f) == n, "short write to %s", path.c_str());
    fclose(f);
}

// Digest of everything fh_pipeline's refused calls promise to keep: every named tensor
// (parameters, targets, state, step outputs), the metrics, and the checkpoint (which adds the
// Adam moments, the step and act counters, and the replay if there is one).
inline uint64_t digest(fh_pipeline *p) {
    uint64_t h = 1469598103934665603ull;
    uint32_t n = 0;
    FUZZ_ASSERT(fh_pipeline_num_tensors(p, &n) == FH_OK, "num_tensors");
    std::vector<float> buf;
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info;
        info.struct_size = sizeof info;
        FUZZ_ASSERT(fh_pipeline_tensor_info(p, i, &info) == FH_OK, "tensor_info");
        buf.resize((size_t)info.rows * info.cols);
        FUZZ_ASSERT(fh_pipeline_read_tensor(p, info.name, buf.data(), buf.size()) == FH_OK,
                    "read %s: %s", info.name, fh_last_error_message());
        h = fnv1a(buf.data(), buf.size() * sizeof(float), h);
    }
    fh_metrics m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    FUZZ_ASSERT(fh_pipeline_metrics(p, &m) == FH_OK, "metrics: %s", fh_last_error_message());
    h = fnv1a(&m, sizeof m, h);
    fh_config c;
    c.struct_size = sizeof c;
    FUZZ_ASSERT(fh_pipeline_config(p, &c) == FH_OK, "config");
    const std::string path = scratch_path("digest.ckpt");
    FUZZ_ASSERT(fh_pipeline_save_ex(p, path.c_str(), c.replay_capacity ? FH_SAVE_REPLAY : 0) ==
                    FH_OK, "save: %s", fh_last_error_message());
    const std::vector<uint8_t> bytes = read_file(path);
    unlink(path.c_str());
    return fnv1a(bytes.data(), bytes.size(), h);
}

// A pipeline of tiny_config() that has taken one step on a fixed valid batch, and its
// checkpoint, so every input starts from the same state (load_start()).
struct Start {
    fh_pipeline *p = nullptr;
    std::string ckpt;
};

inline void fill_valid_batch(const fh_config &c, uint32_t seed, std::vector<float> &f,
                             std::vector<int32_t> &ints, std::vector<uint8_t> &done,
                             fh_batch &b) {
    const size_t B = c.batch_size, O = c.obs_dim, G = c.goal_dim, NB = c.num_branches;
    f.assign(B * (2 * O + 3 * G + 1), 0.0f);
    for (size_t i = 0; i < f.size(); ++i) f[i] = (float)((i * 2654435761u + seed) % 2000) / 1000 - 1;
    ints.assign(B * (NB + 1), 0);
    for (size_t i = 0; i < B * NB; ++i) ints[i] = (int32_t)((i + seed) % c.actions_per_branch);
    for (size_t i = 0; i < B; ++i) ints[B * NB + i] = (int32_t)((i + seed) % c.num_regimes);
    done.assign(B, 0);
    done[0] = 1;
    const fh_batch init = FH_BATCH_INIT;
    b = init;
    b.batch_size = (uint32_t)B;
    float *q = f.data();
    b.obs = q; q += B * O;
    b.next_obs = q; q += B * O;
    b.goal = q; q += B * G;
    b.next_achieved_goal = q; q += B * G;
    b.her_goal = q; q += B * G;
    b.reward = q;
    b.action = ints.data();
    b.regime = ints.data() + B * NB;
    b.done = done.data();
}

// R valid rows of c's replay ([R, E, ...] arrays in `rows`, which `r` points at): small
// floats, valid actions and regimes, an episode ending every third transition, terminal every
// other time.
struct Rows {
    std::vector<float> obs, goal, reward, next_obs, nag;
    std::vector<int32_t> action, regime;
    std::vector<uint8_t> done, episode_end;
    fh_replay_rows r;
};
inline void fill_valid_rows(const fh_config &c, uint32_t R, uint32_t seed, Rows &w) {
    const size_t n = (size_t)R * c.replay_envs, O = c.obs_dim, G = c.goal_dim;
    auto fill = [&](std::vector<float> &v, size_t count) {
        v.resize(count);
        for (size_t i = 0; i < count; ++i)
            v[i] = (float)((i * 2654435761u + seed) % 2000) / 1000 - 1;
    };
    fill(w.obs, n * O);
    fill(w.next_obs, n * O);
    fill(w.goal, n * G);
    fill(w.nag, n * G);
    fill(w.reward, n);
    w.action.resize(n * c.num_branches);
    for (size_t i = 0; i < w.action.size(); ++i)
        w.action[i] = (int32_t)((i + seed) % c.actions_per_branch);
    w.regime.resize(n);
    for (size_t i = 0; i < n; ++i) w.regime[i] = (int32_t)((i + seed) % c.num_regimes);
    w.done.resize(n);
    w.episode_end.resize(n);
    for (size_t i = 0; i < n; ++i) {
        w.episode_end[i] = (i + seed) % 3 == 0;
        w.done[i] = w.episode_end[i] && (i + seed) % 2 == 0;
    }
    const fh_replay_rows init = FH_REPLAY_ROWS_INIT;
    w.r = init;
    w.r.num_rows = R;
    w.r.num_envs = c.replay_envs;
    w.r.obs = w.obs.data();
    w.r.goal = G ? w.goal.data() : nullptr;
    w.r.action = w.action.data();
    w.r.reward = w.reward.data();
    w.r.done = w.done.data();
    w.r.next_obs = w.next_obs.data();
    w.r.next_achieved_goal = G ? w.nag.data() : nullptr;
    w.r.regime = w.regime.data();
    w.r.episode_end = w.episode_end.data();
}

// Feeds a pipeline of @p c one valid input: two uploads, or with a replay one insert of more
// rows than it keeps.
inline void feed_valid(fh_pipeline *p, const fh_config &c, uint32_t seed) {
    if (c.replay_capacity > 0) {
        Rows w;
        fill_valid_rows(c, c.replay_capacity + 2, seed, w);
        FUZZ_ASSERT(fh_pipeline_insert(p, &w.r) == FH_OK, "insert: %s", fh_last_error_message());
        return;
    }
    std::vector<float> f;
    std::vector<int32_t> ints;
    std::vector<uint8_t> done;
    fh_batch b;
    fill_valid_batch(c, seed, f, ints, done, b);
    if (c.goal_dim == 0) b.goal = b.next_achieved_goal = b.her_goal = nullptr;
    for (int k = 0; k < 2; ++k)
        FUZZ_ASSERT(fh_pipeline_upload(p, &b) == FH_OK, "upload: %s", fh_last_error_message());
}

// The start pipeline of @p c (tiny_config() or tiny_replay_config(); one per harness) after one
// step on valid input, with its checkpoint (the replay included).
inline Start &start(const fh_config &c) {
    static Start s;
    if (s.p) return s;
    FUZZ_ASSERT(fh_pipeline_create(&c, &s.p) == FH_OK, "create: %s", fh_last_error_message());
    feed_valid(s.p, c, 1);
    FUZZ_ASSERT(fh_pipeline_step(s.p) == FH_OK, "step: %s", fh_last_error_message());
    s.ckpt = scratch_path("start.ckpt");
    FUZZ_ASSERT(fh_pipeline_save_ex(s.p, s.ckpt.c_str(), c.replay_capacity ? FH_SAVE_REPLAY : 0) ==
                    FH_OK, "save");
    return s;
}

// The start state, whatever the last input did to the pipeline.
inline fh_pipeline *load_start(const fh_config &c = tiny_config()) {
    Start &s = start(c);
    FUZZ_ASSERT(fh_pipeline_load(s.p, s.ckpt.c_str()) == FH_OK, "load start: %s",
                fh_last_error_message());
    fh_pipeline_check(s.p);  // forget skips of the last input
    return s.p;
}

// A call's status is one of @p allowed (FH_OK included); if it refused the input, the digest
// is what it was before (@p before). Returns whether the call accepted it.
inline bool accepted(fh_pipeline *p, const char *call, fh_status s, uint64_t before,
                     std::initializer_list<fh_status> allowed) {
    bool known = s == FH_OK;
    for (fh_status a : allowed) known = known || s == a;
    FUZZ_ASSERT(known, "%s returned %s, not a documented status: %s", call, fh_status_string(s),
                fh_last_error_message());
    if (s != FH_OK)
        FUZZ_ASSERT(digest(p) == before, "a refused %s (%s: %s) changed the pipeline", call,
                    fh_status_string(s), fh_last_error_message());
    return s == FH_OK;
}

// After a step: the metrics and fh_pipeline_check() agree on whether the divergence guard
// skipped it. Returns whether it did.
inline bool step_was_skipped(fh_pipeline *p) {
    fh_metrics m;
    m.struct_size = sizeof m;
    FUZZ_ASSERT(fh_pipeline_metrics(p, &m) == FH_OK, "metrics: %s", fh_last_error_message());
    const fh_status chk = fh_pipeline_check(p);
    FUZZ_ASSERT(chk == FH_OK || chk == FH_ERR_NON_FINITE, "check: %s", fh_status_string(chk));
    FUZZ_ASSERT((chk == FH_ERR_NON_FINITE) == (m.last_step_skipped == 1),
                "check says %s but last_step_skipped = %u", fh_status_string(chk),
                m.last_step_skipped);
    return m.last_step_skipped == 1;
}

// Reads values from the fuzz input in turn, cycling over it (zeros when it is empty).
struct Bytes {
    const uint8_t *data;
    size_t size, pos = 0;
    uint8_t u8() { return size ? data[pos++ % size] : 0; }
    uint32_t u32() {
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) v = v << 8 | u8();
        return v;
    }
    float f32() {
        const uint32_t u = u32();
        float x;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    bool left() const { return pos < size; }
};

}  // namespace fuzz
