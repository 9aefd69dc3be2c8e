// CPU warp emulation of IQN's fused target pass (cuda/iqn_target.cu; run by
// tests/warp_emu/run.sh): on 37 transitions at N' = 8 (compiled in) and 5 (read at run time; a
// transition's rows then straddle warps), TF32 products (mma.sync, and h̄ on the warpgroup
// products) and bfloat16 ones, Z̄ [B, N'] against a
// float64 evaluation of SPEC §4 for the τ' it draws (Philox purpose 3, drawn here too). Exit
// status 1 on an error over its bound: 5e-3 in TF32, 3e-2 in bfloat16.
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "grid.h"
#include "iqn_ref.h"

#include "target_body.h"

using namespace fh::cuda::iqn;

// WG: h̄ on the warpgroup products (TF32), the block's warps a warpgroup at a time.
template <int NTC, class E, bool WG = false>
std::vector<float> run(const TargetArgs &a0) {
    TargetArgs a = a0;
    std::vector<float> zt((size_t)a.B * a.Nt, NAN);
    a.zt = zt.data();
    const int blocks = (int)(((size_t)a.B * a.Nt + kRowsPerTile - 1) / kRowsPerTile);
    run_grid(
        blocks, kWarps, WG ? kSmemBytesWg : kSmemBytes<E>,
        [&] { stage_for<WG, E>(gSmem, a.Wphi, a.bphi, a.Wm, a.bm, a.wz); },
        [&] { k_iqn_target<NTC, E, WG>(a); }, WG ? 4 : 1);
    return zt;
}

int main() {
    const int B = 37;
    bool ok = true;
    for (int Nt : {8, 5}) {
        std::mt19937 rng(17 + Nt);
        const IqnNet net(B, rng);
        uint64_t step = 6;
        TargetArgs a{net.psi.data(), net.Wphi.data(), net.bphi.data(), net.Wm.data(),
                     net.bm.data(), net.wz.data(), net.bz.data(), 321, &step, B, Nt, 3 * B,
                     nullptr, false};
        for (const int mode : {0, 1, 2}) {  // TF32, TF32 on the warpgroup products, bfloat16
            const bool b16 = mode == 2;
            const std::vector<float> zt =
                b16         ? (Nt == 8 ? run<8, __nv_bfloat16>(a) : run<0, __nv_bfloat16>(a))
                : mode == 1 ? (Nt == 8 ? run<8, float, true>(a) : run<0, float, true>(a))
                            : (Nt == 8 ? run<8, float>(a) : run<0, float>(a));
            double e = 0, n = 0;
            for (int i = 0; i < B; ++i)
                for (int k = 0; k < Nt; ++k) {
                    const double tau = fh::uniform24(
                        fh::philox(a.seed, a.row0 + i, k, (uint32_t)step, fh::PURPOSE_IQN_TARGET)
                            .w[0]);
                    const double z = net.forward(i, tau).z;
                    const double g = zt[(size_t)i * Nt + k];
                    e += (g - z) * (g - z);
                    n += z * z;
                }
            const double err = std::sqrt(e / n), bound = b16 ? 3e-2 : 5e-3;
            const bool good = err <= bound;  // false for NaN
            printf("N'=%d %s: zt vs float64 %.2e  %s\n", Nt,
                   b16 ? "bf16" : mode == 1 ? "tf32 wgmma" : "tf32", err, good ? "ok" : "FAILED");
            ok &= good;
        }
    }
    return ok ? 0 : 1;
}
