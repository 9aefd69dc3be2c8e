/* The column reductions of the CUDA backend (cuda/reduce.cu) against float64:
 * - reduce_partials: the final pass over Z stacked [rows, width] partials (double, as the fused
 *   kernels write them, and float, as the attention backward does), each column's sum divided by
 *   its segment's divisor and written to the segment that owns it;
 * - colsum_partial then colsum_final: Σ_i X[i, j] (· row_scale[i]) over a float matrix.
 * Bound per output: the kernels sum exact doubles in an order of their own, so they differ from a
 * float64 sum in row order by at most 2·n·2^-53 of Σ|terms| (n terms), and the one rounding to
 * float adds 2^-24 of the value. Shapes: 1 to 1000 partial rows (one row lane, a partial lane
 * round, whole and partial rounds of 256 rows), widths of 1 to 7680 columns, Z = 1 and 3, up to
 * four segments with a divisor and a stride per matrix. A second run must give the same bits.
 * Skipped without a GPU. */
#if FOXHUNT_HAVE_CUDA
#include <cuda_runtime.h>

#include "../cuda/reduce.cuh"
#include "error.hpp"
#endif

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}
#if FOXHUNT_HAVE_CUDA
#include "cuda_dev.hpp"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "test_cuda_util.h"

namespace {

#if FOXHUNT_HAVE_CUDA
using cuda_test::Dev;
using cuda_test::dev_of;

template <class T>
T *ptr(const Dev &d) {
    return static_cast<T *>(d.p);
}

/* Enqueue, wait, and fail on a throw (after the handler, not from inside it) or a fault. */
void run(const char *what, const std::function<void()> &enqueue) {
    std::string err;
    try {
        enqueue();
    } catch (const fh::Error &e) {
        err = e.message;
    }
    if (!err.empty()) fail_msg("%s threw: %s", what, err.c_str());
    cuda_test::cuda_ok(cudaDeviceSynchronize(), what);
}

bool same_bits(const std::vector<float> &x, const std::vector<float> &y) {
    return x.size() == y.size() && memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

/* Worst |got − want| over its bound (above). */
double worst(const std::vector<float> &got, const std::vector<double> &want,
             const std::vector<double> &mag, const std::vector<size_t> &terms) {
    double w = 0.0;
    for (size_t k = 0; k < want.size(); ++k) {
        const double bound = std::ldexp(std::fabs(want[k]), -24) +
                             2.0 * (double)terms[k] * std::ldexp(mag[k], -53) + 1e-300;
        const double e = std::fabs((double)got[k] - want[k]) / bound;
        w = std::max(w, std::isfinite(e) ? e : 1e30);
    }
    return w;
}

struct PartialCase {
    int rows, width, Z;
};

/* reduce_partials over [Z][rows][width] partials of type T, split into segments. */
template <class T>
void check_partials(PartialCase cs, unsigned seed) {
    const int rows = cs.rows, width = cs.width, Z = cs.Z;
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<T> part((size_t)Z * rows * width);
    /* Magnitudes over several decades, so that the order of the sum shows in the low bits. */
    for (T &v : part) v = (T)(nd(rng) * std::exp2(std::floor(8.0 * std::fabs(nd(rng)))));
    /* Segments: the first column alone (a mean over 7 rows, as a loss is), then up to three
     * runs of the rest, each written to its own buffer with a stride per matrix. */
    fh::cuda::Segs sg;
    struct Out {
        int col0, len;
        size_t zstride;
        double div;
    };
    std::vector<Out> outs;
    outs.push_back({0, 1, 2, 7.0});
    int col = 1;
    for (int k = 0; k < 3 && col < width; ++k) {
        const int len = k == 2 ? width - col : std::max(1, (width - col) / 3);
        outs.push_back({col, len, (size_t)len + 3, 1.0});
        col += len;
    }
    std::vector<Dev> dst;
    for (const Out &o : outs)
        dst.push_back(dev_of(std::vector<float>((size_t)Z * o.zstride, NAN)));
    for (size_t k = 0; k < outs.size(); ++k)
        sg.add(ptr<float>(dst[k]), outs[k].col0, outs[k].len, outs[k].zstride, outs[k].div);
    const Dev dp = dev_of(part);
    const auto enqueue = [&] {
        fh::cuda::reduce_partials(ptr<const T>(dp), rows, width, Z, sg, nullptr);
    };
    run("reduce_partials", enqueue);
    std::vector<std::vector<float>> first;
    for (const Dev &d : dst) first.push_back(d.get<float>());
    run("reduce_partials (again)", enqueue);
    bool same = true, gaps_kept = true;
    for (size_t k = 0; k < dst.size(); ++k) same &= same_bits(dst[k].get<float>(), first[k]);
    std::vector<float> got;
    std::vector<double> want, mag;
    std::vector<size_t> terms;
    for (size_t k = 0; k < outs.size(); ++k) {
        const Out &o = outs[k];
        for (int z = 0; z < Z; ++z)
            for (size_t j = 0; j < o.zstride; ++j) {
                const float g = first[k][(size_t)z * o.zstride + j];
                if ((int)j >= o.len) {  // between two matrices' runs: never written
                    gaps_kept &= std::isnan(g);
                    continue;
                }
                double s = 0.0, m = 0.0;
                for (int r = 0; r < rows; ++r) {
                    const double v = (double)part[((size_t)z * rows + r) * width + o.col0 + j];
                    s += v;
                    m += std::fabs(v);
                }
                got.push_back(g);
                want.push_back(s / o.div);
                mag.push_back(m / o.div);
                terms.push_back((size_t)rows);
            }
    }
    const double w = worst(got, want, mag, terms);
    printf("[REDUCE] reduce_partials<%s> rows=%d width=%d Z=%d: worst of the bound %.3f%s%s\n",
           sizeof(T) == 8 ? "double" : "float", rows, width, Z, w,
           same ? ", rerun bitwise equal" : ", RERUN DIFFERS", gaps_kept ? "" : ", GAPS WRITTEN");
    if (!(w <= 1.0 && same && gaps_kept))
        fail_msg("reduce_partials rows=%d width=%d Z=%d: worst %.3f%s%s", rows, width, Z, w,
                 same ? "" : ", a second run differs", gaps_kept ? "" : ", gaps written");
}

void test_reduce_partials_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    const PartialCase cases[] = {{1, 1, 1},     {7, 33, 1},   {32, 2, 3},     {33, 258, 1},
                                 {128, 1160, 1}, {255, 64, 3}, {256, 129, 1},  {264, 258, 1},
                                 {257, 40, 2},  {1000, 97, 1}};
    unsigned seed = 11;
    for (const PartialCase &cs : cases) check_partials<double>(cs, seed++);
    /* The attention backward's partials: float, 391 rows of 7680 columns. */
    check_partials<float>({391, 7680, 1}, seed++);
    check_partials<float>({5, 300, 2}, seed++);
}

/* colsum_partial then colsum_final: Σ_i X[i, j] · row_scale[i] in double. */
void check_colsum(int rows, int width, bool scaled, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X((size_t)rows * width), w(rows);
    for (float &v : X) v = nd(rng);
    for (float &v : w) v = std::fabs(nd(rng));
    const Dev dX = dev_of(X), dw = dev_of(w), out = dev_of(std::vector<float>(width, NAN));
    const Dev part(sizeof(double) * (size_t)fh::cuda::colsum_chunks(rows) * width);
    const auto enqueue = [&] {
        fh::cuda::colsum_partial(ptr<float>(dX), rows, width, scaled ? ptr<float>(dw) : nullptr,
                                 ptr<double>(part), nullptr);
        fh::cuda::colsum_final(ptr<double>(part), rows, width, ptr<float>(out), nullptr);
    };
    run("colsum", enqueue);
    const std::vector<float> got = out.get<float>();
    run("colsum (again)", enqueue);
    const bool same = same_bits(out.get<float>(), got);
    std::vector<double> want(width, 0.0), mag(width, 0.0);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < width; ++j) {
            const double t = (double)X[(size_t)i * width + j] * (scaled ? (double)w[i] : 1.0);
            want[j] += t;
            mag[j] += std::fabs(t);
        }
    const double e = worst(got, want, mag, std::vector<size_t>(width, (size_t)rows));
    printf("[REDUCE] colsum rows=%d width=%d%s: worst of the bound %.3f%s\n", rows, width,
           scaled ? " row-scaled" : "", e, same ? ", rerun bitwise equal" : ", RERUN DIFFERS");
    if (!(e <= 1.0 && same))
        fail_msg("colsum rows=%d width=%d: worst %.3f%s", rows, width, e,
                 same ? "" : ", a second run differs");
}

void test_colsum_vs_float64(void **) {
    if (!fh_test_have_cuda()) skip();
    check_colsum(16384, 256, false, 31);   /* 64 chunks of 256 rows */
    check_colsum(16384 * 4, 8, true, 32);  /* 256 chunks */
    check_colsum(1000, 33, true, 33);      /* a partial last chunk, a partial column tile */
    check_colsum(1, 5, false, 34);
}
#endif

}  // namespace

int main(void) {
#if FOXHUNT_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reduce_partials_vs_float64),
                                       cmocka_unit_test(test_colsum_vs_float64)};
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
#else
    return 77;
#endif
}
