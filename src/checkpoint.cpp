#include "checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unistd.h>

#include "error.hpp"

namespace fh {

static const char kMagic[8] = {'F', 'O', 'X', 'H', 'U', 'N', 'T', '1'};
static const uint32_t kFormat = 1;        // no replay
static const uint32_t kFormatReplay = 2;  // with the replay section

namespace {

constexpr uint64_t kFnvBasis = 1469598103934665603ull;

uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h = kFnvBasis) {
    for (size_t i = 0; i < n; ++i) { h ^= p[i]; h *= 1099511628211ull; }
    return h;
}

struct Bytes {
    std::vector<uint8_t> b;
    template <class T> void put(const T &v) { put_bytes(&v, sizeof v); }
    void put_bytes(const void *p, size_t n) {
        const uint8_t *q = static_cast<const uint8_t *>(p);
        b.insert(b.end(), q, q + n);
    }
};

// Writes through to the file while hashing what it wrote: a replay can be gigabytes, too much
// to assemble in memory first.
struct FileWriter {
    FILE *f;
    uint64_t hash = kFnvBasis;
    bool ok = true;
    template <class T> void put(const T &v) { put_bytes(&v, sizeof v); }
    void put_bytes(const void *p, size_t n) {
        hash = fnv1a(static_cast<const uint8_t *>(p), n, hash);
        ok = ok && fwrite(p, 1, n, f) == n;
    }
};

struct Reader {
    const std::vector<uint8_t> &b;
    size_t pos = 0;
    const char *path;
    void take(void *out, size_t n) {
        if (b.size() - pos < n)
            fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' ends at byte %zu, needed %zu more",
                 path, b.size(), n);
        memcpy(out, b.data() + pos, n);
        pos += n;
    }
    template <class T> T get() { T v; take(&v, sizeof v); return v; }
};

// Bytes of the valid rows of a replay with `rows` rows of E transitions.
uint64_t replay_bytes(const Dims &d, uint64_t rows, uint32_t E) {
    uint64_t per = 0;
    for (int f = 0; f < RF_COUNT; ++f) per += row_field_bytes(d, f);
    return rows * E * per;
}

}  // namespace

std::vector<uint8_t> config_fingerprint(const fh_config &c) {
    Bytes w;
    const uint32_t u[] = {c.batch_size, c.obs_dim, c.goal_dim, c.num_branches,
                          c.actions_per_branch, c.trunk_hidden, c.branch_hidden,
                          (uint32_t)c.her_reward, (uint32_t)c.her_terminal_on_success,
                          c.sn_layers, c.iql_hidden, c.iqn_hidden, c.iqn_cos, c.iqn_n,
                          c.iqn_n_target, c.attn_token_dim, c.attn_d_model, c.attn_heads,
                          c.attn_head_hidden, c.num_regimes};
    const float f[] = {c.q_clip, c.gamma, c.huber_kappa, c.her_ratio, c.her_epsilon,
                       c.iql_tau_hi, c.iql_tau_lo, c.awr_beta, c.awr_max, c.cql_alpha,
                       c.regime_beta, c.regime_min, c.regime_max, c.ema_tau, c.lr_q, c.lr_aux,
                       c.adam_beta1, c.adam_beta2, c.adam_eps, c.clip_norm};
    w.put_bytes(u, sizeof u);
    w.put_bytes(f, sizeof f);
    w.put(c.seed);
    return w.b;
}

void save_checkpoint(const char *path, const fh_config &c, const Checkpoint &ck) {
    // Write to a fresh temporary name beside it and rename, so a failed save never leaves half
    // a file behind and never touches another file.
    std::string tmp = std::string(path) + ".XXXXXX";
    const int fd = mkstemp(&tmp[0]);
    if (fd < 0) fail(FH_ERR_IO, "cannot create a file beside '%s': %s", path, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        remove(tmp.c_str());
        fail(FH_ERR_IO, "cannot write beside '%s': %s", path, strerror(errno));
    }
    FileWriter w{f};
    w.put_bytes(kMagic, sizeof kMagic);
    w.put(ck.has_replay ? kFormatReplay : kFormat);
    const std::vector<uint8_t> fp = config_fingerprint(c);
    w.put((uint32_t)fp.size());
    w.put_bytes(fp.data(), fp.size());
    w.put(ck.step);
    w.put(ck.act_calls);
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        w.put((uint64_t)ck.bufs[b].size());
        w.put_bytes(ck.bufs[b].data(), ck.bufs[b].size() * sizeof(float));
    }
    if (ck.has_replay) {
        w.put(c.replay_capacity);
        w.put(c.replay_envs);
        w.put(ck.replay.n_ins);
        for (const std::vector<uint8_t> &field : ck.replay.rows.field)
            w.put_bytes(field.data(), field.size());
    }
    const uint64_t sum = w.hash;  // of every byte before it
    w.put(sum);
    bool ok = w.ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path) != 0) {
        int e = errno;
        remove(tmp.c_str());
        fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(e));
    }
}

