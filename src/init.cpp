#include "init.hpp"

#include <cmath>

#include "philox.hpp"

namespace fh {

static void normalize(float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (double)x[i] * x[i];
    float norm = std::max((float)std::sqrt(s), 1e-12f);
    for (size_t i = 0; i < n; ++i) x[i] /= norm;
}

HostBuffers initial_state(const Layout &L, uint64_t seed) {
    HostBuffers h(NUM_BUFS);
    for (int b = 0; b < NUM_BUFS; ++b) h[b].assign(L.buf_size[b], 0.0f);

    for (const TensorEntry &t : L.tensors) {
        if (t.spec_id < 0 || t.fan_in == 0) continue;  // biases are zero and draw nothing
        // Each factor rounded to float32 once, then the product (SPEC §3).
        const float scale = (float)(1.0 / std::sqrt((double)t.fan_in));
        float *w = h[t.buf].data() + t.offset;
        for (size_t e = 0; e < t.count(); ++e) {
            float u = uniform24(philox(seed, (uint32_t)e, (uint32_t)t.spec_id, 0, PURPOSE_INIT).w[0]);
            w[e] = (2.0f * u - 1.0f) * scale;
        }
    }
    h[BUF_Q_TARGET] = h[BUF_Q];
    h[BUF_IQN_TARGET] = h[BUF_IQN];

    const Dims &d = L.dims;
    const bool sn[2] = {d.sn1, d.sn2};
    const char *layer[2] = {"q.W1", "q.W2"};
    for (int k = 0; k < 2; ++k) {
        if (!sn[k]) continue;
        int id = L.find(layer[k])->spec_id;
        float *u = h[BUF_SN_U].data() + (size_t)k * d.H;
        for (uint32_t j = 0; j < d.H; ++j)
            u[j] = 2.0f * uniform24(philox(seed, j, (uint32_t)id, 0, PURPOSE_SN_INIT).w[0]) - 1.0f;
        normalize(u, d.H);
    }
    for (float &x : h[BUF_REGIME]) x = 1.0f;  // s_k = 1 and rho_k = 1
    return h;
}

}  // namespace fh
