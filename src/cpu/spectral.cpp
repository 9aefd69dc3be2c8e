// SPEC §5.2: spectral normalisation (Miyato et al. 2018), one power iteration per step with a
// persistent u; the backward holds u and v constant (their eq. 12).
#include <algorithm>
#include <cmath>

#include "cpu_step.hpp"
#include "nn.hpp"

namespace fh::cpu {

static void normalize(float *x, size_t n) {
    const float norm = std::max((float)std::sqrt(sum_squares(x, n)), 1e-12f);
    for (size_t i = 0; i < n; ++i) x[i] /= norm;
}

// W [rows, cols]; u [rows] updated in place; v [cols] written.
void power_iteration(const float *W, size_t rows, size_t cols, float *u, float *v) {
    for (size_t j = 0; j < cols; ++j) {  // v = normalize(Wᵀ u)
        double acc = 0;
        for (size_t i = 0; i < rows; ++i) acc += (double)W[i * cols + j] * u[i];
        v[j] = (float)acc;
    }
    normalize(v, cols);
    for (size_t i = 0; i < rows; ++i) {  // u = normalize(W v)
        double acc = 0;
        for (size_t j = 0; j < cols; ++j) acc += (double)W[i * cols + j] * v[j];
        u[i] = (float)acc;
    }
    normalize(u, rows);
}

// sigma = uᵀ W v (the target net uses the online net's u and v)
float sn_sigma(const float *W, size_t rows, size_t cols, const float *u, const float *v) {
    double acc = 0;
    for (size_t i = 0; i < rows; ++i) {
        double row = 0;
        for (size_t j = 0; j < cols; ++j) row += (double)W[i * cols + j] * v[j];
        acc += u[i] * row;
    }
    return (float)acc;
}

// dW = (dWsn − ⟨dWsn, Wsn⟩ u vᵀ) / sigma, in place on dW (which holds dWsn).
void sn_backward(float *dW, const float *Wsn, const float *u, const float *v, size_t rows,
                 size_t cols, float sigma) {
    double inner = 0;
    for (size_t i = 0; i < rows * cols; ++i) inner += (double)dW[i] * Wsn[i];
    const float ip = (float)inner;
    for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j)
            dW[i * cols + j] = (dW[i * cols + j] - ip * u[i] * v[j]) / sigma;
}

void spectral_power(CpuStep &s) {
    const Dims &d = s.d;
    const bool sn[2] = {d.sn1, d.sn2};
    const size_t off[2] = {s.L.q.W1, s.L.q.W2};
    const size_t cols[2] = {d.D, d.H};
    for (int k = 0; k < 2; ++k) {
        const float *W = s.buf[BUF_Q].data() + off[k];
        const float *Wt = s.buf[BUF_Q_TARGET].data() + off[k];
        const size_t n = (size_t)d.H * cols[k];
        if (!sn[k]) {
            s.w_eff[k].assign(W, W + n);
            s.w_eff_t[k].assign(Wt, Wt + n);
            s.sigma[k] = s.sigma_t[k] = 0;
            continue;
        }
        float *u = s.buf[BUF_SN_U].data() + (size_t)k * d.H;
        s.sn_v[k].resize(cols[k]);
        power_iteration(W, d.H, cols[k], u, s.sn_v[k].data());
        s.sigma[k] = sn_sigma(W, d.H, cols[k], u, s.sn_v[k].data());
        s.sigma_t[k] = sn_sigma(Wt, d.H, cols[k], u, s.sn_v[k].data());
        s.w_eff[k].resize(n);
        s.w_eff_t[k].resize(n);
        for (size_t i = 0; i < n; ++i) {
            s.w_eff[k][i] = W[i] / s.sigma[k];
            s.w_eff_t[k][i] = Wt[i] / s.sigma_t[k];
        }
    }
}

}  // namespace fh::cpu
