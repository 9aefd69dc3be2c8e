#include "checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

#include "atomic_file.hpp"
#include "config.hpp"
#include "error.hpp"
#include "state_ranges.hpp"

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

// Bytes in memory (the config fingerprint).
struct Bytes {
    std::vector<uint8_t> b;
    void put_bytes(const void *p, size_t n) {
        const uint8_t *q = static_cast<const uint8_t *>(p);
        b.insert(b.end(), q, q + n);
    }
};

// Bytes on their way into an AtomicFile through a fixed buffer, checksummed as they pass.
class FileWriter {
public:
    explicit FileWriter(AtomicFile &f) : f_(f) { buf_.reserve(kBuf); }
    void put_bytes(const void *p, size_t n) {
        if (buf_.size() + n > kBuf) flush();
        if (n >= kBuf) {
            sum_ = fnv1a(static_cast<const uint8_t *>(p), n, sum_);
            f_.write(p, n);
            return;
        }
        const uint8_t *q = static_cast<const uint8_t *>(p);
        buf_.insert(buf_.end(), q, q + n);
    }
    template <class T> void put(const T &v) { put_bytes(&v, sizeof v); }
    void flush() {
        sum_ = fnv1a(buf_.data(), buf_.size(), sum_);
        f_.write(buf_.data(), buf_.size());
        buf_.clear();
    }
    uint64_t sum() const { return sum_; }  // of every byte flushed

private:
    static constexpr size_t kBuf = 1 << 18;
    AtomicFile &f_;
    std::vector<uint8_t> buf_;
    uint64_t sum_ = kFnvBasis;
};

// Floats the save reads from the backend at a time.
constexpr size_t kChunkFloats = 1 << 16;

void read_exactly(FILE *f, void *out, size_t n, const char *path) {
    if (n > 0 && fread(out, 1, n, f) != n) fail(FH_ERR_IO, "cannot read checkpoint '%s'", path);
}

// Reads a checkpoint's body in file order straight into its destination, hashing every byte.
// The file's size was checked first, so every read is within it.
struct FileReader {
    FILE *f;
    const char *path;
    uint64_t sum;
    void take(void *out, size_t n) {
        read_exactly(f, out, n, path);
        sum = fnv1a(static_cast<const uint8_t *>(out), n, sum);
    }
    template <class T> T get() { T v; take(&v, sizeof v); return v; }
    void skip(size_t n) {
        std::vector<uint8_t> chunk(std::min<size_t>(n, 1 << 18));
        for (size_t k; n > 0; n -= k) {
            k = std::min(n, chunk.size());
            take(chunk.data(), k);
        }
    }
    bool sum_matches() {  // the stored checksum, the file's last 8 bytes (not hashed)
        uint64_t stored;
        read_exactly(f, &stored, sizeof stored, path);
        return stored == sum;
    }
};

// A replay section's header: the shape it was saved with and the rows inserted by then.
struct ReplayHeader {
    uint32_t K = 0, E = 0;
    uint64_t n_ins = 0;
};
constexpr size_t kReplayHeaderBytes = 4 + 4 + 8;

// Bytes of the valid rows of a replay with `rows` rows of E transitions.
uint64_t replay_bytes(const Dims &d, uint64_t rows, uint32_t E) {
    uint64_t per = 0;
    for (int f = 0; f < RF_COUNT; ++f) per += row_field_bytes(d, f);
    return rows * E * per;
}

// Bytes of a checkpoint of this layout before its replay section (if any) and its checksum.
size_t size_before_replay(size_t fp_bytes, const Layout &L) {
    size_t n = sizeof kMagic + 4 + 4 + fp_bytes + 8 + 8;
    for (int b = 0; b < NUM_PERSISTENT; ++b) n += 8 + L.buf_size[b] * sizeof(float);
    return n;
}

