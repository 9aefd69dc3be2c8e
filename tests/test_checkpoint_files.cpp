/* Checkpoints and the file system: what a save may replace (only regular files), the mode it
 * gives a new file (the umask's), that a save killed half way leaves no file behind, and that a
 * large file which merely starts like a checkpoint is refused from its header (the replay
 * section's header included), and that forged state or counters and a file cut inside its header
 * are refused, while the calls that advance a counter stop short of what a load refuses; and the
 * config fingerprint's bytes, which are the file format. */
#include "checkpoint.hpp"
#include "replay_ref.hpp"  // before cmocka.h

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "atomic_file.hpp"
#include "testutil.h"

namespace {

fh_pipeline *make_stepped() {
    fh_config c = fh_test_small_config();
    fh_pipeline *p = nullptr;
    if (fh_pipeline_create(&c, &p) != FH_OK) fail_msg("create: %s", fh_last_error_message());
    fh_test_batch tb;
    fh_test_batch_make(&tb, &c, 3);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    fh_test_batch_free(&tb);
    return p;
}

std::string fresh_dir(const char *name) {
    std::string d = fh_test_tmp_path(name);
    if (system(("rm -rf '" + d + "'").c_str()) != 0) fail_msg("rm %s", d.c_str());
    if (mkdir(d.c_str(), 0755) != 0) fail_msg("mkdir %s: %s", d.c_str(), strerror(errno));
    return d;
}

std::vector<std::string> entries(const std::string &dir) {
    std::vector<std::string> out;
    DIR *d = opendir(dir.c_str());
    assert_non_null(d);
    while (dirent *e = readdir(d))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) out.push_back(e->d_name);
    closedir(d);
    return out;
}

