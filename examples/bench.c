/*
 * foxhunt-bench: time the CUDA training step (SPEC §5) per child graph.
 *
 * For each batch size and each mode (multi- or single-stream lanes x TF32, strict FP32 or BF16
 * GEMMs) it creates a pipeline with the SPEC §1 defaults at that batch size, uploads one random
 * batch, warms up, then
 *   1. replays --steps steps reading fh_pipeline_timings() after each (event-record nodes in the
 *      graph: per child, per aux learner, and first-child-start to last-child-end), and reports
 *      the median of each;
 *   2. launches --steps steps back to back without reading anything and divides the wall-clock
 *      time from the first launch to the end of the last step (host clock around the launches,
 *      stopped after fh_pipeline_metrics(), which waits) by the count: ms per step and steps/s
 *      with the GPU never idle;
 *   3. "fed": --steps times, uploads a batch (two alternating) then steps, and divides the wall
 *      time likewise: ms per step as a trainer that uploads a new batch every step sees it,
 *      with the median host time of one upload call beside it (upload overlaps the step on the
 *      GPU, so fed ≈ max(wall, upload + launch)); in a build with CUDA also "dfed", the same with
 *      the two batches in device memory (cudaMalloc'd here; fh_batch.memory = FH_MEMORY_DEVICE:
 *      one device-to-device copy per upload, checked on the device), with its median upload;
 *   4. with a replay (--replay K,E,R, after releasing that pipeline): a pipeline of the same
 *      config owning a replay of K rows of E environments, filled by host inserts of R rows
 *      each ("ins": transitions per second from the first call until the last insert is in
 *      the ring, fh_pipeline_sync() included), then train(--warmup) and train(--steps):
 *      "train" = wall ms per step of the latter (each step samples its batch on the GPU), to
 *      set beside "wall" (back-to-back steps on one uploaded batch).
 * It prints a table and writes every number to --out (JSON; default
 * bench/results/<machine>-<date>.json under the current directory, folders created).
 *
 * usage: foxhunt-bench [--batch 1024,4096,16384,65536] [--steps 50] [--warmup 5]
 *                      [--modes multi-tf32,single-tf32,multi-strict,single-strict,
 *                               multi-bf16,single-bf16]
 *                      [--iql-gemm auto|grouped|batched|sequential[,...]] [--machine NAME]
 *                      [--out PATH] [--peer] [--variant VAR=a,b,...] [--replay K,E,R]
 *   --replay    the replay runs' shape (default 2048,64,16: 131072 transitions, 137 MB at the
 *               SPEC §1 defaults; inserts of 1024 transitions); --replay 0 skips them.
 *   --iql-gemm  the IQL GEMM strategy dimension (fh_config.iql_gemm): each listed value
 *               is one more run per batch and mode. Default: auto only.
 *   --variant   a dimension over the values of one environment variable that the library reads
 *               at pipeline creation (e.g. FOXHUNT_ATTN_KERNELS=legacy,tc to time an old and a
 *               new kernel path side by side in one run); each value is set before creating the
 *               pipeline ("auto" unsets it). Default: none.
 *   --peer      after foxhunt's own runs, time the same step written in PyTorch (eager, one CUDA
 *               graph, torch.compile; tests/python/bench_torch_peer.py, run with `python3`)
 *               at each batch size, in the same math (TF32 if any TF32 mode ran): its table,
 *               with each peer mode's time divided by foxhunt's, prints below foxhunt's; its
 *               JSON files are listed in the output file under "peer". Needs python3 with
 *               torch and a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

enum { MAX_LIST = 16 };

static const char *const kFields[NUM_FIELDS] = {"her",     "spectral", "ddqn",     "forward",
                                                "aux",     "aux_ema",  "aux_iql",  "aux_iqn",
                                                "aux_attn", "aux_tail", "adam",    "total"};

static const char *const kIqlGemm[] = {"auto", "grouped", "batched", "sequential"};

static void timings_fields(const fh_timings *t, double *f) {
    f[0] = t->her_ms; f[1] = t->spectral_ms; f[2] = t->ddqn_ms; f[3] = t->forward_ms;
    f[4] = t->aux_ms; f[5] = t->aux_ema_ms; f[6] = t->aux_iql_ms; f[7] = t->aux_iqn_ms;
    f[8] = t->aux_attn_ms; f[9] = t->aux_tail_ms; f[10] = t->adam_ms; f[11] = t->total_ms;
}

static void run_one(result *r, int steps, int warmup, const char *variant_var,
                    const replay_opts *ro) {
    if (variant_var) {
        if (!strcmp(r->variant, "auto")) unsetenv(variant_var);
        else setenv(variant_var, r->variant, 1);
    }
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CUDA;
    c.batch_size = r->batch;
    c.exec_mode = r->mode->exec_mode;
    c.math_mode = r->mode->math_mode;
    c.iql_gemm = r->iql_gemm;
    fh_pipeline *p = NULL;
    const fh_status created = fh_pipeline_create(&c, &p);
    if (created == FH_ERR_NO_CUDA) {
        fprintf(stderr, "foxhunt-bench: it measures the CUDA backend, and there is none here: %s\n",
                fh_last_error_message());
        exit(1);
    }
    if (created != FH_OK) bench_die("fh_pipeline_create", created);
    host_batch hb;
    make_batch(&hb, &c);
    CHECK(fh_pipeline_upload(p, &hb.b));
    fh_timings t;
    t.struct_size = sizeof t;
    fh_metrics m;
    m.struct_size = sizeof m;
    for (int k = 0; k < warmup; ++k) CHECK(fh_pipeline_step(p));
    CHECK(fh_pipeline_metrics(p, &m));

    double *v = xmalloc(sizeof(double) * (size_t)steps * NUM_FIELDS);
    for (int k = 0; k < steps; ++k) {
        CHECK(fh_pipeline_step(p));
        CHECK(fh_pipeline_timings(p, &t));
        timings_fields(&t, v + (size_t)k * NUM_FIELDS);
    }
    column_medians(v, steps, NUM_FIELDS, r->median);
    free(v);

    /* Back to back: the GPU never idles between steps. */
    const double t0 = now_ms();
    for (int k = 0; k < steps; ++k) CHECK(fh_pipeline_step(p));
    CHECK(fh_pipeline_metrics(p, &m));
    const double t1 = now_ms();
    r->wall_ms = (t1 - t0) / steps;
    r->steps_per_s = 1000.0 / r->wall_ms;

    /* Fed: a new batch before every step, as a trainer runs; uploads alternate between two
     * batches so that the source is not one cache-warm array. */
    host_batch hb2;
    make_batch(&hb2, &c);
    measure_fed(r, p, &c, &hb, &hb2, steps);
    free_batch(&hb2);
    r->mem.struct_size = sizeof r->mem;
    CHECK(fh_pipeline_memory(p, &r->mem));
    fh_pipeline_destroy(p);
    free_batch(&hb);
    if (ro->capacity > 0) measure_replay(r, c, ro, steps, warmup);
}

