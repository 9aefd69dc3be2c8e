/*
 * foxhunt-bench-dp: the data-parallel step (SPEC §9) on W GPUs of this machine, in one process:
 * one thread per GPU creates that GPU's pipeline (creation is collective), then one thread
 * launches every pipeline's steps in turn (a launch does not block). Each rank has its own
 * batch of --batch rows, the SPEC defaults otherwise (--mode picks lanes and math). Four runs:
 *   "1 GPU"            one pipeline on GPU 0, no communicator
 *   "1 GPU, comm"      the same with a communicator of one rank (NCCL then does nothing)
 *   "W GPUs, no comm"  W independent pipelines launched the same way: the same work per GPU
 *                      without the all-reduces
 *   "W GPUs, comm"     W pipelines joined by one communicator (ncclCommInitAll)
 * Each run uploads one batch per rank, warms up, then launches --steps steps per rank back to
 * back and waits for all: ms per step (wall) and rows per second (W·B / ms); then --steps more,
 * reading rank 0's fh_timings after each (per-child graph timings, medians). The all-reduce's
 * share of the step is the wall time per step with the communicator minus the time without it,
 * over the former; the aux and adam children hold the all-reduces, and their medians with and
 * without show where the time goes. The target: rows/s at W = 2 >= 1.8x W = 1.
 * It prints a table and writes every number to --out (JSON; default
 * bench/results/<machine>-<date>-dp.json under the current directory, folders created).
 *
 * usage: foxhunt-bench-dp [--world W] [--batch 16384] [--steps 50] [--warmup 5]
 *                         [--mode multi-tf32|single-tf32|multi-strict|single-strict|
 *                                 multi-bf16|single-bf16]
 *                         [--machine NAME] [--out PATH]
 *   --world  GPUs to use, 0 .. W-1 (default: every visible GPU; 1 runs the first two rows).
 */
#define _POSIX_C_SOURCE 200809L

#include <foxhunt.h>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { MAX_WORLD = 16, NUM_RUNS = 4, NUM_CHILD = 9 };

static const char *const kChild[NUM_CHILD] = {"her",     "spectral", "ddqn", "forward", "aux",
                                              "aux_iql", "aux_tail", "adam", "total"};

typedef struct {
    char name[64];
    int world, comm;
    double ms, rows_per_s;
    double child[NUM_CHILD];  /* rank 0's medians, ms */
} run_result;

typedef struct {
    fh_config cfg;
    fh_pipeline *p;
    fh_status status;
    char msg[1024];
} rank_create;

static void *create_rank(void *arg) {
    rank_create *a = arg;
    a->status = fh_pipeline_create(&a->cfg, &a->p);
    snprintf(a->msg, sizeof a->msg, "%s", fh_last_error_message());  /* thread-local */
    return NULL;
}

static void nccl_check(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) {
        fprintf(stderr, "foxhunt-bench-dp: %s failed: %s\n", what, ncclGetErrorString(r));
        exit(1);
    }
}

static void child_fields(const fh_timings *t, double *f) {
    f[0] = t->her_ms; f[1] = t->spectral_ms; f[2] = t->ddqn_ms; f[3] = t->forward_ms;
    f[4] = t->aux_ms; f[5] = t->aux_iql_ms; f[6] = t->aux_tail_ms; f[7] = t->adam_ms;
    f[8] = t->total_ms;
}

