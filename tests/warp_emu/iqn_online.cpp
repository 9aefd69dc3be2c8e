// CPU warp emulation of IQN's fused online pass (cuda/iqn_online.cu; run by tests/warp_emu/run.sh):
// on 37 transitions (a partly filled last tile or row group) at N = 8 (compiled in) and 4, 16, 2, 1
// (read at run time: every shape of the z_mean sums), TF32 products (mma.sync, and h on the
// warpgroup products) and bfloat16 ones, its per-row
// outputs (cos, φraw, m, dhpre, z_mean) and its warps' sums (dbm, dw_z, db_z, the loss: each warp's
// row as the kernel's store_colsums writes it, added over the warps) against a float64 evaluation
// of SPEC §4 and the quantile Huber head. Each block is staged thread by thread, then its warps run
// one after another. Exit status 1 on an error over its bound: 5e-3 in TF32, 3e-2
// in bfloat16 (tests/test_cuda_iqn.cpp's, which runs the kernels on the GPU).
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "grid.h"
#include "iqn_ref.h"
#include "rel_errors.h"

#include "online_body.h"

// Where the kernel's loop ends: each warp's columns of dbm and dw_z as its store_colsums writes
// them (a lane per column), and each thread's db_z and loss terms (the lanes with t = 0 hold
// them, the others 0).
std::vector<double> gRows, gBz, gLoss;
void sim_record(const float (&acc)[2][4], double loss, double bz) {
    using namespace fh::cuda::iqn;
    const size_t thread = blockIdx.x * blockDim.x + threadIdx.x;
    store_colsums(gRows.data() + thread / 32 * (2 * kHq), acc);
    gBz[thread] = bz;
    gLoss[thread] = loss;
}

using namespace fh::cuda::iqn;

struct Out {
    std::vector<float> tau, cos, phi, m, dh, zm;
    std::vector<uint16_t> m16, dh16;
    std::vector<double> sums;  // [dbm | dw_z | db_z | loss], the warps' rows added
};

// One instance on `blocks` blocks of `nwarps` warps and `smem` bytes of shared memory; WG: h on
// the warpgroup products (TF32), the block's warps a warpgroup at a time.
template <int NC, bool B16, bool WG = false>
Out run(OnlineArgs a, int blocks, int nwarps, size_t smem) {
    using E = std::conditional_t<B16, __nv_bfloat16, float>;
    const size_t R = (size_t)a.B * a.N;
    Out o;
    o.tau.assign(R, NAN);
    o.cos.assign(R * kC, NAN);
    o.phi.assign(R * kHq, NAN);
    o.m.assign(R * kHq, NAN);
    o.dh.assign(R * kHq, NAN);
    o.zm.assign(a.B, NAN);
    o.m16.assign(R * kHq, 0xffff);
    o.dh16.assign(R * kHq, 0xffff);
    a.tau = o.tau.data();
    a.cos = o.cos.data();
    a.phi = o.phi.data();
    a.m = o.m.data();
    a.dh = o.dh.data();
    a.z_mean = o.zm.data();
    if (B16) {
        a.m16 = reinterpret_cast<__nv_bfloat16 *>(o.m16.data());
        a.dh16 = reinterpret_cast<__nv_bfloat16 *>(o.dh16.data());
    }
    gRows.assign((size_t)blocks * nwarps * 2 * kHq, 0.0);
    gBz.assign((size_t)blocks * nwarps * 32, 0.0);
    gLoss.assign(gBz.size(), 0.0);
    run_grid(
        blocks, nwarps, smem, [&] { stage_for<WG, E>(gSmem, a.Wphi, a.bphi, a.Wm, a.bm, a.wz); },
        [&] { k_iqn_online<NC, NC, B16, WG>(a); }, WG ? 4 : 1);
    o.sums.assign(2 * kHq + 2, 0.0);
    for (size_t r = 0; r < gRows.size(); ++r) o.sums[r % (2 * kHq)] += gRows[r];
    for (size_t k = 0; k < gBz.size(); ++k) {
        o.sums[2 * kHq] += gBz[k];
        o.sums[2 * kHq + 1] += gLoss[k];
    }
    return o;
}

double huber(double u, double k) {
    return std::fabs(u) <= k ? 0.5 * u * u : k * (std::fabs(u) - 0.5 * k);
}
double dhuber(double u, double k) { return std::fabs(u) <= k ? u : (u > 0 ? k : -k); }

