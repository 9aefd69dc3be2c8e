// foxhunt-timeline: one training step's kernels on the GPU's clock, from CUPTI's activity
// records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: the start and end of every kernel, those of
// graph launches included, without serializing them). It answers what foxhunt-bench's per-child
// events cannot: how many kernels run at once through the step, how long the GPU runs none
// (the latency between dependent kernels: launch, graph edges, programmatic waits), and which
// kernels share the GPU with which. The docs' schedule trials (docs/cuda.md, "Findings") asked
// these questions of wall times only.
//
//   foxhunt-timeline [--batch 16384] [--mode multi-tf32] [--steps 5] [--warmup 5]
//                    [--machine NAME] [--out PATH]
//   --mode   multi-tf32, single-tf32, multi-strict, single-strict, multi-bf16 or single-bf16
//   --steps  steps traced back to back (one graph launch each); the last one is reported
//   --out    JSON of the last step's kernels and the summary (default
//            bench/results/<machine>-<date>-timeline-<mode>.json)
//
// It prints the last step's kernels in start order (start and duration in µs from the step's
// first kernel, how many kernels ran when it started, its blocks and threads a block, the child
// it started in, its name), then the summary: the span from the first start to the last end,
// the kernels' summed durations, the time during which 0, 1, 2, 3 or more kernels ran, per
// child the same, the kernels that ran alone longest, and the longest gaps with no kernel
// running. The children's bounds are the step's own events (fh_pipeline_timings) laid from the
// first kernel's start: her and spectral side by side in multi-stream mode, one after the other
// in single-stream, then ddqn, forward, aux and adam; the two clocks differ by a few µs. Needs
// the CUDA backend and a GPU; CUPTI is the toolkit's (libcupti).
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "bench_util.h"
}

#include "timeline_sweep.hpp"

namespace {

namespace bench = fh::bench;

struct Kernel {
    uint64_t start, end;
    long blocks;
    int threads;
    std::string name;
};

std::vector<Kernel> g_kernels;
bool g_keep = false;  // records of the warm-up are dropped

[[noreturn]] void die(const char *what, const char *why) {
    fprintf(stderr, "foxhunt-timeline: %s: %s\n", what, why);
    exit(1);
}

void cupti_check(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return;
    const char *msg = "unknown";
    cuptiGetResultString(r, &msg);
    die(what, msg);
}

// The kernel's name demangled, without its parameter list ("void " and "(...)" dropped).
std::string short_name(const char *mangled) {
    int status = 0;
    char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    free(d);
    if (s.rfind("void ", 0) == 0) s.erase(0, 5);
    // The parameter list is the last top-level "(...)".
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
        if (s[i] == ')') ++depth;
        if (s[i] == '(' && --depth == 0) {
            s.erase(i);
            break;
        }
    }
    return s;
}

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    constexpr size_t kBytes = 8 << 20;
    *buffer = static_cast<uint8_t *>(aligned_alloc(8, kBytes));
    if (!*buffer) die("buffer_requested", "out of memory");
    *size = kBytes;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    CUpti_Activity *rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (!g_keep || rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const auto *k = reinterpret_cast<const CUpti_ActivityKernel10 *>(rec);
        g_kernels.push_back({k->start, k->end, (long)k->gridX * k->gridY * k->gridZ,
                             k->blockX * k->blockY * k->blockZ, short_name(k->name)});
    }
    free(buffer);
}

void usage(FILE *f) {
    fprintf(f, "usage: foxhunt-timeline [--batch 16384] [--mode multi-tf32] [--steps 5] "
               "[--warmup 5] [--machine NAME] [--out PATH]\n");
}

std::string json_string(const std::string &s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o + "\"";
}

}  // namespace

