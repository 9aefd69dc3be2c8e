#include "state_ranges.hpp"

#include <cmath>
#include <string>

#include "error.hpp"

namespace fh {

namespace {

// normalize()'s floor (src/cpu/spectral.cpp, cuda/spectral.cu): below it v is not unit length.
constexpr double kNormFloor = 1e-12;

bool all_zero(const float *x, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (x[i] != 0.0f) return false;
    return true;
}

// ‖v‖ for v = Wᵀu as the power iteration forms it: each element summed in double, rounded to
// float; W [rows, cols], u [rows].
double first_product_norm(const float *W, const float *u, size_t rows, size_t cols) {
    double n2 = 0;
    for (size_t j = 0; j < cols; ++j) {
        double acc = 0;
        for (size_t i = 0; i < rows; ++i) acc += (double)W[i * cols + j] * u[i];
        const double v = (double)(float)acc;
        n2 += v * v;
    }
    return std::sqrt(n2);
}

}  // namespace

void check_state_range(const fh_config &c, const Layout &L, const TensorEntry &t,
                       const TensorValues &values) {
    const Dims &d = L.dims;
    const float *x = values(t);
    for (int k = 1; k <= 2; ++k) {
        const bool sn = k == 1 ? d.sn1 : d.sn2;
        const std::string W = "q.W" + std::to_string(k), u = "sn.u.W" + std::to_string(k);
        if (t.name == u && all_zero(x, t.count()))
            fail(FH_ERR_BAD_VALUE, "tensor '%s' is all zeros: a spectral u needs a non-zero norm",
                 t.name.c_str());
        if (!sn) continue;
        if (t.name == "target." + W && all_zero(x, t.count()))
            fail(FH_ERR_BAD_VALUE, "tensor '%s' is all zeros, and %s is spectrally normalised: "
                 "σ̄ = uᵀW̄v would be 0 and W̄/σ̄ not finite (SPEC §5.2)", t.name.c_str(),
                 W.c_str());
        if (t.name != W && t.name != u) continue;
        const TensorEntry *tw = L.find(W.c_str()), *tu = L.find(u.c_str());
        if (!tw || !tu) fail(FH_ERR_INTERNAL, "layout without %s or %s", W.c_str(), u.c_str());
        // A u of zeros is named as such, whichever of the pair is being checked.
        if (all_zero(values(*tu), tu->count()))
            fail(FH_ERR_BAD_VALUE, "tensor '%s' is all zeros: a spectral u needs a non-zero norm",
                 u.c_str());
        const double n = first_product_norm(values(*tw), values(*tu), tw->rows, tw->cols);
        if (!(n >= kNormFloor))
            fail(FH_ERR_BAD_VALUE,
                 "tensor '%s': with %s and %s as they would be, ‖Wᵀu‖ = %.9g is "
                 "below %.9g, so the power iteration (SPEC §5.2) cannot normalise v, σ = uᵀWv "
                 "vanishes and every step would be skipped",
                 t.name.c_str(), W.c_str(), u.c_str(), n, kNormFloor);
    }
    if (t.name == "regime.s") {
        for (size_t i = 0; i < t.count(); ++i)
            if (x[i] < 0)
                fail(FH_ERR_BAD_VALUE, "%s[0, %zu] = %.9g is negative (a mean square)",
                     t.name.c_str(), i, (double)x[i]);
    } else if (t.name == "regime.scale") {
        // ρ starts at 1 and each update clamps it to [regime_min, regime_max] (SPEC §5.5 step
        // 8), which need not contain 1; with one regime ρ ≡ 1.
        const float lo = c.regime_min, hi = c.regime_max;
        for (size_t i = 0; i < t.count(); ++i) {
            if (d.R == 1 && x[i] != 1.0f)
                fail(FH_ERR_BAD_VALUE, "%s[0, %zu] = %.9g, but with num_regimes = 1 the scale is 1",
                     t.name.c_str(), i, (double)x[i]);
            if (!(x[i] == 1.0f || (x[i] >= lo && x[i] <= hi)))
                fail(FH_ERR_BAD_VALUE,
                     "%s[0, %zu] = %.9g is outside [regime_min, regime_max] "
                     "= [%.9g, %.9g] and not 1, its initial value",
                     t.name.c_str(), i, (double)x[i], (double)lo, (double)hi);
        }
    }
}

}  // namespace fh