// Bytes of a checkpoint of this config and layout before its replay section (if any) and its
// checksum.
static size_t size_before_replay(const std::vector<uint8_t> &fp, const Layout &L) {
    size_t n = sizeof kMagic + 4 + 4 + fp.size() + 8 + 8;
    for (int b = 0; b < NUM_PERSISTENT; ++b) n += 8 + L.buf_size[b] * sizeof(float);
    return n;
}

// A replay section's header: the shape it was saved with and the rows inserted by then.
struct ReplayHeader {
    uint32_t K, E;
    uint64_t n_ins;
};
constexpr size_t kReplayHeaderBytes = 4 + 4 + 8;

Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L) {
    // Only regular files: a device or a pipe would be read until memory runs out, or forever.
    struct stat st;
    if (stat(path, &st) != 0) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(FH_ERR_IO, "checkpoint '%s' is not a regular file", path);
    std::unique_ptr<FILE, int (*)(FILE *)> f(fopen(path, "rb"), fclose);
    if (!f) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));

    // The magic first, so that a large file that is no checkpoint is refused without reading it.
    std::vector<uint8_t> bytes(std::min<size_t>((size_t)st.st_size, sizeof kMagic));
    if (fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
        fail(FH_ERR_IO, "cannot read checkpoint '%s'", path);
    if (bytes.size() < sizeof kMagic)
        fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' has %zu bytes, less than its magic",
             path, bytes.size());
    if (memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "'%s' is not a foxhunt checkpoint (bad magic)", path);
    bytes.resize((size_t)st.st_size);
    const size_t rest = bytes.size() - sizeof kMagic;
    if (fread(bytes.data() + sizeof kMagic, 1, rest, f.get()) != rest)
        fail(FH_ERR_IO, "cannot read checkpoint '%s'", path);

    // Intact (checksum), written by this config (fingerprint), then its contents. A file that
    // is short but starts with this config's header is a truncated one; any other mismatch is
    // corruption, also when the damage hits a size field.
    const std::vector<uint8_t> fp = config_fingerprint(c);
    const size_t before_replay = size_before_replay(fp, L);
    const bool sum_ok = bytes.size() >= sizeof kMagic + 8 &&
                        [&] {
                            uint64_t sum;
                            memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
                            return sum == fnv1a(bytes.data(), bytes.size() - 8);
                        }();
    Reader r{bytes, sizeof kMagic, path};
    const size_t fp_at = sizeof kMagic + 8;
    uint32_t format = 0;
    const bool same_config = bytes.size() >= fp_at + fp.size() &&
                             ((format = r.get<uint32_t>()) == kFormat ||
                              format == kFormatReplay) &&
                             r.get<uint32_t>() == fp.size() &&
                             memcmp(bytes.data() + fp_at, fp.data(), fp.size()) == 0;
    // The replay section's size follows from its header (checked against the checksum below).
    size_t want = before_replay + 8;
    ReplayHeader rh{0, 0, 0};
    if (same_config && format == kFormatReplay) {
        want += kReplayHeaderBytes;
        if (bytes.size() >= before_replay + kReplayHeaderBytes) {
            memcpy(&rh.K, bytes.data() + before_replay, 4);
            memcpy(&rh.E, bytes.data() + before_replay + 4, 4);
            memcpy(&rh.n_ins, bytes.data() + before_replay + 8, 8);
            // A shape beyond SPEC §2.1's bound is damage; bounding it keeps the size exact.
            if ((uint64_t)rh.K * rh.E <= (1ull << 32))
                want += replay_bytes(L.dims, replay_valid_rows(rh.n_ins, rh.K), rh.E);
        }
    }
    if (same_config && bytes.size() < want)
        fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' ends at byte %zu of %zu", path,
             bytes.size(), want);
    if (!sum_ok) fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' fails its checksum", path);
    if (!same_config)
        fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' was written by a pipeline with a "
             "different config (dimensions, hyperparameters or seed) or format", path);
    if (bytes.size() != want)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has %zu bytes, a checkpoint of this "
             "config %zu", path, bytes.size(), want);
    if (format == kFormatReplay && L.dims.K == 0)
        fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' holds a replay of %u rows x %u "
             "environments; this pipeline has no replay", path, rh.K, rh.E);
    if (format == kFormatReplay && (rh.K != L.dims.K || rh.E != L.dims.E))
        fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' holds a replay of %u rows x %u "
             "environments, this pipeline's replay_capacity x replay_envs is %u x %u", path,
             rh.K, rh.E, L.dims.K, L.dims.E);

    r.pos = fp_at + fp.size();
    Checkpoint ck;
    ck.step = r.get<uint64_t>();
    ck.act_calls = r.get<uint64_t>();
    ck.bufs.resize(NUM_BUFS);
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        if (r.get<uint64_t>() != L.buf_size[b])
            fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': buffer %d has the wrong size", path, b);
        ck.bufs[b].resize(L.buf_size[b]);
        r.take(ck.bufs[b].data(), L.buf_size[b] * sizeof(float));
    }
    // write_tensor refuses non-finite values; a checkpoint may not smuggle them in.
    const std::string bad = first_non_finite(L, ck);
    if (!bad.empty())
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': %s is not finite", path, bad.c_str());
    if (format == kFormatReplay) {
        r.pos += kReplayHeaderBytes;
        ck.has_replay = true;
        ck.replay.n_ins = rh.n_ins;
        ck.replay.rows.resize(L.dims, replay_valid_rows(rh.n_ins, rh.K));
        for (std::vector<uint8_t> &field : ck.replay.rows.field) r.take(field.data(), field.size());
        // Nor may it smuggle in rows that an insert would refuse.
        if (ck.replay.rows.R > 0) {
            try {
                check_elements(rows_checks(L.dims, ck.replay.rows.view()));
            } catch (const Error &e) {
                fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': replay %s", path,
                     e.message.c_str());
            }
        }
    }
    return ck;
}

