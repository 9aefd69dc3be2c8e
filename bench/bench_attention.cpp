/*
 * foxhunt-bench-attention: the attention learner's kernel paths side by side (issue 10).
 *
 * For each batch size and each kernel path of cuda/attention_paths.hpp that supports the default
 * config (tensor cores TF32, tensor cores split TF32, general), it builds the
 * learner (SPEC §1 defaults at that batch size, random parameters and inputs), runs its loss and
 * gradient (everything of the attention lane but Adam) --iters times after a warm-up, and reports
 * the median time of the per-(transition, head) forward and backward kernels (events around
 * them) and of the whole loss-and-gradient, with the forward's and the backward's TFLOP/s.
 *
 * FLOPs counted (the matrix products these kernels perform, 2 per multiply-add; the learner
 * factors the model, attention.cu's header, so this is far below the unfactored model's count):
 *   per (transition, head):  proj = 2·3dh·(To·td + G)  (q, k, v of every token)
 *   forward  = proj + 2·T²·dh (scores) + 2·T·dh (ā)
 *   backward = 2·proj (q, k, v, and the weight sums M1 | M2) + 2·T²·dh (scores)
 *              + 4·T²·dh (dq, dk) + 2·T·dh (β)
 * The softmax's exp and the elementwise work are not counted.
 *
 * usage: foxhunt-bench-attention [--batch 1024,4096,16384,65536] [--iters 50] [--machine NAME]
 *                                [--out PATH]   (default bench/results/<machine>-<date>-attention.json)
 */
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../cuda/learners.hpp"
#include "config.hpp"
#include "error.hpp"
#include "init.hpp"
#include "layout.hpp"

