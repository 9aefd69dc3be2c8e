#include "checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "atomic_file.hpp"
#include "config.hpp"
#include "error.hpp"

namespace fh {

static const char kMagic[8] = {'F', 'O', 'X', 'H', 'U', 'N', 'T', '1'};
static const uint32_t kFormat = 1;

namespace {

uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h = 1469598103934665603ull) {
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
    uint64_t sum_ = 1469598103934665603ull;
};

// Floats the save reads from the backend at a time.
constexpr size_t kChunkFloats = 1 << 16;

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
    w.put_bytes(&c.seed, sizeof c.seed);
    return w.b;
}

void save_checkpoint(const char *path, const fh_config &c, const Layout &L, uint64_t step,
                     uint64_t act_calls, const StateReader &read) {
    AtomicFile file(path);
    FileWriter w(file);
    w.put_bytes(kMagic, sizeof kMagic);
    w.put(kFormat);
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
    w.flush();
    const uint64_t sum = w.sum();
    file.write(&sum, sizeof sum);
    file.commit();
}

namespace {

// Bytes a checkpoint of this config and layout has.
size_t expected_size(size_t fp_bytes, const Layout &L) {
    size_t n = sizeof kMagic + 4 + 4 + fp_bytes + 8 + 8 + 8;
    for (int b = 0; b < NUM_PERSISTENT; ++b) n += 8 + L.buf_size[b] * sizeof(float);
    return n;
}

// The size of a checkpoint whose header (magic, format, fingerprint) is @p head and whose
// config is not ours: from the config its fingerprint describes. 0 when the header is not one
// this library writes (another format, a damaged field, a config that does not validate).
size_t size_from_header(const std::vector<uint8_t> &head, size_t fp_bytes) {
    if (head.size() != sizeof kMagic + 8 + fp_bytes) return 0;
    uint32_t format, n;
    memcpy(&format, head.data() + sizeof kMagic, 4);
    memcpy(&n, head.data() + sizeof kMagic + 4, 4);
    if (format != kFormat || n != fp_bytes) return 0;
    fh_config c;
    fh_config_init(&c);
    const uint8_t *p = head.data() + sizeof kMagic + 8;
    uint32_t u[20];
    float f[20];
    memcpy(u, p, sizeof u);
    memcpy(f, p + sizeof u, sizeof f);
    memcpy(&c.seed, p + sizeof u + sizeof f, sizeof c.seed);
    uint32_t *const us[20] = {&c.batch_size, &c.obs_dim, &c.goal_dim, &c.num_branches,
                              &c.actions_per_branch, &c.trunk_hidden, &c.branch_hidden,
                              (uint32_t *)&c.her_reward, (uint32_t *)&c.her_terminal_on_success,
                              &c.sn_layers, &c.iql_hidden, &c.iqn_hidden, &c.iqn_cos, &c.iqn_n,
                              &c.iqn_n_target, &c.attn_token_dim, &c.attn_d_model,
                              &c.attn_heads, &c.attn_head_hidden, &c.num_regimes};
    float *const fs[20] = {&c.q_clip, &c.gamma, &c.huber_kappa, &c.her_ratio, &c.her_epsilon,
                           &c.iql_tau_hi, &c.iql_tau_lo, &c.awr_beta, &c.awr_max,
                           &c.cql_alpha, &c.regime_beta, &c.regime_min, &c.regime_max,
                           &c.ema_tau, &c.lr_q, &c.lr_aux, &c.adam_beta1, &c.adam_beta2,
                           &c.adam_eps, &c.clip_norm};
    for (int k = 0; k < 20; ++k) {
        *us[k] = u[k];
        *fs[k] = f[k];
    }
    try {
        validate_config(c);
    } catch (const Error &) {
        return 0;
    }
    return expected_size(fp_bytes, make_layout(make_dims(c)));
}

void read_exactly(FILE *f, void *out, size_t n, const char *path) {
    if (fread(out, 1, n, f) != n) fail(FH_ERR_IO, "cannot read checkpoint '%s'", path);
}

}  // namespace

Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L) {
    // Only regular files: a device or a pipe would be read until memory runs out, or forever.
    struct stat st;
    if (stat(path, &st) != 0) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(FH_ERR_IO, "checkpoint '%s' is not a regular file", path);
    std::unique_ptr<FILE, int (*)(FILE *)> f(fopen(path, "rb"), fclose);
    if (!f) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    const size_t size = (size_t)st.st_size;

    // The header first (magic, format, config fingerprint): the file is read whole only when
    // its size is the one its header implies, so a large file is refused without reading it.
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
    const bool same_config = head.size() == fp_at + fp.size() && format == kFormat &&
                             fp_size == fp.size() &&
                             memcmp(head.data() + fp_at, fp.data(), fp.size()) == 0;
    const size_t want = expected_size(fp.size(), L);
    // A file that is short but starts with this config's header is a truncated one; any other
    // mismatch is corruption, also when the damage hits a size field.
    if (same_config && size < want)
        fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' ends at byte %zu of %zu", path, size,
             want);
    const size_t implied = same_config ? want : size_from_header(head, fp.size());
    if (implied == 0)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has a header this library does not "
             "write (format %u, %u fingerprint bytes): damaged, or another format", path,
             format, fp_size);
    if (size != implied)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has %zu bytes, its header implies %zu",
             path, size, implied);

    // Intact (checksum), written by this config (fingerprint), then its contents.
    std::vector<uint8_t> bytes(size);
    memcpy(bytes.data(), head.data(), head.size());
    read_exactly(f.get(), bytes.data() + head.size(), size - head.size(), path);
    uint64_t sum;
    memcpy(&sum, bytes.data() + size - 8, 8);
    if (sum != fnv1a(bytes.data(), size - 8))
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' fails its checksum", path);
    if (!same_config)
        fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' was written by a pipeline with a "
             "different config (dimensions, hyperparameters or seed)", path);

    Reader r{bytes, fp_at + fp.size(), path};
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
    const std::string bad = first_non_finite(L, ck.bufs);
    if (!bad.empty())
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s': %s is not finite", path, bad.c_str());
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

std::string state_element_name(const Layout &L, Buf b, size_t i) {
    MomentOf m;
    return moment_of(b, m) ? std::string(m.name) + " of " + element_name(L, m.param, i)
                           : element_name(L, b, i);
}

std::string first_non_finite(const Layout &L, const HostBuffers &bufs) {
    for (int b = 0; b < NUM_PERSISTENT; ++b)
        for (size_t i = 0; i < bufs[b].size(); ++i) {
            const float x = bufs[b][i];
            if (std::isfinite(x)) continue;
            char v[32];
            snprintf(v, sizeof v, " = %g", (double)x);
            return state_element_name(L, (Buf)b, i) + v;
        }
    return std::string();
}

}  // namespace fh
