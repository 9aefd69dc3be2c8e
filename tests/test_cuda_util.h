/* Helpers of the CUDA backend's tests (test_cuda_*.cpp): pipelines, pre-made batches, and the
 * tensor-by-tensor comparison of two pipelines. Header-only; include after cmocka.h. */
#ifndef FOXHUNT_TEST_CUDA_UTIL_H
#define FOXHUNT_TEST_CUDA_UTIL_H

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "testutil.h"

/* Test hooks of the CUDA backend (cuda/debug_hooks.h); weak so a CPU-only build links. */
extern "C" uint64_t fh_cuda_debug_back_pressure_waits(void) __attribute__((weak));
extern "C" int fh_cuda_debug_step_pending(void) __attribute__((weak));
extern "C" long fh_cuda_debug_child_nodes(int child) __attribute__((weak));
/* OpenBLAS's thread count (ctest sets OPENBLAS_NUM_THREADS=1; the large CPU references want
 * every core). */
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace fhtest {

inline fh_pipeline *make(const fh_config &c) {
    fh_pipeline *p = nullptr;
    if (fh_pipeline_create(&c, &p) != FH_OK) fail_msg("create: %s", fh_last_error_message());
    return p;
}

inline fh_config cuda_config(fh_config c, int math_mode, int exec_mode = FH_EXEC_MULTI_STREAM) {
    c.backend = FH_BACKEND_CUDA;
    c.math_mode = math_mode;
    c.exec_mode = exec_mode;
    return c;
}

/* The SPEC defaults at a given batch size (CPU backend). FOXHUNT_TEST_IQL_GEMM=auto|grouped|
 * batched|sequential picks fh_config.iql_gemm (default: the library's AUTO). */
inline fh_config default_config(uint32_t batch) {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = batch;
    if (const char *e = getenv("FOXHUNT_TEST_IQL_GEMM")) {
        if (!strcmp(e, "grouped")) c.iql_gemm = FH_IQL_GEMM_GROUPED;
        if (!strcmp(e, "batched")) c.iql_gemm = FH_IQL_GEMM_BATCHED;
        if (!strcmp(e, "sequential")) c.iql_gemm = FH_IQL_GEMM_SEQUENTIAL;
    }
    return c;
}

struct Batches {
    std::vector<fh_test_batch> b;
    Batches(const fh_config &c, uint64_t first, int n) : b((size_t)n) {
        for (int k = 0; k < n; ++k) fh_test_batch_make(&b[(size_t)k], &c, first + (uint64_t)k);
    }
    ~Batches() {
        for (fh_test_batch &t : b) fh_test_batch_free(&t);
    }
    Batches(const Batches &) = delete;
    Batches &operator=(const Batches &) = delete;
};

inline void step(fh_pipeline *p, const fh_test_batch &tb) {
    if (fh_pipeline_upload(p, &tb.batch) != FH_OK) fail_msg("upload: %s", fh_last_error_message());
    if (fh_pipeline_step(p) != FH_OK) fail_msg("step: %s", fh_last_error_message());
}

/* Rewards times reward_x, obs and next_obs times obs_x: the extreme but finite batches that
 * make a step overflow (the divergence guard's tests). */
inline void scale_batch(fh_test_batch &tb, const fh_config &c, float reward_x, float obs_x) {
    for (size_t i = 0; i < (size_t)c.batch_size; ++i) tb.reward[i] *= reward_x;
    for (size_t i = 0; i < (size_t)c.batch_size * c.obs_dim; ++i) {
        tb.obs[i] *= obs_x;
        tb.next_obs[i] *= obs_x;
    }
}

inline fh_metrics metrics_of(fh_pipeline *p) {
    fh_metrics m;
    m.struct_size = sizeof m;
    if (fh_pipeline_metrics(p, &m) != FH_OK) fail_msg("metrics: %s", fh_last_error_message());
    return m;
}

inline std::vector<float> read(fh_pipeline *p, const char *name, size_t n) {
    std::vector<float> v(n);
    if (fh_pipeline_read_tensor(p, name, v.data(), n) != FH_OK)
        fail_msg("read %s: %s", name, fh_last_error_message());
    return v;
}

/* The largest fh_test_rel_err(a's tensor, b's tensor) over the named tensors (a NaN counts as the
 * largest); that tensor's name in `worst`. */
inline double max_rel_err(fh_pipeline *a, fh_pipeline *b, std::initializer_list<const char *> names,
                          std::string &worst) {
    double mx = 0;
    for (const char *name : names) {
        fh_tensor_info info;
        info.struct_size = sizeof info;
        if (fh_pipeline_find_tensor(a, name, &info) != FH_OK) fail_msg("no tensor %s", name);
        const size_t n = (size_t)info.rows * info.cols;
        const std::vector<float> x = read(a, name, n), y = read(b, name, n);
        const double e = fh_test_rel_err(x.data(), y.data(), n);
        if (!(e <= mx)) {
            mx = e;
            worst = name;
        }
    }
    return mx;
}

/* Every tensor and the metrics of a pipeline (waits for its queued work). */
struct Snapshot {
    std::vector<std::vector<float>> tensors;
    std::vector<std::string> names;
    std::vector<int> groups;
    fh_metrics m;
};

inline Snapshot snapshot(fh_pipeline *p) {
    Snapshot s;
    uint32_t n = 0;
    fh_pipeline_num_tensors(p, &n);
    for (uint32_t i = 0; i < n; ++i) {
        fh_tensor_info info;
        info.struct_size = sizeof info;
        fh_pipeline_tensor_info(p, i, &info);
        s.names.push_back(info.name);
        s.groups.push_back(info.group);
        s.tensors.push_back(read(p, info.name, (size_t)info.rows * info.cols));
    }
    memset(&s.m, 0, sizeof s.m);
    s.m.struct_size = sizeof s.m;
    if (fh_pipeline_metrics(p, &s.m) != FH_OK) fail_msg("metrics: %s", fh_last_error_message());
    return s;
}

/* A pipeline of config c after `steps` steps cycling through bt, then destroyed. */
inline Snapshot run(const fh_config &c, const Batches &bt, int steps) {
    fh_pipeline *p = make(c);
    for (int k = 0; k < steps; ++k) step(p, bt.b[(size_t)k % bt.b.size()]);
    Snapshot s = snapshot(p);
    fh_pipeline_destroy(p);
    return s;
}

/* Every tensor (outputs too unless with_outputs is false) and every metric bitwise equal. */
inline void assert_bitwise(const Snapshot &a, const Snapshot &b, const char *what,
                           bool with_outputs = true) {
    if (a.tensors.size() != b.tensors.size()) fail_msg("%s: tensor counts differ", what);
    int differ = 0;
    for (size_t i = 0; i < a.tensors.size(); ++i) {
        if (!with_outputs && a.groups[i] == FH_GROUP_OUTPUT) continue;
        if (a.tensors[i].size() != b.tensors[i].size() ||
            memcmp(a.tensors[i].data(), b.tensors[i].data(), a.tensors[i].size() * 4) != 0) {
            if (differ++ < 5) printf("  %s: tensor %s differs\n", what, a.names[i].c_str());
        }
    }
    if (memcmp(&a.m.td_loss, &b.m.td_loss,
               offsetof(fh_metrics, regime_scale) - offsetof(fh_metrics, td_loss)) != 0) {
        printf("  %s: metrics differ\n", what);
        ++differ;
    }
    if (differ) fail_msg("%s: %d tensors/metrics not bitwise equal", what, differ);
    printf("[DETERMINISM] %s: %zu tensors%s and all metrics bitwise equal\n", what,
           a.tensors.size(), with_outputs ? "" : " (but the per-row outputs)");
}

/* Result of comparing pipeline a against the reference b. */
struct Diff {
    double max_rel = 0;          /* over tensors (except the noise-only ones) and metrics */
    std::string worst;           /* where max_rel was found */
    double max_tensor = 0, max_metric = 0;
    std::string worst_tensor, worst_metric;
    double bk_abs = 0;           /* max |a - b| of attn.bk (pure rounding noise; see below) */
    bool bitwise = true;
    double median_tensor = 0;    /* the median of the per-tensor errors */
    std::string next_tensors;    /* the second and third worst tensors, "name err, name err" */
};

/* attn.bk's gradient is exactly zero in exact arithmetic (a per-row shift of the scores), so its
 * float gradient is rounding noise that Adam turns into steps of ~lr: the two backends' values of
 * attn.bk share no digits beyond its initial value (src/cpu/attention.cpp). It is reported
 * apart, with an absolute bound of 2·lr per step. */
inline bool noise_only(const char *name) { return strcmp(name, "attn.bk") == 0; }

inline void metric_cmp(Diff &d, const char *name, double a, double b) {
    if (a != b) d.bitwise = false;
    double den = std::fabs(b) > 1e-30 ? std::fabs(b) : 1.0;
    double e = std::fabs(a - b) / den;
    if (a == b) e = 0;  /* also for infinities */
    if (!(e <= d.max_metric)) {  /* NaN counts as worst */
        d.max_metric = std::isnan(e) ? INFINITY : e;
        d.worst_metric = name;
    }
}

/* Every metric of a against the reference b (step and relabel count exactly). */
inline void compare_metrics(Diff &d, const fh_metrics &ma, const fh_metrics &mb) {
    if (ma.step != mb.step) fail_msg("metrics.step %llu vs %llu", (unsigned long long)ma.step,
                                     (unsigned long long)mb.step);
    if (ma.num_relabelled != mb.num_relabelled)
        fail_msg("num_relabelled %u vs %u", ma.num_relabelled, mb.num_relabelled);
    metric_cmp(d, "td_loss", ma.td_loss, mb.td_loss);
    metric_cmp(d, "q_mean", ma.q_mean, mb.q_mean);
    metric_cmp(d, "cql_loss", ma.cql_loss, mb.cql_loss);
    metric_cmp(d, "iql_loss_hi", ma.iql_loss_hi, mb.iql_loss_hi);
    metric_cmp(d, "iql_loss_lo", ma.iql_loss_lo, mb.iql_loss_lo);
    metric_cmp(d, "iqn_loss", ma.iqn_loss, mb.iqn_loss);
    metric_cmp(d, "attn_loss", ma.attn_loss, mb.attn_loss);
    metric_cmp(d, "conf_loss", ma.conf_loss, mb.conf_loss);
    metric_cmp(d, "grad_norm", ma.grad_norm, mb.grad_norm);
    metric_cmp(d, "sigma[0]", ma.sigma[0], mb.sigma[0]);
    metric_cmp(d, "sigma[1]", ma.sigma[1], mb.sigma[1]);
    metric_cmp(d, "sigma_target[0]", ma.sigma_target[0], mb.sigma_target[0]);
    metric_cmp(d, "sigma_target[1]", ma.sigma_target[1], mb.sigma_target[1]);
    metric_cmp(d, "ensemble_std", ma.ensemble_std, mb.ensemble_std);
    for (uint32_t k = 0; k < ma.num_regimes; ++k) {
        char nm[32];
        snprintf(nm, sizeof nm, "regime_scale[%u]", k);
        metric_cmp(d, nm, ma.regime_scale[k], mb.regime_scale[k]);
    }
}

/* Snapshot a against the reference b: per tensor ||a - b|| / ||b|| (outputs and metrics too
 * unless with_outputs is false; attn.bk apart). */
inline Diff compare(const Snapshot &a, const Snapshot &b, bool with_outputs = true) {
    Diff d;
    std::vector<std::pair<double, std::string>> errs;
    if (a.tensors.size() != b.tensors.size()) fail_msg("compare: tensor counts differ");
    for (size_t i = 0; i < a.tensors.size(); ++i) {
        if (a.groups[i] == FH_GROUP_OUTPUT && !with_outputs) continue;
        const std::vector<float> &x = a.tensors[i], &y = b.tensors[i];
        if (x.size() != y.size()) fail_msg("compare: %s sizes differ", a.names[i].c_str());
        const size_t c = x.size();
        if (memcmp(x.data(), y.data(), c * sizeof(float)) != 0) d.bitwise = false;
        if (noise_only(a.names[i].c_str())) {
            for (size_t k = 0; k < c; ++k)
                d.bk_abs = std::max(d.bk_abs, (double)std::fabs(x[k] - y[k]));
            continue;
        }
        const double e = fh_test_rel_err(x.data(), y.data(), c);
        errs.emplace_back(std::isnan(e) ? INFINITY : e, a.names[i]);
        if (!(e <= d.max_tensor)) {  /* NaN counts as worst */
            d.max_tensor = std::isnan(e) ? INFINITY : e;
            d.worst_tensor = a.names[i];
        }
    }
    if (with_outputs) compare_metrics(d, a.m, b.m);
    std::sort(errs.begin(), errs.end(), [](const auto &p, const auto &q) { return p.first > q.first; });
    if (!errs.empty()) d.median_tensor = errs[errs.size() / 2].first;
    for (size_t k = 1; k < 3 && k < errs.size(); ++k) {
        char buf[96];
        snprintf(buf, sizeof buf, "%s%s %.2e", k > 1 ? ", " : "", errs[k].second.c_str(),
                 errs[k].first);
        d.next_tensors += buf;
    }
    d.max_rel = std::max(d.max_tensor, d.max_metric);
    d.worst = d.max_tensor >= d.max_metric ? d.worst_tensor : d.worst_metric;
    return d;
}

inline Diff compare(fh_pipeline *a, fh_pipeline *b, bool with_outputs = true) {
    return compare(snapshot(a), snapshot(b), with_outputs);
}

/* Every tensor (outputs included) and every metric of a and b bitwise equal. */
inline void expect_bitwise(fh_pipeline *a, fh_pipeline *b, const char *what) {
    const Diff d = compare(a, b);
    if (!d.bitwise) fail_msg("%s: not bitwise equal (%s %.3e)", what, d.worst.c_str(), d.max_rel);
}

inline void print_diff(const char *what, const Diff &d) {
    printf("[ACCURACY] %-44s tensors %.3e (%s; then %s; median %.1e)  metrics %.3e (%s)  "
           "attn.bk |d| %.2e%s\n", what, d.max_tensor, d.worst_tensor.c_str(),
           d.next_tensors.c_str(), d.median_tensor, d.max_metric, d.worst_metric.c_str(),
           d.bk_abs, d.bitwise ? "  [bitwise equal]" : "");
    fflush(stdout);
}

}  // namespace fhtest

#endif