static void run(run_result *r, const fh_config *base, int world, int comm, int steps,
                int warmup, host_batch *hb) {
    snprintf(r->name, sizeof r->name, "%d GPU%s%s", world, world > 1 ? "s" : "",
             comm ? ", comm" : (world > 1 ? ", no comm" : ""));
    r->world = world;
    r->comm = comm;
    ncclComm_t comms[MAX_WORLD] = {0};
    int devs[MAX_WORLD];
    for (int k = 0; k < world; ++k) devs[k] = k;
    if (comm) nccl_check(ncclCommInitAll(comms, world, devs), "ncclCommInitAll");
    rank_create rc[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    for (int k = 0; k < world; ++k) {
        rc[k].cfg = *base;
        rc[k].cfg.device = k;
        rc[k].cfg.nccl_comm = comm ? comms[k] : NULL;
        rc[k].p = NULL;
        if (pthread_create(&th[k], NULL, create_rank, &rc[k]) != 0) {
            fprintf(stderr, "foxhunt-bench-dp: pthread_create failed\n");
            exit(1);
        }
    }
    for (int k = 0; k < world; ++k) pthread_join(th[k], NULL);
    for (int k = 0; k < world; ++k)
        if (rc[k].status != FH_OK) {
            fprintf(stderr, "foxhunt-bench-dp: rank %d: fh_pipeline_create: %s\n", k, rc[k].msg);
            exit(1);
        }
    for (int k = 0; k < world; ++k) CHECK(fh_pipeline_upload(rc[k].p, &hb[k].b));
    for (int s = 0; s < warmup; ++s)
        for (int k = 0; k < world; ++k) CHECK(fh_pipeline_step(rc[k].p));
    for (int k = 0; k < world; ++k) CHECK(fh_pipeline_sync(rc[k].p));

    const double t0 = now_ms();
    for (int s = 0; s < steps; ++s)
        for (int k = 0; k < world; ++k) CHECK(fh_pipeline_step(rc[k].p));
    for (int k = 0; k < world; ++k) CHECK(fh_pipeline_sync(rc[k].p));
    r->ms = (now_ms() - t0) / steps;
    r->rows_per_s = world * (double)base->batch_size * 1000.0 / r->ms;

    double *v = xmalloc(sizeof(double) * (size_t)steps * NUM_CHILD);
    fh_timings t;
    t.struct_size = sizeof t;
    for (int s = 0; s < steps; ++s) {
        for (int k = 0; k < world; ++k) CHECK(fh_pipeline_step(rc[k].p));
        CHECK(fh_pipeline_timings(rc[0].p, &t));
        child_fields(&t, v + (size_t)s * NUM_CHILD);
    }
    column_medians(v, steps, NUM_CHILD, r->child);
    free(v);
    for (int k = 0; k < world; ++k) fh_pipeline_destroy(rc[k].p);  /* before the comms */
    if (comm)
        for (int k = 0; k < world; ++k) nccl_check(ncclCommDestroy(comms[k]), "ncclCommDestroy");
}

static const char *mode_name(int exec_mode, int math_mode) {
    static const char *const names[2][3] = {{"multi-tf32", "multi-strict", "multi-bf16"},
                                           {"single-tf32", "single-strict", "single-bf16"}};
    return names[exec_mode][math_mode];
}

int main(int argc, char **argv) {
    int world = 0, steps = 50, warmup = 5, exec_mode = FH_EXEC_MULTI_STREAM,
        math_mode = FH_MATH_TF32;
    uint32_t batch = 16384;
    char machine[256] = "", out[4096] = "";
    static const char usage[] = "usage: foxhunt-bench-dp [--world W] [--batch N] [--steps N] "
                                "[--warmup N] [--mode M] [--machine NAME] [--out PATH]\n";
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "foxhunt-bench-dp: %s: unknown, or its value is missing\n%s", a, usage);
            return 2;
        }
        ++i;  /* every option takes a value */
        if (!strcmp(a, "--world")) world = (int)arg_long(a, v, 0, MAX_WORLD);  /* 0: every GPU */
        else if (!strcmp(a, "--batch")) batch = (uint32_t)arg_long(a, v, 1, 1L << 30);
        else if (!strcmp(a, "--steps")) steps = (int)arg_long(a, v, 1, 1000000);
        else if (!strcmp(a, "--warmup")) warmup = (int)arg_long(a, v, 0, 1000000);
        else if (!strcmp(a, "--machine")) snprintf(machine, sizeof machine, "%s", v);
        else if (!strcmp(a, "--out")) snprintf(out, sizeof out, "%s", v);
        else if (!strcmp(a, "--mode")) {
            exec_mode = strncmp(v, "single", 6) == 0;
            math_mode = strstr(v, "strict") ? FH_MATH_STRICT
                        : strstr(v, "bf16") ? FH_MATH_BF16 : FH_MATH_TF32;
            if (strcmp(v, mode_name(exec_mode, math_mode))) {
                fprintf(stderr, "foxhunt-bench-dp: unknown --mode '%s' (multi-tf32, "
                                "single-tf32, multi-strict, single-strict, multi-bf16 or "
                                "single-bf16)\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "foxhunt-bench-dp: unknown option '%s'\n%s", a, usage);
            return 2;
        }
    }
    int ndev = 0;
    const cudaError_t de = cudaGetDeviceCount(&ndev);
    if (de != cudaSuccess || ndev < 1) {
        fprintf(stderr, "foxhunt-bench-dp: it measures the CUDA backend on every GPU, and there "
                        "is none here (%s)\n",
                de != cudaSuccess ? cudaGetErrorString(de) : "no CUDA device");
        return 1;
    }
    if (world <= 0) world = ndev < MAX_WORLD ? ndev : MAX_WORLD;
    if (world > ndev) {
        fprintf(stderr, "foxhunt-bench-dp: --world %d, but this machine has %d GPUs\n", world,
                ndev);
        return 2;
    }
    if (!machine[0]) snprintf(machine, sizeof machine, "gpu");
    char date[32];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    if (!out[0]) snprintf(out, sizeof out, "bench/results/%s-%s-dp.json", machine, date);

    fh_config base;
    fh_config_init(&base);
    base.backend = FH_BACKEND_CUDA;
    base.batch_size = batch;
    base.exec_mode = exec_mode;
    base.math_mode = math_mode;
    host_batch hb[MAX_WORLD];
    for (int k = 0; k < world; ++k) make_batch(&hb[k], &base);

    run_result res[NUM_RUNS];
    int nres = 0;
    run(&res[nres++], &base, 1, 0, steps, warmup, hb);
    run(&res[nres++], &base, 1, 1, steps, warmup, hb);
    if (world > 1) {
        run(&res[nres++], &base, world, 0, steps, warmup, hb);
        run(&res[nres++], &base, world, 1, steps, warmup, hb);
    }

    printf("\nfoxhunt-bench-dp: B = %u rows per rank, %s, %d steps, %s\n\n", batch,
           mode_name(exec_mode, math_mode), steps, machine);
    printf("%-18s %3s %9s %12s %8s |", "run", "W", "ms/step", "rows/s", "speed-up");
    for (int f = 0; f < NUM_CHILD; ++f) printf(" %8s", kChild[f]);
    printf("\n");
    for (int k = 0; k < nres; ++k) {
        const run_result *r = &res[k];
        printf("%-18s %3d %9.3f %12.0f %8.2f |", r->name, r->world, r->ms, r->rows_per_s,
               r->rows_per_s / res[0].rows_per_s);
        for (int f = 0; f < NUM_CHILD; ++f) printf(" %8.3f", r->child[f]);
        printf("\n");
    }
    double share_ms = 0, share = 0;
    if (nres == NUM_RUNS) {
        share_ms = res[3].ms - res[2].ms;
        share = share_ms / res[3].ms;
        printf("\nall-reduce: %.3f ms of the %.3f ms step (%.1f %%); rank 0's aux child %+.3f ms, "
               "adam child %+.3f ms with the communicator\n", share_ms, res[3].ms, 100 * share,
               res[3].child[4] - res[2].child[4], res[3].child[7] - res[2].child[7]);
    }
    printf("(medians of per-child graph timings, ms, of rank 0; rows/s from the wall time of "
           "back-to-back steps)\n");

    FILE *f = open_output(out);
    fprintf(f, "{\n  \"machine\": \"%s\", \"date\": \"%s\", \"batch_per_rank\": %u, "
               "\"mode\": \"%s\", \"steps\": %d, \"gpus\": %d,\n",
            machine, date, batch, mode_name(exec_mode, math_mode), steps, ndev);
    fprintf(f, "  \"allreduce_ms\": %.4f, \"allreduce_share\": %.4f,\n  \"runs\": [\n",
            share_ms, share);
    for (int k = 0; k < nres; ++k) {
        const run_result *r = &res[k];
        fprintf(f, "    {\"name\": \"%s\", \"world\": %d, \"comm\": %d, \"ms_per_step\": %.4f, "
                   "\"rows_per_s\": %.1f, \"speedup\": %.4f, \"rank0_child_ms\": {",
                r->name, r->world, r->comm, r->ms, r->rows_per_s,
                r->rows_per_s / res[0].rows_per_s);
        for (int c = 0; c < NUM_CHILD; ++c)
            fprintf(f, "%s\"%s\": %.4f", c ? ", " : "", kChild[c], r->child[c]);
        fprintf(f, "}}%s\n", k + 1 < nres ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("wrote %s\n", out);
    for (int k = 0; k < world; ++k) free_batch(&hb[k]);
    return 0;
}