// The size of a checkpoint of @p format written by a config of layout @p L: format 1 follows
// from the layout; format 2 also from its replay header, read from @p fd into @p rh when the
// file reaches it (if not, the size up to that header: the file is too short for it either
// way). 0 when the replay header is damaged (a shape beyond SPEC §2.1's K·E ≤ 2^32, or empty).
size_t implied_size(uint32_t format, size_t fp_bytes, const Layout &L, int fd, size_t file_size,
                    ReplayHeader &rh) {
    const size_t before = size_before_replay(fp_bytes, L);
    if (format != kFormatReplay) return before + 8;
    if (file_size < before + kReplayHeaderBytes) return before + kReplayHeaderBytes + 8;
    uint8_t h[kReplayHeaderBytes];
    if (pread(fd, h, sizeof h, (off_t)before) != (ssize_t)sizeof h) return 0;
    memcpy(&rh.K, h, 4);
    memcpy(&rh.E, h + 4, 4);
    memcpy(&rh.n_ins, h + 8, 8);
    if (rh.K == 0 || rh.E == 0 || (uint64_t)rh.K * rh.E > (1ull << 32)) return 0;
    return before + kReplayHeaderBytes +
           replay_bytes(L.dims, replay_valid_rows(rh.n_ins, rh.K), rh.E) + 8;
}

