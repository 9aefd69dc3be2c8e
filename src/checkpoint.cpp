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
static const uint32_t kFormat = 1;

namespace {
struct Writer {
    std::vector<uint8_t> b;
    template <class T> void put(const T &v) {
        const uint8_t *p = reinterpret_cast<const uint8_t *>(&v);
        b.insert(b.end(), p, p + sizeof(T));
    }
    void put_bytes(const void *p, size_t n) {
        const uint8_t *q = static_cast<const uint8_t *>(p);
        b.insert(b.end(), q, q + n);
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

uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) { h ^= p[i]; h *= 1099511628211ull; }
    return h;
}
}  // namespace

std::vector<uint8_t> config_fingerprint(const fh_config &c) {
    Writer w;
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
    Writer w;
    w.put_bytes(kMagic, sizeof kMagic);
    w.put(kFormat);
    std::vector<uint8_t> fp = config_fingerprint(c);
    w.put((uint32_t)fp.size());
    w.put_bytes(fp.data(), fp.size());
    w.put(ck.step);
    w.put(ck.act_calls);
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        w.put((uint64_t)ck.bufs[b].size());
        w.put_bytes(ck.bufs[b].data(), ck.bufs[b].size() * sizeof(float));
    }
    w.put(fnv1a(w.b.data(), w.b.size()));

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
    bool ok = fwrite(w.b.data(), 1, w.b.size(), f) == w.b.size();
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path) != 0) {
        int e = errno;
        remove(tmp.c_str());
        fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(e));
    }
}

// Bytes a checkpoint of this config and layout has.
static size_t expected_size(const std::vector<uint8_t> &fp, const Layout &L) {
    size_t n = sizeof kMagic + 4 + 4 + fp.size() + 8 + 8 + 8;
    for (int b = 0; b < NUM_PERSISTENT; ++b) n += 8 + L.buf_size[b] * sizeof(float);
    return n;
}

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
    const size_t want = expected_size(fp, L);
    const bool sum_ok = bytes.size() >= sizeof kMagic + 8 &&
                        [&] {
                            uint64_t sum;
                            memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
                            return sum == fnv1a(bytes.data(), bytes.size() - 8);
                        }();
    Reader r{bytes, sizeof kMagic, path};
    const size_t fp_at = sizeof kMagic + 8;
    const bool same_config = bytes.size() >= fp_at + fp.size() &&
                             r.get<uint32_t>() == kFormat && r.get<uint32_t>() == fp.size() &&
                             memcmp(bytes.data() + fp_at, fp.data(), fp.size()) == 0;
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