int main(int argc, char **argv) {
    long batch = 16384, steps = 5, warmup = 5;
    const bench_mode *mode = &bench_modes[0];
    std::string machine = "unknown", out;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--batch")) {
            batch = arg_long(a, v, 1, 1L << 24);
        } else if (!strcmp(a, "--steps")) {
            steps = arg_long(a, v, 1, 1000);
        } else if (!strcmp(a, "--warmup")) {
            warmup = arg_long(a, v, 1, 1000);
        } else if (!strcmp(a, "--machine")) {
            machine = v;
        } else if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--mode")) {
            mode = bench_mode_named(v);
            if (!mode) {
                bench_unknown_mode(v);
                return 2;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (out.empty()) {
        char date[16];
        const time_t t = time(nullptr);
        strftime(date, sizeof date, "%Y-%m-%d", gmtime(&t));
        out = "bench/results/" + machine + "-" + date + "-timeline-" + mode->name + ".json";
    }

    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
        die("cudaGetDeviceCount", "no CUDA device: the timeline needs a GPU");
    // Tracing is on before the pipeline exists, so that its graphs are instantiated under it.
    cupti_check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                "cuptiActivityRegisterCallbacks");
    cupti_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                "cuptiActivityEnable(CONCURRENT_KERNEL)");

    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CUDA;
    c.batch_size = (uint32_t)batch;
    c.exec_mode = mode->exec_mode;
    c.math_mode = mode->math_mode;
    fh_pipeline *p = nullptr;
    const fh_status created = fh_pipeline_create(&c, &p);
    if (created == FH_ERR_NO_CUDA) die("fh_pipeline_create", fh_last_error_message());
    if (created != FH_OK) bench_die("fh_pipeline_create", created);
    host_batch hb;
    make_batch(&hb, &c);
    CHECK(fh_pipeline_upload(p, &hb.b));
    for (long k = 0; k < warmup; ++k) CHECK(fh_pipeline_step(p));
    CHECK(fh_pipeline_sync(p));
    cupti_check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
    g_kernels.clear();
    g_keep = true;
    for (long k = 0; k < steps; ++k) CHECK(fh_pipeline_step(p));
    CHECK(fh_pipeline_sync(p));
    fh_timings tm;
    tm.struct_size = sizeof tm;
    CHECK(fh_pipeline_timings(p, &tm));
    cupti_check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
    g_keep = false;
    fh_pipeline_destroy(p);
    free_batch(&hb);

    std::vector<Kernel> &ks = g_kernels;
    std::sort(ks.begin(), ks.end(), [](const Kernel &a, const Kernel &b) {
        return a.start < b.start;
    });
    if (ks.empty() || ks.size() % (size_t)steps != 0) {
        fprintf(stderr, "foxhunt-timeline: %zu kernel records for %ld steps: not the same "
                        "kernels in every step\n", ks.size(), steps);
        return 1;
    }
    const size_t per = ks.size() / (size_t)steps;
    const std::vector<Kernel> last(ks.end() - (long)per, ks.end());
    const uint64_t t0 = last.front().start;
    uint64_t t1 = t0, busy_sum = 0;
    for (const Kernel &k : last) {
        t1 = std::max(t1, k.end);
        busy_sum += k.end - k.start;
    }

    // The children's starts (ns after t0) from the events' durations.
    const bool multi = mode->exec_mode == FH_EXEC_MULTI_STREAM;
    const char *const kChild[] = {"her", "spectral", "ddqn", "forward", "aux", "adam"};
    constexpr int kChildren = 6;
    double bound[kChildren + 1];
    bound[0] = 0;
    bound[1] = multi ? 0 : tm.her_ms;
    bound[2] = multi ? std::max(tm.her_ms, tm.spectral_ms) : tm.her_ms + tm.spectral_ms;
    bound[3] = bound[2] + tm.ddqn_ms;
    bound[4] = bound[3] + tm.forward_ms;
    bound[5] = bound[4] + tm.aux_ms;
    bound[6] = bound[5] + tm.adam_ms;
    const double events_ms[kChildren] = {tm.her_ms,     tm.spectral_ms, tm.ddqn_ms,
                                         tm.forward_ms, tm.aux_ms,      tm.adam_ms};
    // Multi-stream, her and spectral start together. The guard's snapshot is two k_copy
    // launches there: HER's of every buffer but u and spectral's of u, the smaller grid.
    const Kernel *spectral_copy = nullptr;
    if (multi)
        for (const Kernel &k : last)
            if (k.name.find("k_copy") != std::string::npos &&
                (double)(k.start - t0) * 1e-6 < bound[2] &&
                (!spectral_copy || k.blocks < spectral_copy->blocks))
                spectral_copy = &k;
    const auto child_of = [&](const Kernel &k) {
        const double ms = (double)(k.start - t0) * 1e-6;
        int c = 0;
        for (int i = 1; i < kChildren; ++i)
            if (ms >= bound[i] && (i != 1 || !multi)) c = i;
        // The power iteration's kernels and its snapshot are spectral's.
        if (multi && c == 0 && (k.name.find("power") != std::string::npos ||
                                k.name.find("sn_scale") != std::string::npos ||
                                &k == spectral_copy))
            c = 1;
        return c;
    };

    // The sweep (timeline_sweep.hpp), cut at the children's starts after the first: multi-stream
    // segment 0 is her and spectral together, then one a child; single-stream one a child.
    std::vector<bench::Interval> iv;
    for (const Kernel &k : last) iv.push_back({k.start, k.end});
    std::vector<uint64_t> cuts;
    for (int j = multi ? 2 : 1; j < kChildren; ++j)
        cuts.push_back(t0 + (uint64_t)(bound[j] * 1e6));
    const bench::Sweep sw = bench::sweep(iv, cuts);
    constexpr int kLevels = bench::kLevels;
    uint64_t at_level[kLevels] = {}, child_level[kChildren][kLevels] = {};
    for (size_t g = 0; g < sw.level.size(); ++g)
        for (int n = 0; n < kLevels; ++n) {
            at_level[n] += sw.level[g][n];
            child_level[multi && g > 0 ? g + 1 : g][n] += sw.level[g][n];
        }
    const std::vector<bench::Gap> &gaps = sw.gaps;
    uint64_t child_sum[kChildren] = {};
    for (const Kernel &k : last) child_sum[child_of(k)] += k.end - k.start;
    std::map<std::string, uint64_t> alone;  // time each kernel ran with no other, by name
    for (size_t i = 0; i < last.size(); ++i) alone[last[i].name] += sw.alone[i];
    const auto us = [](uint64_t ns) { return (double)ns / 1000.0; };
    const auto running_at = [&](uint64_t t) {
        int n = 0;
        for (const Kernel &k : last) n += k.start <= t && t < k.end;
        return n;
    };
    const auto before = [&](uint64_t t) {  // the last kernel to end at or before t
        const Kernel *b = nullptr;
        for (const Kernel &k : last)
            if (k.end <= t && (!b || k.end > b->end)) b = &k;
        return b;
    };

    printf("foxhunt-timeline: %s, B = %ld, the last of %ld traced steps (%zu kernels each), "
           "%s\n", mode->name, batch, steps, per, machine.c_str());
    printf("%9s %9s %3s %7s %5s %-8s  %s\n", "start_us", "dur_us", "ran", "blocks", "thr",
           "child", "kernel");
    for (const Kernel &k : last)
        printf("%9.1f %9.1f %3d %7ld %5d %-8s  %.80s\n", us(k.start - t0), us(k.end - k.start),
               running_at(k.start), k.blocks, k.threads, kChild[child_of(k)], k.name.c_str());
    const double span = us(t1 - t0);
    printf("\nspan %.1f us (the events' total_ms: %.1f us), kernels' summed time %.1f us "
           "(%.2f x the span)\n", span, 1000.0 * tm.total_ms, us(busy_sum),
           us(busy_sum) / span);
    printf("time with 0 / 1 / 2 / 3+ kernels running: %.1f / %.1f / %.1f / %.1f us\n",
           us(at_level[0]), us(at_level[1]), us(at_level[2]), us(at_level[3]));
    printf("per child (bounds from the events): kernels' summed time, and time with 0 / 1 / 2 / "
           "3+ running (her and spectral together in multi-stream mode)\n");
    for (int c = 0; c < kChildren; ++c) {
        if (multi && c == 1) continue;
        const uint64_t *l = child_level[c];
        printf("  %-8s %6.1f us events, kernels %7.1f us, %6.1f / %6.1f / %6.1f / %6.1f us\n",
               multi && c == 0 ? "her+spec" : kChild[c],
               1000.0 * (multi && c == 0 ? bound[2] : events_ms[c]),
               us(child_sum[c] + (multi && c == 0 ? child_sum[1] : 0)), us(l[0]), us(l[1]),
               us(l[2]), us(l[3]));
    }
    std::vector<std::pair<uint64_t, std::string>> lone;
    for (const auto &e : alone) lone.push_back({e.second, e.first});
    std::sort(lone.rbegin(), lone.rend());
    printf("kernels that ran alone longest (summed over their launches):\n");
    for (size_t i = 0; i < lone.size() && i < 12; ++i)
        printf("  %6.1f us  %.90s\n", us(lone[i].first), lone[i].second.c_str());
    printf("longest gaps with no kernel running (the kernel before -> the one after):\n");
    for (size_t i = 0; i < gaps.size() && i < 10; ++i) {
        const Kernel *b = before(gaps[i].from);
        const Kernel *a = nullptr;
        for (const Kernel &k : last)
            if (k.start == gaps[i].to) a = &k;
        printf("  %6.1f us at %8.1f: %.50s -> %.50s\n", us(gaps[i].to - gaps[i].from),
               us(gaps[i].from - t0), b ? b->name.c_str() : "?", a ? a->name.c_str() : "?");
    }

    FILE *f = open_output(out.c_str());
    fprintf(f, "{\n  \"machine\": %s,\n  \"mode\": \"%s\",\n  \"batch\": %ld,\n"
               "  \"steps_traced\": %ld,\n  \"span_us\": %.3f,\n  \"events_total_us\": %.3f,\n"
               "  \"kernels_summed_us\": %.3f,\n  \"us_with_n_running\": [%.3f, %.3f, %.3f, "
               "%.3f],\n",
            json_string(machine).c_str(), mode->name, batch, steps, span,
            1000.0 * tm.total_ms, us(busy_sum), us(at_level[0]), us(at_level[1]),
            us(at_level[2]), us(at_level[3]));
    // Multi-stream, her and spectral are one entry, as in the table.
    fprintf(f, "  \"children\": [\n");
    for (int c = 0; c < kChildren; ++c) {
        if (multi && c == 1) continue;
        const uint64_t *l = child_level[c];
        const bool both = multi && c == 0;
        fprintf(f,
                "    {\"name\": \"%s\", \"start_us\": %.3f, \"events_us\": %.3f, "
                "\"kernels_summed_us\": %.3f, \"us_with_n_running\": [%.3f, %.3f, %.3f, %.3f]}%s\n",
                both ? "her+spectral" : kChild[c], 1000.0 * bound[c],
                1000.0 * (both ? bound[2] : events_ms[c]),
                us(child_sum[c] + (both ? child_sum[1] : 0)), us(l[0]), us(l[1]), us(l[2]),
                us(l[3]), c + 1 < kChildren ? "," : "");
    }
    fprintf(f, "  ],\n  \"kernels\": [\n");
    for (size_t i = 0; i < last.size(); ++i) {
        const Kernel &k = last[i];
        fprintf(f,
                "    {\"start_us\": %.3f, \"dur_us\": %.3f, \"blocks\": %ld, \"threads\": %d, "
                "\"child\": \"%s\", \"name\": %s}%s\n",
                us(k.start - t0), us(k.end - k.start), k.blocks, k.threads,
                kChild[child_of(k)], json_string(k.name).c_str(),
                i + 1 < last.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("\nwrote %s\n", out.c_str());
    return 0;
}