namespace {

using fh::cuda::AttnKernels;

void ck(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "foxhunt-bench-attention: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
    uint32_t B;
    std::string path;
    double fwd_ms, bwd_ms, total_ms, fwd_tflops, bwd_tflops;
};

const char *name(AttnKernels k) {
    switch (k) {
    case AttnKernels::TC: return "tc";
    case AttnKernels::TC_SPLIT: return "tc-split";
    case AttnKernels::GENERAL: return "general";
    default: return "auto";
    }
}

void mkdirs_for(const std::string &path) {
    for (size_t k = 1; k < path.size(); ++k)
        if (path[k] == '/') mkdir(path.substr(0, k).c_str(), 0755);
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<uint32_t> batches = {1024, 4096, 16384, 65536};
    int iters = 50;
    std::string machine, out;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "--batch" && v) {
            batches.clear();
            for (const char *p = v; *p;) {
                batches.push_back((uint32_t)strtoul(p, (char **)&p, 10));
                if (*p == ',') ++p;
            }
            ++i;
        } else if (a == "--iters" && v) {
            iters = std::max(1, atoi(v));
            ++i;
        } else if (a == "--machine" && v) {
            machine = v;
            ++i;
        } else if (a == "--out" && v) {
            out = v;
            ++i;
        } else {
            fprintf(stderr, "usage: foxhunt-bench-attention [--batch 1024,4096,16384,65536] "
                            "[--iters 50] [--machine NAME] [--out PATH]\n");
            return 2;
        }
    }
    if (machine.empty()) {
        char h[256] = "unknown";
        gethostname(h, sizeof h - 1);
        machine = h;
    }
    char date[32];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    if (out.empty()) out = "bench/results/" + machine + "-" + date + "-attention.json";

    cudaStream_t s;
    ck(cudaStreamCreate(&s), "stream");
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    void *ws = nullptr;
    ck(cudaMalloc(&ws, 32u << 20), "workspace");
    cublasSetStream(h, s);
    cublasSetWorkspace(h, ws, 32u << 20);

    std::vector<Row> rows;
    for (uint32_t B : batches) {
        for (AttnKernels k : {AttnKernels::TC, AttnKernels::TC_SPLIT, AttnKernels::GENERAL}) {
            fh_config c;
            fh_config_init(&c);
            c.batch_size = B;
            c.math_mode = FH_MATH_TF32;  // the default step's math: the learner's GEMMs in TF32
            cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
            const fh::Dims d = fh::make_dims(c);
            const fh::Layout L = fh::make_layout(d);
            std::vector<float> p = fh::initial_state(L, 3)[fh::BUF_ATTN];
            std::mt19937 rng(5);
            std::normal_distribution<float> nd(0.0f, 1.0f);
            std::vector<float> x((size_t)B * d.D), r(B);
            for (float &e : x) e = nd(rng);
            for (float &e : r) e = nd(rng);
            float *dp, *dm, *dv, *dx, *dr, *dl;
            const size_t np = L.attn.total;
            ck(cudaMalloc(&dp, np * 4), "p");
            ck(cudaMalloc(&dm, np * 4), "m");
            ck(cudaMalloc(&dv, np * 4), "v");
            ck(cudaMalloc(&dx, x.size() * 4), "x");
            ck(cudaMalloc(&dr, r.size() * 4), "r");
            ck(cudaMalloc(&dl, 4), "loss");
            ck(cudaMemcpy(dp, p.data(), np * 4, cudaMemcpyHostToDevice), "copy");
            ck(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "copy");
            ck(cudaMemcpy(dr, r.data(), r.size() * 4, cudaMemcpyHostToDevice), "copy");
            try {
                fh::cuda::AttentionLearner a(d, c, L, dp, dm, dv, k);
                a.time_phases(true);
                const fh::cuda::StepInputs in{dx, dx, dr, dr, dr, nullptr};
                // As a pipeline's lane: the mode's compute type and the handle's workspace
                // (cuda/lanes.cpp).
                const fh::cuda::Lane lane{
                    s, fh::cuda::Blas{h, fh::cuda::compute_type(c), nullptr, false, ws, 32u << 20}};
                for (int w = 0; w < 3; ++w) a.enqueue_loss_grad(lane, in, dl);
                std::vector<double> fw, bw, tot;
                cudaEvent_t e0, e1;
                ck(cudaEventCreate(&e0), "event");
                ck(cudaEventCreate(&e1), "event");
                for (int it = 0; it < iters; ++it) {
                    ck(cudaEventRecord(e0, s), "record");
                    a.enqueue_loss_grad(lane, in, dl);
                    ck(cudaEventRecord(e1, s), "record");
                    float f = 0, b = 0, t = 0;
                    a.phase_ms(&f, &b);
                    ck(cudaEventSynchronize(e1), "sync");
                    ck(cudaEventElapsedTime(&t, e0, e1), "elapsed");
                    fw.push_back(f);
                    bw.push_back(b);
                    tot.push_back(t);
                }
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
                const double T = d.T, dh = d.dh, hd = (double)B * d.heads;
                const double proj = 2.0 * 3 * dh * ((double)d.To * d.td + d.G);
                const double ffl = hd * (proj + 2 * T * T * dh + 2 * T * dh);
                const double bfl = hd * (2 * proj + 6 * T * T * dh + 2 * T * dh);
                Row row{B, name(a.kernels()), median(fw), median(bw), median(tot), 0, 0};
                row.fwd_tflops = ffl / (row.fwd_ms * 1e-3) / 1e12;
                row.bwd_tflops = bfl / (row.bwd_ms * 1e-3) / 1e12;
                rows.push_back(row);
                fprintf(stderr, "  B=%u %s: fwd %.3f bwd %.3f loss+grad %.3f ms\n", B,
                        row.path.c_str(), row.fwd_ms, row.bwd_ms, row.total_ms);
            } catch (const fh::Error &e) {
                fprintf(stderr, "  B=%u %s: %s\n", B, name(k), e.message.c_str());
            }
            for (float *q : {dp, dm, dv, dx, dr, dl}) cudaFree(q);
        }
    }

    printf("\nfoxhunt-bench-attention on %s, %s: median of %d; the per-(transition, head) "
           "kernels of the attention learner, default config (T = 32, d_head = 16)\n",
           machine.c_str(), date, iters);
    printf("%7s %-9s %9s %8s %9s %8s %11s\n", "batch", "path", "fwd ms", "TFLOP/s", "bwd ms",
           "TFLOP/s", "loss+grad");
    for (const Row &r : rows)
        printf("%7u %-9s %9.4f %8.2f %9.4f %8.2f %11.4f\n", r.B, r.path.c_str(), r.fwd_ms,
               r.fwd_tflops, r.bwd_ms, r.bwd_tflops, r.total_ms);
    mkdirs_for(out);
    FILE *f = fopen(out.c_str(), "w");
    if (!f) {
        fprintf(stderr, "foxhunt-bench-attention: cannot write %s\n", out.c_str());
        return 1;
    }
    fprintf(f, "{\n  \"machine\": \"%s\",\n  \"date\": \"%s\",\n  \"iters\": %d,\n  \"runs\": [\n",
            machine.c_str(), date, iters);
    for (size_t k = 0; k < rows.size(); ++k) {
        const Row &r = rows[k];
        fprintf(f,
                "    {\"batch\": %u, \"path\": \"%s\", \"forward_ms\": %.5f, \"forward_tflops\": "
                "%.3f, \"backward_ms\": %.5f, \"backward_tflops\": %.3f, \"loss_grad_ms\": %.5f}%s\n",
                r.B, r.path.c_str(), r.fwd_ms, r.fwd_tflops, r.bwd_ms, r.bwd_tflops, r.total_ms,
                k + 1 < rows.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("wrote %s\n", out.c_str());
    cublasDestroy(h);
    cudaFree(ws);
    cudaStreamDestroy(s);
    return 0;
}
