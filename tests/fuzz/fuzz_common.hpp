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
// Adam moments and the step and act counters).
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
    const std::string path = scratch_path("digest.ckpt");
    FUZZ_ASSERT(fh_pipeline_save(p, path.c_str()) == FH_OK, "save: %s", fh_last_error_message());
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

inline Start &start() {
    static Start s;
    if (s.p) return s;
    const fh_config c = tiny_config();
    FUZZ_ASSERT(fh_pipeline_create(&c, &s.p) == FH_OK, "create: %s", fh_last_error_message());
    std::vector<float> f;
    std::vector<int32_t> ints;
    std::vector<uint8_t> done;
    fh_batch b;
    fill_valid_batch(c, 1, f, ints, done, b);
    FUZZ_ASSERT(fh_pipeline_upload(s.p, &b) == FH_OK, "upload: %s", fh_last_error_message());
    FUZZ_ASSERT(fh_pipeline_step(s.p) == FH_OK, "step: %s", fh_last_error_message());
    s.ckpt = scratch_path("start.ckpt");
    FUZZ_ASSERT(fh_pipeline_save(s.p, s.ckpt.c_str()) == FH_OK, "save");
    return s;
}

// The start state, whatever the last input did to the pipeline.
inline fh_pipeline *load_start() {
    Start &s = start();
    FUZZ_ASSERT(fh_pipeline_load(s.p, s.ckpt.c_str()) == FH_OK, "load start: %s",
                fh_last_error_message());
    fh_pipeline_check(s.p);  // forget skips of the last input
    return s.p;
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