static void usage(FILE *f) {
    fprintf(f, "usage: foxhunt-bench [--batch 1024,4096,16384,65536] [--steps 50] [--warmup 5]\n"
               "  [--modes multi-tf32,single-tf32,multi-strict,single-strict,multi-bf16,"
               "single-bf16]\n  [--iql-gemm auto|grouped|batched|sequential[,...]]\n"
               "  [--machine NAME] [--out PATH] [--peer] [--variant VAR=a,b,...] "
               "[--replay K,E,R]\n");
}

int main(int argc, char **argv) {
    uint32_t batches[MAX_LIST] = {1024, 4096, 16384, 65536};
    int nbatch = 4, steps = 50, warmup = 5, peer = 0;
    const bench_mode *modes[MAX_LIST];
    int nmodes = 0;
    for (int k = 0; k < NUM_BENCH_MODES; ++k) modes[nmodes++] = &bench_modes[k];
    int iql[4] = {FH_IQL_GEMM_AUTO}, niql = 1;
    char machine[256] = "", out[4096] = "";
    char variant_var[256] = "";
    const char *variants[MAX_LIST] = {""};
    replay_opts ro = {2048, 64, 16};
    int nvar = 1;
    char *items[MAX_LIST];
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--peer")) {
            peer = 1;
            continue;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        ++i;  /* every other option takes a value */
        if (!strcmp(a, "--batch")) {
            nbatch = arg_list(a, v, items, MAX_LIST);
            for (int k = 0; k < nbatch; ++k) batches[k] = (uint32_t)arg_long(a, items[k], 1, 1L << 30);
        } else if (!strcmp(a, "--steps")) {
            steps = (int)arg_long(a, v, 1, 1000000);
        } else if (!strcmp(a, "--warmup")) {
            warmup = (int)arg_long(a, v, 0, 1000000);
        } else if (!strcmp(a, "--modes")) {
            nmodes = arg_list(a, v, items, MAX_LIST);
            for (int k = 0; k < nmodes; ++k) {
                modes[k] = bench_mode_named(items[k]);
                if (!modes[k]) {
                    bench_unknown_mode(items[k]);
                    return 2;
                }
            }
        } else if (!strcmp(a, "--iql-gemm")) {
            niql = arg_list(a, v, items, 4);
            for (int k = 0; k < niql; ++k) {
                iql[k] = -1;
                for (int j = 0; j < 4; ++j)
                    if (!strcasecmp(items[k], kIqlGemm[j])) iql[k] = j;
                if (iql[k] < 0) {
                    fprintf(stderr, "foxhunt-bench: unknown --iql-gemm '%s' (auto, grouped, "
                                    "batched or sequential)\n", items[k]);
                    return 2;
                }
            }
        } else if (!strcmp(a, "--machine")) {
            snprintf(machine, sizeof machine, "%s", v);
        } else if (!strcmp(a, "--out")) {
            snprintf(out, sizeof out, "%s", v);
        } else if (!strcmp(a, "--replay")) {
            const int n = arg_list(a, v, items, 3);
            uint32_t x[3] = {0, 0, 0};
            for (int k = 0; k < n; ++k) x[k] = (uint32_t)arg_long(a, items[k], 0, 1L << 30);
            ro = (replay_opts){x[0], x[1], x[2]};
            if (x[0] > 0 && (n != 3 || x[1] == 0 || x[2] == 0)) {
                fprintf(stderr, "foxhunt-bench: --replay wants K,E,R with E, R >= 1 (or 0), "
                                "got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--variant") && strchr(v, '=') && strchr(v, '=') != v) {
            const char *eq = strchr(v, '=');
            snprintf(variant_var, sizeof variant_var, "%.*s", (int)(eq - v), v);
            nvar = arg_list(a, eq + 1, items, MAX_LIST);
            for (int k = 0; k < nvar; ++k) variants[k] = items[k];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!machine[0] && gethostname(machine, sizeof machine - 1) != 0) strcpy(machine, "unknown");
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    if (!out[0]) snprintf(out, sizeof out, "bench/results/%s-%s.json", machine, date);

    const int nres = nbatch * nmodes * niql * nvar;
    result *res = xmalloc(sizeof(result) * (size_t)nres);
    int nr = 0;
    for (int bi = 0; bi < nbatch; ++bi)
        for (int q = 0; q < niql; ++q)
            for (int mi = 0; mi < nmodes; ++mi)
                for (int vi = 0; vi < nvar; ++vi) {
                    result *r = &res[nr++];
                    memset(r, 0, sizeof *r);
                    r->batch = batches[bi];
                    r->mode = modes[mi];
                    r->iql_gemm = iql[q];
                    r->variant = variants[vi];
                    run_one(r, steps, warmup, variant_var[0] ? variant_var : NULL, &ro);
                    fprintf(stderr, "  B=%u %s iql=%s %s: %.3f ms/step\n", r->batch,
                            r->mode->name, kIqlGemm[r->iql_gemm], r->variant, r->median[11]);
                }

    printf("\nfoxhunt-bench (libfoxhunt %u) on %s, %s: median ms per child graph over %d "
           "steps; wall = back-to-back steps on one batch; fed = upload + step back to back, "
           "upload = median host ms per upload call; dfed, dupl: the same from device memory; "
           "train = ms per step of train(k) sampling from a replay of %u x %u, ins = its host "
           "inserts of %u rows, million transitions per second\n",
           fh_version(), machine, date, steps, ro.capacity, ro.envs, ro.insert_rows);
    if (variant_var[0]) printf("variant = %s\n", variant_var);
    printf("%7s %-13s %-5s %-9s %6s %6s %6s %7s %7s (%5s %6s %6s %6s %6s) %6s %7s | %7s %8s | "
           "%7s %7s | %7s %7s | %7s %5s | %8s\n",
           "batch", "mode", "iql", "variant", "her", "spec", "ddqn", "forward", "aux", "ema", "iql", "iqn",
           "attn", "tail", "adam", "total", "wall", "steps/s", "fed", "upload", "dfed", "dupl",
           "train", "ins", "mem MiB");
    for (int k = 0; k < nr; ++k) {
        const result *r = &res[k];
        const double *m = r->median;
        printf("%7u %-13s %-5s %-9s %6.3f %6.3f %6.3f %7.3f %7.3f (%5.3f %6.3f %6.3f %6.3f "
               "%6.3f) %6.3f %7.3f | %7.3f %8.1f | %7.3f %7.3f | %7.3f %7.3f | %7.3f %5.2f | "
               "%8.1f\n",
               r->batch, r->mode->name, kIqlGemm[r->iql_gemm], r->variant[0] ? r->variant : "-", m[0], m[1], m[2], m[3], m[4],
               m[5], m[6], m[7], m[8], m[9], m[10], m[11], r->wall_ms, r->steps_per_s,
               r->fed_ms, r->upload_ms, r->dfed_ms, r->dupload_ms, r->train_ms,
               r->insert_tps / 1e6, r->mem.total / 1048576.0);
    }

    /* The PyTorch peer, one process per batch size, after foxhunt has released the GPU. */
    char peer_json[MAX_LIST][4200];
    int npeer = 0;
    for (int bi = 0; peer && bi < nbatch; ++bi) {
        snprintf(peer_json[npeer], sizeof peer_json[0], "%s.peer-%u.json", out, batches[bi]);
        mkdirs_for(peer_json[npeer]);
        /* foxhunt's own numbers at this batch, in the peer's math (TF32 unless only strict
         * modes ran), so that the peer prints the ratios side by side. */
        int any_tf32 = 0;
        for (int mi = 0; mi < nmodes; ++mi) any_tf32 |= modes[mi]->math_mode == FH_MATH_TF32;
        const int peer_math = any_tf32 ? FH_MATH_TF32 : FH_MATH_STRICT;
        char ours[1024] = "";
        size_t len = 0;
        for (int k = 0; k < nr; ++k) {
            const result *r = &res[k];
            if (r->batch != batches[bi] || r->iql_gemm != iql[0] || r->variant != variants[0] ||
                r->mode->math_mode != peer_math || len >= sizeof ours)
                continue;
            len += (size_t)snprintf(ours + len, sizeof ours - len, "%s%s:%.5f:%.5f",
                                    len ? "," : "", r->mode->name, r->median[11], r->wall_ms);
        }
        char cmd[9000];
        snprintf(cmd, sizeof cmd,
                 "python3 '%s/tests/python/bench_torch_peer.py' --batch-size %u --iters %d "
                 "--warmup %d --tf32 %s --foxhunt '%s' --json '%s'",
                 FOXHUNT_SOURCE_DIR, batches[bi], steps, warmup, any_tf32 ? "on" : "off", ours,
                 peer_json[npeer]);
        printf("\npeer (PyTorch, same step, B = %u): %s\n", batches[bi], cmd);
        fflush(stdout);
        const int rc = system(cmd);
        if (rc != 0) fprintf(stderr, "foxhunt-bench: the peer exited with status %d\n", rc);
        else ++npeer;
    }

    FILE *f = open_output(out);
    fprintf(f, "{\n  \"machine\": \"%s\",\n  \"date\": \"%s\",\n  \"library_version\": %u,\n"
               "  \"steps\": %d,\n  \"warmup\": %d,\n  \"variant_var\": \"%s\",\n"
               "  \"replay\": {\"capacity\": %u, \"envs\": %u, \"insert_rows\": %u},\n"
               "  \"peer\": [",
            machine, date, fh_version(), steps, warmup, variant_var, ro.capacity, ro.envs,
            ro.insert_rows);
    for (int k = 0; k < npeer; ++k) fprintf(f, "%s\"%s\"", k ? ", " : "", peer_json[k]);
    fprintf(f, "],\n  \"runs\": [\n");
    for (int k = 0; k < nr; ++k) {
        const result *r = &res[k];
        fprintf(f, "    {\"batch\": %u, \"mode\": \"%s\", \"iql_gemm\": \"%s\", \"variant\": \"%s\", "
                   "\"median_ms\": {",
                r->batch, r->mode->name, kIqlGemm[r->iql_gemm], r->variant);
        for (int j = 0; j < NUM_FIELDS; ++j)
            fprintf(f, "%s\"%s\": %.5f", j ? ", " : "", kFields[j], r->median[j]);
        fprintf(f, "},\n     \"wall_ms_per_step\": %.5f, \"steps_per_s\": %.2f,\n"
                   "     \"fed_ms_per_step\": %.5f, \"upload_ms_median\": %.5f,\n"
                   "     \"device_fed_ms_per_step\": %.5f, \"device_upload_ms_median\": %.5f,\n"
                   "     \"replay_train_ms_per_step\": %.5f, \"insert_transitions_per_s\": %.0f,\n"
                   "     \"memory_bytes\": {\"parameters\": %llu, \"activations\": %llu, "
                   "\"workspaces\": %llu, \"batch_staging\": %llu, \"total\": %llu}}%s\n",
                r->wall_ms, r->steps_per_s, r->fed_ms, r->upload_ms, r->dfed_ms, r->dupload_ms,
                r->train_ms, r->insert_tps,
                (unsigned long long)r->mem.parameters,
                (unsigned long long)r->mem.activations, (unsigned long long)r->mem.workspaces,
                (unsigned long long)r->mem.batch_staging, (unsigned long long)r->mem.total,
                k + 1 < nr ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("wrote %s\n", out);
    free(res);
    return 0;
}