std::string slurp(const std::string &path) {
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

void expect_io(fh_status s) {
    if (s != FH_ERR_IO) fail_msg("status %s (%s), expected FH_ERR_IO", fh_status_string(s),
                                 fh_last_error_message());
    if (!strstr(fh_last_error_message(), "not a regular file"))
        fail_msg("message: %s", fh_last_error_message());
}

/* Write @p bytes to @p path (then extend or cut the file to @p size_to, when not 0), load it
 * into @p p, and expect status @p want with @p msg in the message. */
void expect_load(fh_pipeline *p, const std::string &path, const std::string &bytes, fh_status want,
                 const char *msg, off_t size_to = 0) {
    FILE *f = fopen(path.c_str(), "wb");
    if (!f) fail_msg("cannot write %s", path.c_str());
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
    if (size_to) assert_int_equal(truncate(path.c_str(), size_to), 0);
    const fh_status s = fh_pipeline_load(p, path.c_str());
    if (s != want || !strstr(fh_last_error_message(), msg))
        fail_msg("%s: %s (%s), expected %s with '%s'", msg, fh_status_string(s),
                 fh_last_error_message(), fh_status_string(want), msg);
}

/* M1: a save refuses to replace a device, a FIFO, a symbolic link or a directory, and leaves
 * the node as it was; load refused such nodes already. */
void test_save_replaces_only_regular_files(void **) {
    fh_pipeline *p = make_stepped();
    const std::string dir = fresh_dir("nodes");
    struct stat st;
    expect_io(fh_pipeline_save(p, "/dev/null"));
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));

    const std::string fifo = dir + "/fifo";
    assert_int_equal(mkfifo(fifo.c_str(), 0644), 0);
    expect_io(fh_pipeline_save(p, fifo.c_str()));
    assert_int_equal(lstat(fifo.c_str(), &st), 0);
    assert_true(S_ISFIFO(st.st_mode));

    const std::string target = dir + "/target", link = dir + "/link";
    FILE *f = fopen(target.c_str(), "w");
    fputs("keep me", f);
    fclose(f);
    assert_int_equal(symlink("target", link.c_str()), 0);
    expect_io(fh_pipeline_save(p, link.c_str()));
    assert_int_equal(lstat(link.c_str(), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_string_equal(slurp(target).c_str(), "keep me");

    expect_io(fh_pipeline_save(p, dir.c_str()));
    /* Nothing else appeared in the folder. */
    assert_int_equal(entries(dir).size(), 3);
    /* A regular file is replaced. */
    assert_int_equal(fh_pipeline_save(p, target.c_str()), FH_OK);
    assert_int_equal(fh_pipeline_load(p, target.c_str()), FH_OK);
    fh_pipeline_destroy(p);
}

/* A new checkpoint's mode is 0666 less the umask, as for fopen(); a replaced one keeps the
 * permission bits of the file it replaces, as fopen() on that file would: a checkpoint made
 * private stays private, whatever the umask of the save that replaces it. */
void test_mode_follows_umask(void **) {
    fh_pipeline *p = make_stepped();
    const std::string dir = fresh_dir("umask");
    const std::string path = dir + "/c.ckpt", other = dir + "/d.ckpt";
    const mode_t old = umask(022);
    struct stat st;
    assert_int_equal(fh_pipeline_save(p, path.c_str()), FH_OK);
    assert_int_equal(stat(path.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    umask(027);
    assert_int_equal(fh_pipeline_save(p, other.c_str()), FH_OK);
    assert_int_equal(stat(other.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    assert_int_equal(fh_pipeline_save(p, path.c_str()), FH_OK);  /* replaced: stays 0644 */
    assert_int_equal(stat(path.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    umask(022);
    assert_int_equal(chmod(path.c_str(), 0600), 0);
    assert_int_equal(fh_pipeline_save(p, path.c_str()), FH_OK);
    assert_int_equal(stat(path.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(fh_pipeline_save_ex(p, path.c_str(), 0), FH_OK);
    assert_int_equal(stat(path.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    umask(old);
    assert_int_equal(entries(dir).size(), 2);
    fh_pipeline_destroy(p);
}

/* Runs a save in a child process that is killed (SIGKILL) after the last byte is written and
 * before the file gets its name. */
void save_killed(fh_pipeline *p, const std::string &path) {
    fflush(nullptr);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fh::g_atomic_file_before_commit = [] { raise(SIGKILL); };
        fh_pipeline_save(p, path.c_str());
        _exit(3);  /* not reached: the hook kills us */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
}

/* A save killed half way leaves no temporary file and does not touch an existing checkpoint. */
void test_killed_save_leaves_nothing(void **) {
    fh_pipeline *p = make_stepped();
    const std::string dir = fresh_dir("killed");
    const std::string path = dir + "/c.ckpt";
    save_killed(p, path);
    assert_int_equal(entries(dir).size(), 0);

    assert_int_equal(fh_pipeline_save(p, path.c_str()), FH_OK);
    const std::string before = slurp(path);
    fh_test_batch tb;
    fh_config c = fh_test_small_config();
    fh_test_batch_make(&tb, &c, 4);
    assert_int_equal(fh_pipeline_upload(p, &tb.batch), FH_OK);
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    fh_test_batch_free(&tb);
    save_killed(p, path);
    const std::vector<std::string> e = entries(dir);
    assert_int_equal(e.size(), 1);
    assert_string_equal(e[0].c_str(), "c.ckpt");
    assert_true(slurp(path) == before);
    fh_pipeline_destroy(p);
}

/* M2: a 4 GiB sparse file that starts with this config's header is refused from its size
 * before its body is read (reading it took 37-50 s and 4.1 GB before the fix); one that
 * starts with the magic and then garbage likewise. test_memory.cpp bounds the memory. */
void test_large_file_refused_from_header(void **) {
    fh_pipeline *p = make_stepped();
    const std::string dir = fresh_dir("large");
    const std::string good = dir + "/good.ckpt", big = dir + "/big.ckpt";
    assert_int_equal(fh_pipeline_save(p, good.c_str()), FH_OK);
    std::string head = slurp(good).substr(0, 4096);
    for (int variant = 0; variant < 2; ++variant) {
        if (variant == 1) head = head.substr(0, 8) + std::string(64, 'x');
        FILE *f = fopen(big.c_str(), "wb");
        fwrite(head.data(), 1, head.size(), f);
        fclose(f);
        assert_int_equal(truncate(big.c_str(), (off_t)4 << 30), 0);
        const fh_status s = fh_pipeline_load(p, big.c_str());
        if (s != FH_ERR_CHECKPOINT_CORRUPT)
            fail_msg("variant %d: %s (%s)", variant, fh_status_string(s), fh_last_error_message());
        const char *want = variant == 0 ? "its header implies" : "header this library does not";
        if (!strstr(fh_last_error_message(), want)) fail_msg("message: %s", fh_last_error_message());
    }
    remove(big.c_str());
    fh_pipeline_destroy(p);
}

/* The config fingerprint in a checkpoint's header is the file format: its bytes, written here
 * field by field in the order of the first format (twenty 4-byte integers, twenty floats, the
 * 64-bit seed; native byte order), must not move, or every checkpoint saved before would be
 * refused. Each field gets a value of its own, so a swap of two fields shows. */
void test_fingerprint_bytes_are_the_format(void **) {
    fh_config c;
    fh_config_init(&c);
    uint32_t *const u[] = {&c.batch_size, &c.obs_dim, &c.goal_dim, &c.num_branches,
                           &c.actions_per_branch, &c.trunk_hidden, &c.branch_hidden,
                           (uint32_t *)&c.her_reward, (uint32_t *)&c.her_terminal_on_success,
                           &c.sn_layers, &c.iql_hidden, &c.iqn_hidden, &c.iqn_cos, &c.iqn_n,
                           &c.iqn_n_target, &c.attn_token_dim, &c.attn_d_model, &c.attn_heads,
                           &c.attn_head_hidden, &c.num_regimes};
    float *const f[] = {&c.q_clip, &c.gamma, &c.huber_kappa, &c.her_ratio, &c.her_epsilon,
                        &c.iql_tau_hi, &c.iql_tau_lo, &c.awr_beta, &c.awr_max, &c.cql_alpha,
                        &c.regime_beta, &c.regime_min, &c.regime_max, &c.ema_tau, &c.lr_q,
                        &c.lr_aux, &c.adam_beta1, &c.adam_beta2, &c.adam_eps, &c.clip_norm};
    std::vector<uint8_t> want;
    for (int k = 0; k < 20; ++k) {
        *u[k] = 1000u + (uint32_t)k;
        const uint8_t *b = (const uint8_t *)u[k];
        want.insert(want.end(), b, b + 4);
    }
    for (int k = 0; k < 20; ++k) {
        *f[k] = 0.5f + (float)k;
        const uint8_t *b = (const uint8_t *)f[k];
        want.insert(want.end(), b, b + 4);
    }
    c.seed = 0x0123456789abcdefull;
    const uint8_t *s = (const uint8_t *)&c.seed;
    want.insert(want.end(), s, s + 8);
    /* Fields outside the fingerprint (how and where the step runs) do not enter it. */
    c.exec_mode = FH_EXEC_SINGLE_STREAM;
    c.workspace_mib = 7;
    c.device = 3;
    assert_true(fh::config_fingerprint(c) == want);
}

/* M2 with a replay (format 2): the size follows from the header and the replay section's own
 * header (K, E, rows inserted), both read before the body. A 4 GiB file that starts like such
 * a checkpoint is refused from its size; a replay header that implies more rows than the file
 * holds makes a truncated file, one with fewer rows or an impossible shape (K·E > 2^32) a
 * damaged one; an intact checkpoint with the replay of another config is sized from its own
 * header's config and refused as another config's. None of them changes the pipeline. */
void test_replay_section_sized_from_its_header(void **) {
    const fh_config c = replay_ref::config(7, 3);
    fh_pipeline *p = nullptr;
    assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
    const replay_ref::Rows rows = replay_ref::random_rows(c, 9, 1, 0.2);
    const fh_replay_rows v = rows.view();
    assert_int_equal(fh_pipeline_insert(p, &v), FH_OK);
    assert_int_equal(fh_pipeline_train(p, 2), FH_OK);
    const std::string dir = fresh_dir("replay_sized");
    const std::string with = dir + "/with.ckpt", plain = dir + "/plain.ckpt", x = dir + "/x.ckpt";
    assert_int_equal(fh_pipeline_save_ex(p, with.c_str(), FH_SAVE_REPLAY), FH_OK);
    assert_int_equal(fh_pipeline_save(p, plain.c_str()), FH_OK);
    const std::string w = slurp(with);
    const size_t rh = slurp(plain).size() - 8;  // format 1 less its checksum: the replay's header
    auto load = [&](const std::string &bytes, off_t extend_to, fh_status want, const char *msg) {
        expect_load(p, x, bytes, want, msg, extend_to);
    };
    auto with_header = [&](uint32_t K, uint32_t E) {
        std::string b = w;
        memcpy(&b[rh], &K, 4);
        memcpy(&b[rh + 4], &E, 4);
        return b;
    };
    load(w, (off_t)4 << 30, FH_ERR_CHECKPOINT_CORRUPT, "its header implies");
    load(with_header(8, 3), 0, FH_ERR_CHECKPOINT_TRUNCATED, "ends at byte");  // 8 valid rows
    /* Cut before the replay's header: the size is known only as a lower bound. */
    char cut_msg[96];
    snprintf(cut_msg, sizeof cut_msg, "ends at byte %zu of at least %zu", rh - 4, rh + 16 + 8);
    load(w.substr(0, rh - 4), 0, FH_ERR_CHECKPOINT_TRUNCATED, cut_msg);
    load(with_header(7, 2), 0, FH_ERR_CHECKPOINT_CORRUPT, "its header implies");
    load(with_header(0xffffffffu, 3), 0, FH_ERR_CHECKPOINT_CORRUPT, "damaged replay shape");
    fh_config other = c;
    other.gamma = 0.5f;
    other.seed = c.seed + 1;
    fh_pipeline *o = nullptr;
    assert_int_equal(fh_pipeline_create(&other, &o), FH_OK);
    assert_int_equal(fh_pipeline_insert(o, &v), FH_OK);
    assert_int_equal(fh_pipeline_save_ex(o, x.c_str(), FH_SAVE_REPLAY), FH_OK);
    /* The message names the first field that differs, both values, and how many more do. */
    char differs[160];
    snprintf(differs, sizeof differs,
             "config.gamma is 0.5 in the file, %.9g in this pipeline "
             "(and 1 more field differs)",
             (double)c.gamma);
    load(slurp(x), 0, FH_ERR_CHECKPOINT_CONFIG, differs);
    load(slurp(x), (off_t)1 << 30, FH_ERR_CHECKPOINT_CORRUPT, "its header implies");
    /* The state, counters and replay are what they were: the same checkpoint again. */
    assert_int_equal(fh_pipeline_save_ex(p, x.c_str(), FH_SAVE_REPLAY), FH_OK);
    assert_true(slurp(x) == w);
    fh_pipeline_destroy(o);
    fh_pipeline_destroy(p);
}


/* A checkpoint holds no state that write_tensor would refuse and no counter a run cannot reach:
 * forged files (checksum resealed) with a regime scale outside [regime_min, regime_max], a
 * negative running mean square or Adam second moment, a spectral u of zeros or of one denormal
 * (σ would be 0), a one-regime scale other than 1, a step count of 2^64 − 1 (Adam's t would
 * wrap to 0) or 2^63 rows inserted are refused as corrupt; a file that ends inside its header
 * is truncated, not damaged. None of them changes the pipeline. */
size_t find_floats(const std::string &b, const float *x, size_t n) {
    const size_t at = b.find(std::string((const char *)x, n * sizeof(float)));
    if (at == std::string::npos || b.find(std::string((const char *)x, n * 4), at + 1) != std::string::npos)
        fail_msg("the written values are not in the checkpoint exactly once");
    return at;
}

// `base` with n bytes at `at` replaced by v, its checksum made to match.
std::string forged(std::string base, size_t at, const void *v, size_t n) {
    memcpy(&base[at], v, n);
    fh_test_reseal(&base[0], base.size());
    return base;
}

// Where a checkpoint's step count is: after the 16-byte header and the config fingerprint (the
// act-call count follows it).
size_t step_offset(const std::string &ckpt) {
    uint32_t fp_bytes;
    memcpy(&fp_bytes, &ckpt[12], 4);
    return 16 + fp_bytes;
}

// A pipeline with a replay of K = 7 rows after 9 were inserted, its checkpoint with the replay
// (file) and where in it the rows-inserted count is (at_ins). Destroys the pipeline.
struct ReplayCheckpoint {
    fh_pipeline *p = nullptr;
    replay_ref::Rows rows;
    std::string file;
    size_t at_ins = 0;

    explicit ReplayCheckpoint(const std::string &dir) {
        const fh_config c = replay_ref::config(7, 3);
        assert_int_equal(fh_pipeline_create(&c, &p), FH_OK);
        rows = replay_ref::random_rows(c, 9, 1, 0.2);
        const fh_replay_rows v = rows.view();
        assert_int_equal(fh_pipeline_insert(p, &v), FH_OK);
        const std::string with = dir + "/with.ckpt", plain = dir + "/plain.ckpt";
        assert_int_equal(fh_pipeline_save_ex(p, with.c_str(), FH_SAVE_REPLAY), FH_OK);
        assert_int_equal(fh_pipeline_save(p, plain.c_str()), FH_OK);
        file = slurp(with);
        at_ins = slurp(plain).size() - 8 + 8;  // after the replay header's K and E
        uint64_t n_ins;
        memcpy(&n_ins, &file[at_ins], 8);
        assert_int_equal(n_ins, 9);
    }
    ~ReplayCheckpoint() { fh_pipeline_destroy(p); }
    ReplayCheckpoint(const ReplayCheckpoint &) = delete;
    ReplayCheckpoint &operator=(const ReplayCheckpoint &) = delete;
};

void test_forged_state_refused(void **) {
    fh_pipeline *p = make_stepped();
    /* Distinctive values, to find them in the file. */
    const float rho[3] = {1.25f, 0.75f, 3.5f}, s[3] = {0.125f, 2.0f, 0.5f};
    float u[16];
    for (int i = 0; i < 16; ++i) u[i] = 0.0625f * (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
    assert_int_equal(fh_pipeline_write_tensor(p, "regime.scale", rho, 3), FH_OK);
    assert_int_equal(fh_pipeline_write_tensor(p, "regime.s", s, 3), FH_OK);
    assert_int_equal(fh_pipeline_write_tensor(p, "sn.u.W2", u, 16), FH_OK);
    const std::string dir = fresh_dir("forged");
    const std::string good = dir + "/good.ckpt", x = dir + "/x.ckpt";
    assert_int_equal(fh_pipeline_save(p, good.c_str()), FH_OK);
    const std::string g = slurp(good);
    const size_t at_rho = find_floats(g, rho, 3), at_s = find_floats(g, s, 3),
                 at_u = find_floats(g, u, 16);
    const size_t at_step = step_offset(g);
    uint64_t step;
    memcpy(&step, &g[at_step], 8);
    assert_int_equal(step, 1);
    auto load = [&](const std::string &bytes, fh_status want, const char *msg) {
        expect_load(p, x, bytes, want, msg);
    };
    const float minus1 = -1.0f, big = 1e30f, zeros[16] = {0};
    load(forged(g, at_rho, &minus1, 4), FH_ERR_CHECKPOINT_CORRUPT, "regime.scale[0, 0] = -1 is outside");
    load(forged(g, at_rho + 8, &big, 4), FH_ERR_CHECKPOINT_CORRUPT,
         "regime.scale[0, 2] = 1.00000002e+30");
    load(forged(g, at_s + 4, &minus1, 4), FH_ERR_CHECKPOINT_CORRUPT, "regime.s[0, 1] = -1 is negative");
    load(forged(g, at_u, zeros, sizeof zeros), FH_ERR_CHECKPOINT_CORRUPT, "'sn.u.W2' is all zeros");
    const float denormal_u[16] = {0, 0, 0, 1e-45f};
    load(forged(g, at_u, denormal_u, sizeof denormal_u), FH_ERR_CHECKPOINT_CORRUPT, "below 1e-12");
    /* Adam's second moments (buffer BUF_Q_V, after the step and act counts and the buffers
     * q, target q and adam_m of q, each a float count then its floats) are means of squares. */
    size_t at_v = at_step + 16;
    for (int b = 0; b < 3; ++b) {
        uint64_t n;
        memcpy(&n, &g[at_v], 8);
        at_v += 8 + n * sizeof(float);
    }
    at_v += 8;
    float v0;
    memcpy(&v0, &g[at_v], 4);
    assert_true(v0 >= 0.0f);
    const float minus_tiny = -1e-30f;
    load(forged(g, at_v, &minus_tiny, 4), FH_ERR_CHECKPOINT_CORRUPT,
         "adam_v of q.W1[0, 0] = -1e-30 is negative");
    const uint64_t wrap = ~0ull, half = 1ull << 63;
    load(forged(g, at_step, &wrap, 8), FH_ERR_CHECKPOINT_CORRUPT, "2^63 or more");
    load(forged(g, at_step + 8, &half, 8), FH_ERR_CHECKPOINT_CORRUPT, "act calls 9223372036854775808");
    for (size_t cut : {(size_t)8, (size_t)12, (size_t)16, (size_t)100, (size_t)at_step - 1})
        load(g.substr(0, cut), FH_ERR_CHECKPOINT_TRUNCATED, "inside its header");
    /* The state and counters are what they were: the same checkpoint again. */
    assert_int_equal(fh_pipeline_save(p, x.c_str()), FH_OK);
    assert_true(slurp(x) == g);
    fh_pipeline_destroy(p);

    /* ρ starts at 1, which [regime_min, regime_max] need not hold: a checkpoint saved before
     * the first update loads, and the scale it read writes back. With one regime ρ ≡ 1: a
     * checkpoint that says otherwise is refused (the scale is read-only there). */
    {
        fh_config cr = fh_test_small_config();
        cr.regime_min = 1.5f;
        fh_pipeline *r = nullptr;
        assert_int_equal(fh_pipeline_create(&cr, &r), FH_OK);
        const std::string path = dir + "/rho.ckpt";
        assert_int_equal(fh_pipeline_save(r, path.c_str()), FH_OK);
        if (fh_pipeline_load(r, path.c_str()) != FH_OK) fail_msg("load: %s", fh_last_error_message());
        float scale[3];
        assert_int_equal(fh_pipeline_read_tensor(r, "regime.scale", scale, 3), FH_OK);
        assert_float_equal(scale[0], 1.0f, 0);
        assert_int_equal(fh_pipeline_write_tensor(r, "regime.scale", scale, 3), FH_OK);
        fh_pipeline_destroy(r);
        cr = fh_test_small_config();
        cr.num_regimes = 1;
        assert_int_equal(fh_pipeline_create(&cr, &r), FH_OK);
        assert_int_equal(fh_pipeline_save(r, path.c_str()), FH_OK);
        const std::string b1 = slurp(path);
        // The regime buffer [s | scale] is the last before the checksum: 2 floats at R = 1.
        const float two[2] = {1.0f, 1.0f};
        const size_t at_r = b1.size() - 8 - 8;
        if (memcmp(&b1[at_r], two, 8) != 0)
            fail_msg("a one-regime checkpoint does not end in [s | scale] = [1 | 1]");
        expect_load(r, x, forged(b1, at_r + 4, &minus1, 4), FH_ERR_CHECKPOINT_CORRUPT,
                    "but with num_regimes = 1 the scale is 1");
        fh_pipeline_destroy(r);
    }

    /* A replay's rows-inserted count of 2^63: no run gets there, and it would wrap. */
    ReplayCheckpoint rc(dir);
    /* Both counts leave K = 7 valid rows, so the file's size still matches its header. */
    expect_load(rc.p, x, forged(rc.file, rc.at_ins, &half, 8), FH_ERR_CHECKPOINT_CORRUPT,
                "rows inserted 9223372036854775808");
    assert_int_equal(fh_pipeline_save_ex(rc.p, x.c_str(), FH_SAVE_REPLAY), FH_OK);
    assert_true(slurp(x) == rc.file);
}

/* The calls that advance a count refuse to take it to 2^63, which a load refuses, so a pipeline
 * never holds state it cannot save and load back. Forged checkpoints (checksum resealed) whose
 * step, act-call or rows-inserted count is 2^63 − 1 load; then fh_pipeline_step,
 * fh_pipeline_train, fh_pipeline_act and fh_pipeline_insert are refused with
 * FH_ERR_OUT_OF_RANGE naming the count, and a save afterwards writes the loaded file again,
 * byte for byte. From 2^63 − 2, train(2) is refused and one step runs, then the next is
 * refused. */
void test_counts_stop_short_of_the_limit(void **) {
    const uint64_t last = (1ull << 63) - 1;
    const auto refused = [](fh_status s, const char *what) {
        const char *m = fh_last_error_message();
        if (s != FH_ERR_OUT_OF_RANGE || !strstr(m, what) || !strstr(m, "would reach 2^63"))
            fail_msg("%s: %s (%s), expected FH_ERR_OUT_OF_RANGE", what, fh_status_string(s), m);
    };
    const std::string dir = fresh_dir("limit");
    const std::string good = dir + "/good.ckpt", x = dir + "/x.ckpt", y = dir + "/y.ckpt";
    fh_pipeline *p = make_stepped();
    assert_int_equal(fh_pipeline_save(p, good.c_str()), FH_OK);
    const std::string g = slurp(good);
    const size_t at_step = step_offset(g);

    const std::string at_last_step = forged(g, at_step, &last, 8);
    expect_load(p, x, at_last_step, FH_OK, "");
    refused(fh_pipeline_step(p), "step count is 9223372036854775807: 1 more");
    refused(fh_pipeline_train(p, 3), "step count is 9223372036854775807: 3 more");
    assert_int_equal(fh_pipeline_save(p, y.c_str()), FH_OK);
    assert_true(slurp(y) == at_last_step);

    const uint64_t second_last = last - 1;
    expect_load(p, x, forged(g, at_step, &second_last, 8), FH_OK, "");
    refused(fh_pipeline_train(p, 2), "step count is 9223372036854775806: 2 more");
    assert_int_equal(fh_pipeline_step(p), FH_OK);
    refused(fh_pipeline_step(p), "step count is 9223372036854775807: 1 more");
    assert_int_equal(fh_pipeline_save(p, y.c_str()), FH_OK);
    if (fh_pipeline_load(p, y.c_str()) != FH_OK) fail_msg("load: %s", fh_last_error_message());

    const std::string at_last_act = forged(g, at_step + 8, &last, 8);
    expect_load(p, x, at_last_act, FH_OK, "");
    const fh_config c = fh_test_small_config();
    std::vector<float> obs(c.obs_dim, 0.5f), goal(c.goal_dim, 0.5f);
    std::vector<int32_t> actions(c.num_branches);
    refused(fh_pipeline_act(p, obs.data(), c.goal_dim ? goal.data() : nullptr, 1, 0.0f,
                            actions.data(), nullptr),
            "act-call count is 9223372036854775807");
    assert_int_equal(fh_pipeline_save(p, y.c_str()), FH_OK);
    assert_true(slurp(y) == at_last_act);
    fh_pipeline_destroy(p);

    ReplayCheckpoint rc(dir);
    /* 2^63 − 1 rows inserted leave K = 7 valid rows, as 9 did: the file's size still matches. */
    const std::string at_last_row = forged(rc.file, rc.at_ins, &last, 8);
    expect_load(rc.p, x, at_last_row, FH_OK, "");
    const fh_replay_rows v = rc.rows.view();
    refused(fh_pipeline_insert(rc.p, &v), "rows-inserted count is 9223372036854775807: 9 more");
    assert_int_equal(fh_pipeline_save_ex(rc.p, y.c_str(), FH_SAVE_REPLAY), FH_OK);
    assert_true(slurp(y) == at_last_row);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_replaces_only_regular_files),
        cmocka_unit_test(test_mode_follows_umask),
        cmocka_unit_test(test_killed_save_leaves_nothing),
        cmocka_unit_test(test_large_file_refused_from_header),
        cmocka_unit_test(test_replay_section_sized_from_its_header),
        cmocka_unit_test(test_forged_state_refused),
        cmocka_unit_test(test_counts_stop_short_of_the_limit),
        cmocka_unit_test(test_fingerprint_bytes_are_the_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