namespace {

// The parameter buffer whose layout an Adam-moment buffer mirrors, and the moment's name.
struct MomentOf {
    Buf param;
    const char *name;
};
bool moment_of(Buf b, MomentOf &m) {
    switch (b) {
    case BUF_Q_M: m = {BUF_Q, "adam_m"}; return true;
    case BUF_Q_V: m = {BUF_Q, "adam_v"}; return true;
    case BUF_IQL_M: m = {BUF_IQL, "adam_m"}; return true;
    case BUF_IQL_V: m = {BUF_IQL, "adam_v"}; return true;
    case BUF_IQN_M: m = {BUF_IQN, "adam_m"}; return true;
    case BUF_IQN_V: m = {BUF_IQN, "adam_v"}; return true;
    case BUF_ATTN_M: m = {BUF_ATTN, "adam_m"}; return true;
    case BUF_ATTN_V: m = {BUF_ATTN, "adam_v"}; return true;
    default: return false;
    }
}

// "name[r, c]" of the named tensor that holds element i of buffer b, or "buffer b element i"
// (padding between nets is not named).
std::string element_name(const Layout &L, Buf b, size_t i) {
    char s[160];
    for (const TensorEntry &t : L.tensors)
        if (t.buf == b && i >= t.offset && i < t.offset + t.count()) {
            const size_t k = i - t.offset;
            snprintf(s, sizeof s, "%s[%zu, %zu]", t.name.c_str(), k / t.cols, k % t.cols);
            return s;
        }
    snprintf(s, sizeof s, "buffer %d element %zu", (int)b, i);
    return s;
}

}  // namespace

std::string first_non_finite(const Layout &L, const Checkpoint &ck) {
    for (int b = 0; b < NUM_PERSISTENT; ++b)
        for (size_t i = 0; i < ck.bufs[b].size(); ++i) {
            const float x = ck.bufs[b][i];
            if (std::isfinite(x)) continue;
            MomentOf m;
            const std::string where = moment_of((Buf)b, m)
                                          ? std::string(m.name) + " of " +
                                                element_name(L, m.param, i)
                                          : element_name(L, (Buf)b, i);
            char v[32];
            snprintf(v, sizeof v, " = %g", (double)x);
            return where + v;
        }
    return std::string();
}

}  // namespace fh