// The fields of fh_config a checkpoint's fingerprint holds, in the order written: the twenty
// 4-byte integers, the twenty floats, the seed. (The order is the file format's.)
struct ConfigField {
    const char *name;
    size_t offset, bytes;
    char kind;  // 'u' 4-byte integer, 'f' float, 's' the 64-bit seed
};
#define FH_FIELD(f, k) \
    { #f, offsetof(fh_config, f), sizeof(fh_config::f), k }
const ConfigField kConfigFields[] = {FH_FIELD(batch_size, 'u'),
                                     FH_FIELD(obs_dim, 'u'),
                                     FH_FIELD(goal_dim, 'u'),
                                     FH_FIELD(num_branches, 'u'),
                                     FH_FIELD(actions_per_branch, 'u'),
                                     FH_FIELD(trunk_hidden, 'u'),
                                     FH_FIELD(branch_hidden, 'u'),
                                     FH_FIELD(her_reward, 'u'),
                                     FH_FIELD(her_terminal_on_success, 'u'),
                                     FH_FIELD(sn_layers, 'u'),
                                     FH_FIELD(iql_hidden, 'u'),
                                     FH_FIELD(iqn_hidden, 'u'),
                                     FH_FIELD(iqn_cos, 'u'),
                                     FH_FIELD(iqn_n, 'u'),
                                     FH_FIELD(iqn_n_target, 'u'),
                                     FH_FIELD(attn_token_dim, 'u'),
                                     FH_FIELD(attn_d_model, 'u'),
                                     FH_FIELD(attn_heads, 'u'),
                                     FH_FIELD(attn_head_hidden, 'u'),
                                     FH_FIELD(num_regimes, 'u'),
                                     FH_FIELD(q_clip, 'f'),
                                     FH_FIELD(gamma, 'f'),
                                     FH_FIELD(huber_kappa, 'f'),
                                     FH_FIELD(her_ratio, 'f'),
                                     FH_FIELD(her_epsilon, 'f'),
                                     FH_FIELD(iql_tau_hi, 'f'),
                                     FH_FIELD(iql_tau_lo, 'f'),
                                     FH_FIELD(awr_beta, 'f'),
                                     FH_FIELD(awr_max, 'f'),
                                     FH_FIELD(cql_alpha, 'f'),
                                     FH_FIELD(regime_beta, 'f'),
                                     FH_FIELD(regime_min, 'f'),
                                     FH_FIELD(regime_max, 'f'),
                                     FH_FIELD(ema_tau, 'f'),
                                     FH_FIELD(lr_q, 'f'),
                                     FH_FIELD(lr_aux, 'f'),
                                     FH_FIELD(adam_beta1, 'f'),
                                     FH_FIELD(adam_beta2, 'f'),
                                     FH_FIELD(adam_eps, 'f'),
                                     FH_FIELD(clip_norm, 'f'),
                                     FH_FIELD(seed, 's')};
#undef FH_FIELD

// "config.lr_q is 0.00100000005 in the file, 0.000300000014 in this pipeline (and 2 more
// fields differ)": the first field of the fingerprint in which two configs differ.
std::string config_difference(const fh_config &file, const fh_config &here) {
    std::string first;
    int more = -1;
    for (const ConfigField &fl : kConfigFields) {
        const uint8_t *a = reinterpret_cast<const uint8_t *>(&file) + fl.offset;
        const uint8_t *b = reinterpret_cast<const uint8_t *>(&here) + fl.offset;
        if (memcmp(a, b, fl.bytes) == 0)
            continue;
        if (++more > 0)
            continue;
        char s[200];
        if (fl.kind == 'f') {
            float x, y;
            memcpy(&x, a, 4);
            memcpy(&y, b, 4);
            snprintf(s, sizeof s, "config.%s is %.9g in the file, %.9g in this pipeline", fl.name,
                     (double)x, (double)y);
        } else if (fl.kind == 's') {
            uint64_t x, y;
            memcpy(&x, a, 8);
            memcpy(&y, b, 8);
            snprintf(s, sizeof s, "config.%s is %llu in the file, %llu in this pipeline", fl.name,
                     (unsigned long long)x, (unsigned long long)y);
        } else {
            int32_t x, y;
            memcpy(&x, a, 4);
            memcpy(&y, b, 4);
            snprintf(s, sizeof s, "config.%s is %d in the file, %d in this pipeline", fl.name,
                     (int)x, (int)y);
        }
        first = s;
    }
    if (more > 0)
        first += " (and " + std::to_string(more) +
                 (more > 1 ? " more fields differ)" : " more field differs)");
    return first;
}

// The config a checkpoint header (magic, format, fingerprint) describes, when it is not ours;
// false when the header is not one this library writes (another format, a damaged field, a
// config that does not validate).
bool config_from_header(const std::vector<uint8_t> &head, size_t fp_bytes, fh_config &c) {
    if (head.size() != sizeof kMagic + 8 + fp_bytes) return false;
    uint32_t format, n;
    memcpy(&format, head.data() + sizeof kMagic, 4);
    memcpy(&n, head.data() + sizeof kMagic + 4, 4);
    if ((format != kFormat && format != kFormatReplay) || n != fp_bytes) return false;
    fh_config_init(&c);
    const uint8_t *p = head.data() + sizeof kMagic + 8;
    for (const ConfigField &fl : kConfigFields) {
        memcpy(reinterpret_cast<uint8_t *>(&c) + fl.offset, p, fl.bytes);
        p += fl.bytes;
    }
    try {
        validate_config(c);
    } catch (const Error &) {
        return false;
    }
    return true;
}

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

std::string state_element_name(const Layout &L, Buf b, size_t i) {
    MomentOf m;
    return moment_of(b, m) ? std::string(m.name) + " of " + element_name(L, m.param, i)
                           : element_name(L, b, i);
}

namespace {

// The first element x of the persistent buffers b with in(b) for which bad(x), as
// "name = x" (x with `digits` significant digits), or "" where there is none.
template <class In, class Bad>
std::string first_element(const Layout &L, const HostBuffers &bufs, In in, Bad bad, int digits) {
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        if (!in((Buf)b)) continue;
        for (size_t i = 0; i < bufs[b].size(); ++i) {
            const float x = bufs[b][i];
            if (!bad(x)) continue;
            char v[48];
            snprintf(v, sizeof v, " = %.*g", digits, (double)x);
            return state_element_name(L, (Buf)b, i) + v;
        }
    }
    return std::string();
}

std::string first_non_finite(const Layout &L, const HostBuffers &bufs) {
    return first_element(
        L, bufs, [](Buf) { return true; }, [](float x) { return !std::isfinite(x); }, 6);
}

// Adam's second moments are running means of squared gradients (SPEC §5.6): a negative one makes
// the step's √v̂ NaN and every later step skipped, so a checkpoint holding one is damaged.
std::string first_negative_moment(const Layout &L, const HostBuffers &bufs) {
    const auto is_v = [](Buf b) {
        MomentOf m;
        return moment_of(b, m) && std::string(m.name) == "adam_v";
    };
    return first_element(L, bufs, is_v, [](float x) { return x < 0.0f; }, 9);
}

}  // namespace

std::vector<uint8_t> config_fingerprint(const fh_config &c) {
    Bytes w;
    for (const ConfigField &fl : kConfigFields)
        w.put_bytes(reinterpret_cast<const uint8_t *>(&c) + fl.offset, fl.bytes);
    return w.b;
}

