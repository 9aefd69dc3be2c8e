#include "checkpoint.hpp"

#include <cstdio>
#include <cstring>
#include <memory>

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

    // Write to a temporary name and rename, so a failed save never leaves half a file behind.
    std::string tmp = std::string(path) + ".tmp";
    FILE *f = fopen(tmp.c_str(), "wb");
    if (!f) fail(FH_ERR_IO, "cannot open '%s' for writing: %s", tmp.c_str(), strerror(errno));
    bool ok = fwrite(w.b.data(), 1, w.b.size(), f) == w.b.size();
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path) != 0) {
        int e = errno;
        remove(tmp.c_str());
        fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path, strerror(e));
    }
}

Checkpoint load_checkpoint(const char *path, const fh_config &c, const Layout &L) {
    FILE *f = fopen(path, "rb");
    if (!f) fail(FH_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
    bool err = ferror(f);
    fclose(f);
    if (err) fail(FH_ERR_IO, "cannot read checkpoint '%s'", path);

    Reader r{bytes, 0, path};
    char magic[8];
    r.take(magic, sizeof magic);
    if (memcmp(magic, kMagic, sizeof magic) != 0)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "'%s' is not a foxhunt checkpoint (bad magic)", path);
    uint32_t format = r.get<uint32_t>();
    if (format != kFormat)
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has format %u, this library reads %u",
             path, format, kFormat);
    uint32_t fp_size = r.get<uint32_t>();
    if (fp_size > bytes.size())
        fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s' is shorter than its config", path);
    std::vector<uint8_t> fp(fp_size);
    r.take(fp.data(), fp_size);
    Checkpoint ck;
    ck.step = r.get<uint64_t>();
    ck.act_calls = r.get<uint64_t>();
    ck.bufs.resize(NUM_BUFS);
    for (int b = 0; b < NUM_PERSISTENT; ++b) {
        uint64_t count = r.get<uint64_t>();
        if (count > (bytes.size() - r.pos) / sizeof(float))
            fail(FH_ERR_CHECKPOINT_TRUNCATED, "checkpoint '%s': buffer %d claims %llu floats, "
                 "more than the file holds", path, b, (unsigned long long)count);
        ck.bufs[b].resize(count);
        r.take(ck.bufs[b].data(), count * sizeof(float));
    }
    const size_t body = r.pos;
    uint64_t sum = r.get<uint64_t>();
    if (r.pos != bytes.size())
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' has %zu trailing bytes", path,
             bytes.size() - r.pos);
    if (sum != fnv1a(bytes.data(), body))
        fail(FH_ERR_CHECKPOINT_CORRUPT, "checkpoint '%s' fails its checksum", path);
    if (fp != config_fingerprint(c))
        fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s' was written by a pipeline with a "
             "different config (dimensions, hyperparameters or seed)", path);
    for (int b = 0; b < NUM_PERSISTENT; ++b)
        if (ck.bufs[b].size() != L.buf_size[b])
            fail(FH_ERR_CHECKPOINT_CONFIG, "checkpoint '%s': buffer %d has %zu floats, "
                 "this pipeline %zu", path, b, ck.bufs[b].size(), L.buf_size[b]);
    return ck;
}

}  // namespace fh