int main() {
    const int Hq = kHq, C = kC, Nt = 8, B = 37;
    bool ok = true;
    for (int N : {8, 4, 16, 2, 1}) {
        const size_t R = (size_t)B * N;
        std::mt19937 rng(5 + N);
        const IqnNet net(B, rng);
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<float> zt((size_t)B * Nt), r(B);
        for (auto &v : zt) v = nd(rng);
        for (auto &v : r) v = 0.5f * nd(rng);
        std::vector<float> done(B);
        for (auto &d : done) d = rng() % 5 == 0 ? 1.0f : 0.0f;
        uint64_t step = 4;
        OnlineArgs a{};
        a.psi = net.psi.data();
        a.Wphi = net.Wphi.data();
        a.bphi = net.bphi.data();
        a.Wm = net.Wm.data();
        a.bm = net.bm.data();
        a.wz = net.wz.data();
        a.bz = net.bz.data();
        a.zt = zt.data();
        a.r = r.data();
        a.done = done.data();
        a.gamma = 0.99f;
        a.kappa = 1.0f;
        a.scale = 1.0 / (B * Nt);
        a.seed = 987;
        a.step = &step;
        a.B = B;
        a.N = N;
        a.Nt = Nt;
        for (const int mode : {0, 1, 2}) {  // TF32, TF32 on the warpgroup products, bfloat16
            const bool b16 = mode == 2, wg = mode == 1;
            const size_t smem = b16 ? kSmemBytes<__nv_bfloat16>
                                : wg ? kSmemBytesWg : kSmemBytes<float>;
            const Out ref = b16 ? (N == 8 ? run<8, true>(a, 3, kWarps, smem)
                                          : run<0, true>(a, 3, kWarps, smem))
                            : wg ? (N == 8 ? run<8, false, true>(a, 3, kWarps, smem)
                                           : run<0, false, true>(a, 3, kWarps, smem))
                                 : (N == 8 ? run<8, false>(a, 3, kWarps, smem)
                                           : run<0, false>(a, 3, kWarps, smem));
            // The float64 evaluation, for the rows' τ as the kernel drew them.
            RelErrors err({"cos", "phi", "m", "dh", "z_mean", "dbm", "dw_z", "db_z", "loss"});
            auto add = [&](int k, double got, double want) { err.add(k, got, want); };
            std::vector<double> zmr(B, 0.0), dbm(Hq, 0.0), dwz(Hq, 0.0);
            double dbz = 0, loss = 0;
            for (size_t row = 0; row < R; ++row) {
                const size_t i = row / N;
                const double tau = ref.tau[row];
                const IqnNet::Row f = net.forward(i, tau);
                const std::vector<double> &pre = f.pre;
                const double z = f.z;
                for (int k = 0; k < C; ++k) {
                    const size_t at = row * C + k;
                    add(0, ref.cos[at], f.cos[k]);
                }
                for (int j = 0; j < Hq; ++j) {
                    add(1, ref.phi[row * Hq + j], f.phi[j]);
                    add(2, b16 ? bf16_to_f(ref.m16[row * Hq + j]) : ref.m[row * Hq + j], f.m[j]);
                }
                zmr[i] += z / N;
                double ds = 0;
                for (int k = 0; k < Nt; ++k) {
                    const double u = r[i] + 0.99 * (1.0 - done[i]) * zt[i * Nt + k] - z;
                    const double w = std::fabs(tau - (u < 0 ? 1.0 : 0.0));
                    loss += w * huber(u, 1.0);
                    ds += w * dhuber(u, 1.0);
                }
                const double dz = -ds * a.scale;
                dbz += dz;
                for (int j = 0; j < Hq; ++j) {
                    const double sg = 1.0 / (1.0 + std::exp(-pre[j]));
                    const double v = dz * net.wz[j] * sg * (1.0 + pre[j] * (1.0 - sg));
                    add(3, b16 ? bf16_to_f(ref.dh16[row * Hq + j]) : ref.dh[row * Hq + j], v);
                    dbm[j] += v;
                    dwz[j] += dz * pre[j] * sg;
                }
            }
            for (int i = 0; i < B; ++i) add(4, ref.zm[i], zmr[i]);
            for (int j = 0; j < Hq; ++j) {
                add(5, ref.sums[j], dbm[j]);
                add(6, ref.sums[Hq + j], dwz[j]);
            }
            add(7, ref.sums[2 * Hq], dbz);
            add(8, ref.sums[2 * Hq + 1], loss);
            char label[64];
            snprintf(label, sizeof label, "N=%2d %s recompute vs float64", N,
                     b16 ? "bf16" : wg ? "tf32 wgmma" : "tf32");
            ok &= err.report(label, b16 ? 3e-2 : 5e-3);
        }
    }
    return ok ? 0 : 1;
}