void save_checkpoint(const char *path, const fh_config &c, const Layout &L, uint64_t step,
                     uint64_t act_calls, const StateReader &read, const ReplayImage *replay) {
    AtomicFile file(path);
    FileWriter w(file);
    w.put_bytes(kMagic, sizeof kMagic);
    w.put(replay ? kFormatReplay : kFormat);
    const std::vector<uint8_t> fp = config_fingerprint(c);
    w.put((uint32_t)fp.size());
    w.put_bytes(fp.data(), fp.size());
    w.put(step);
    w.put(act_calls);
    std::vector<float> chunk(kChunkFloats);
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        const size_t n = L.buf_size[b];
        w.put((uint64_t)n);
        for (size_t at = 0; at < n; at += kChunkFloats) {
            const size_t k = std::min(kChunkFloats, n - at);
            read((Buf)b, at, k, chunk.data());
            for (size_t j = 0; j < k; ++j)
                if (!std::isfinite(chunk[j]))
                    // A load refuses non-finite values, so such a state is refused here.
                    fail(FH_ERR_NON_FINITE, "cannot save: %s = %g is not finite",
                         state_element_name(L, (Buf)b, at + j).c_str(), (double)chunk[j]);
            w.put_bytes(chunk.data(), k * sizeof(float));
        }
    }
    if (replay) {
        w.put(c.replay_capacity);
        w.put(c.replay_envs);
        w.put(replay->n_ins);
        for (const std::vector<uint8_t> &field : replay->rows.field)
            w.put_bytes(field.data(), field.size());
    }
    w.flush();
    const uint64_t sum = w.sum();
    file.write(&sum, sizeof sum);
    file.commit();
}

Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L) {
    // Only regular files: a device or a pipe would be read until memory runs out, or forever.
    struct stat st;
    if (stat(path, &st) != 0) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(FH_ERR_IO, "checkpoint '%s' is not a regular file", path);
    std::unique_ptr<FILE, int (*)(FILE *)> f(fopen(path, "rb"), fclose);
    if (!f) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    const size_t size = (size_t)st.st_size;

    // The header first (magic, format, config fingerprint): the body is read only when the
    // file's size is the one its header implies, so a large file is refused without reading it.
    const std::vector<uint8_t> fp = config_fingerprint(c);
    const size_t fp_at = sizeof kMagic + 8;
    std::vector<uint8_t> head(std::min(size, fp_at + fp.size()));
    read_exactly(f.get(), head.data(), head.size(), path);
    if (size < sizeof kMagic)
        fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' has %zu bytes, less than its magic",
             path, size);
    if (memcmp(head.data(), kMagic, sizeof kMagic) != 0)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "'%s' is not a foxhunt checkpoint (bad magic)", path);
    uint32_t format = 0, fp_size = 0;
    if (head.size() >= fp_at) {
        memcpy(&format, head.data() + sizeof kMagic, 4);
        memcpy(&fp_size, head.data() + sizeof kMagic + 4, 4);
    }
    // A file that ends inside the header (after the magic, before the fingerprint's end) was cut
    // short, unless the part there already names a format this library does not write.
    if (head.size() < fp_at + fp.size()) {
        uint32_t fmt = kFormat;
        if (head.size() >= sizeof kMagic + 4) memcpy(&fmt, head.data() + sizeof kMagic, 4);
        if (fmt == kFormat || fmt == kFormatReplay)
            fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' ends at byte %zu, inside its "
                 "header (%zu bytes for this config)", path, size, fp_at + fp.size());
    }
    const bool same_config = head.size() == fp_at + fp.size() &&
                             (format == kFormat || format == kFormatReplay) &&
                             fp_size == fp.size() &&
                             memcmp(head.data() + fp_at, fp.data(), fp.size()) == 0;
    // The size this file should have: this config's, or that of the config its header names.
    ReplayHeader rh;
    size_t implied = 0;
    fh_config other;
    if (same_config)
        implied = implied_size(format, fp.size(), L, fileno(f.get()), size, rh);
    else if (config_from_header(head, fp.size(), other))
        implied = implied_size(format, fp.size(), make_layout(make_dims(other)),
                               fileno(f.get()), size, rh);
    // A file that is short but starts with this config's header is a truncated one; any other
    // mismatch is corruption, also when the damage hits a size field.
    // (Cut before a replay section's header, the file's size is known only to be at least that.)
    if (same_config && implied != 0 && size < implied)
        fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' ends at byte %zu of %s%zu", path, size,
             format == kFormatReplay &&
                     size < size_before_replay(fp.size(), L) + kReplayHeaderBytes
                 ? "at least "
                 : "",
             implied);
    if (implied == 0)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has a header this library does not "
             "write (format %u, %u fingerprint bytes, or a damaged replay shape): damaged, or "
             "another format", path, format, fp_size);
    if (size != implied)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has %zu bytes, its header implies %zu",
             path, size, implied);

    // Intact (checksum) before anything else is believed: written by this config (fingerprint)
    // with a replay this pipeline can take, then its contents.
    FileReader r{f.get(), path, fnv1a(head.data(), head.size())};
    const bool replay_fits = format != kFormatReplay || (rh.K == L.dims.K && rh.E == L.dims.E);
    if (!same_config || !replay_fits) {
        r.skip(size - 8 - head.size());
        if (!r.sum_matches())
            fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' fails its checksum", path);
        if (!same_config)
            fail(FH_ERR_CHECKPOINT_CONFIG,
                 "checkpoint '%s' was written by a pipeline with a "
                 "different config: %s",
                 path, config_difference(other, c).c_str());
        if (L.dims.K == 0)
            fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' holds a replay of %u rows x %u "
                 "environments; this pipeline has no replay", path, rh.K, rh.E);
        fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' holds a replay of %u rows x %u "
             "environments, this pipeline's replay_capacity x replay_envs is %u x %u", path,
             rh.K, rh.E, L.dims.K, L.dims.E);
    }
    Checkpoint ck;
    ck.step = r.get<uint64_t>();
    ck.act_calls = r.get<uint64_t>();
    ck.bufs.resize(NUM_BUFS);
    int bad_size = -1;  // a buffer whose count field is not this layout's (reported after the sum)
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        if (r.get<uint64_t>() != L.buf_size[b] && bad_size < 0) bad_size = b;
        ck.bufs[b].resize(L.buf_size[b]);
        r.take(ck.bufs[b].data(), L.buf_size[b] * sizeof(float));
    }
    if (format == kFormatReplay) {
        r.get<ReplayHeader>();  // read above; hashed here
        ck.has_replay = true;
        ck.replay.n_ins = rh.n_ins;
        ck.replay.rows.resize(L.dims, replay_valid_rows(rh.n_ins, rh.K));
        for (std::vector<uint8_t> &field : ck.replay.rows.field) r.take(field.data(), field.size());
    }
    if (!r.sum_matches())
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' fails its checksum", path);
    if (bad_size >= 0)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': buffer %d has the wrong size", path,
             bad_size);
    // write_tensor refuses non-finite values; a checkpoint may not smuggle them in.
    const std::string bad = first_non_finite(L, ck.bufs);
    if (!bad.empty())
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': %s is not finite", path, bad.c_str());
    const std::string neg = first_negative_moment(L, ck.bufs);
    if (!neg.empty())
        fail(FH_ERR_CHECKPOINT_CORRUPT,
             "checkpoint '%s': %s is negative (a mean of squared gradients; every step would "
             "be skipped)", path, neg.c_str());
    // Nor state out of the ranges write_tensor enforces (state_ranges.hpp), read-only state
    // included: with one regime a checkpoint's ρ must be the 1 that nothing writes.
    for (const TensorEntry &t : L.tensors) {
        try {
            check_state_range(c, L, t, [&](const TensorEntry &o) {
                return (const float *)ck.bufs[o.buf].data() + o.offset;
            });
        } catch (const Error &e) {
            fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': %s", path, e.message.c_str());
        }
    }
    // Counters no run can reach (kCountLimit) are damage, and the step and row counts must not
    // wrap when they advance.
    if (ck.step >= kCountLimit || ck.act_calls >= kCountLimit ||
        (ck.has_replay && ck.replay.n_ins >= kCountLimit))
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': step %llu, act calls %llu, rows "
             "inserted %llu: a count of 2^63 or more is not one a run reaches", path,
             (unsigned long long)ck.step, (unsigned long long)ck.act_calls,
             (unsigned long long)(ck.has_replay ? ck.replay.n_ins : 0));
    // Nor may it smuggle in rows that an insert would refuse.
    if (ck.has_replay && ck.replay.rows.R > 0) {
        try {
            check_elements(rows_checks(L.dims, ck.replay.rows.view()));
        } catch (const Error &e) {
            fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': replay %s", path, e.message.c_str());
        }
    }
    return ck;
}

}  // namespace fh
