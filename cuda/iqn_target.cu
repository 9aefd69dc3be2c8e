// IQN's target pass (SPEC §4, §5.5 step 3: Z̄(x̃', τ'_im) of the target net) fused on tensor cores,
// for TF32 and BF16 modes at iqn_hidden = 128 and iqn_cos = 64 (TF32 or bfloat16 products:
// TargetArgs::bf16): from ψ̄ = SiLU(x̃' W̄ψᵀ + b̄ψ) [B, 128] (a cuBLAS GEMM before it) one kernel
// draws τ' (Philox purpose 3), forms the cosine features, φ̄ = SiLU(cos W̄φᵀ + b̄φ), m̄ = ψ̄ ⊙ φ̄,
// h̄ = m̄ W̄mᵀ and Z̄ = SiLU(h̄ + b̄m)·w̄_z + b̄_z, and writes only Z̄ [B, N']: no cosine, φ̄, m̄
// or h̄ buffer goes to memory (the unfused pass writes and reads back 64 MiB of each at B = 16384).
// Strict FP32 and other widths keep the unfused pass (iqn.cu).
//
// Tiling: iqn_fused.cuh (tiles of 128 rows, a warp per 16 rows, weights in shared memory, the
// m fragments kept in registers between the two products). Each h̄ half (a quarter on the
// warpgroup products) is folded at once into Z̄'s row dot with w̄_z; a quad sums a row.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "aux_common.cuh"
#include "common.hpp"
#include "error.hpp"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
#include "launch.cuh"

namespace fh::cuda::iqn {

namespace {

// NTC: N' compiled in (kFixedN), or 0 to read it from a. WG (TF32 only): h̄ on the warpgroup
// products (iqn_fused.cuh's SmemWg).
template <int NTC, class E, bool WG>
__global__ void __launch_bounds__(kWarps * 32, 2) k_iqn_target(TargetArgs a) {
    pdl_enter();
    static_assert(!WG || std::is_same_v<E, float>, "the warpgroup products are TF32's");
    extern __shared__ float4 sm4[];
    const auto sw = stage_for<WG, E>(sm4, a.Wphi, a.bphi, a.Wm, a.bm, a.wz);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, tq = lane & 3;
    const uint32_t st = (uint32_t)*a.step;
    const float bz = __ldg(a.bz);
    const int Nt = NTC ? NTC : a.Nt;
    const size_t R = (size_t)a.B * Nt;
    const size_t ntiles = (R + kRowsPerTile - 1) / kRowsPerTile;
    for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const size_t r0 = tile * kRowsPerTile + (size_t)warp * 16 + gi, r1 = r0 + 8;
        // τ'_im (purpose 3); rows index this rank's ψ̄, the draw's c0 is the global row.
        const float t0 = draw_tau(a.seed, a.row0, r0, R, Nt, st, PURPOSE_IQN_TARGET);
        const float t1 = draw_tau(a.seed, a.row0, r1, R, Nt, st, PURPOSE_IQN_TARGET);
        float acc[kHq / 8][4];
        phi_tile(sw, t0, t1, acc, nullptr, nullptr);
        const size_t ii0 = r0 < R ? r0 / Nt : 0, ii1 = r1 < R ? r1 / Nt : 0;
        Frags<E> M;
        merge_tile<float>(sw, acc, a.psi + ii0 * kHq, a.psi + ii1 * kHq, M, nullptr, nullptr,
                          nullptr, nullptr);
        float z0, z1;
        z_rows(sw, M, z0, z1);
        if (tq == 0) {
            if (r0 < R) a.zt[r0] = z0 + bz;
            if (r1 < R) a.zt[r1] = z1 + bz;
        }
    }
}

template <class E, bool WG>
void launch_target(const TargetArgs &a, int blocks, cudaStream_t s) {
    const size_t smem = WG ? kSmemBytesWg : kSmemBytes<E>;
    if (fixed_n(a.Nt))
        FH_LAUNCH((k_iqn_target<kFixedN, E, WG>), blocks, kWarps * 32, smem, s, a);
    else
        FH_LAUNCH((k_iqn_target<0, E, WG>), blocks, kWarps * 32, smem, s, a);
}

}  // namespace

void target_fused(const TargetArgs &a, int blocks, cudaStream_t s) {
    if (a.bf16 && a.wg) fail(FH_ERR_INTERNAL, "IQN target pass: wg set in BF16");
    if (a.bf16)
        launch_target<__nv_bfloat16, false>(a, blocks, s);
    else if (a.wg)
        launch_target<float, true>(a, blocks, s);
    else
        launch_target<float, false>(a, blocks, s);
}

bool target_fused_prepare() {
    for (const void *k : {(const void *)k_iqn_target<0, float, false>,
                          (const void *)k_iqn_target<kFixedN, float, false>})
        aux::allow_smem(k, kSmemBytes<float>, "IQN target pass");
    for (const void *k : {(const void *)k_iqn_target<0, __nv_bfloat16, false>,
                          (const void *)k_iqn_target<kFixedN, __nv_bfloat16, false>})
        aux::allow_smem(k, kSmemBytes<__nv_bfloat16>, "IQN target pass (bfloat16)");
    if (!run_probe((const void *)wg::wgmma_probe_kernel<1>)) return false;
    for (const void *k : {(const void *)k_iqn_target<0, float, true>,
                          (const void *)k_iqn_target<kFixedN, float, true>})
        aux::allow_smem(k, kSmemBytesWg, "IQN target pass (warpgroup products)");
    return true;
}

}  // namespace fh::cuda::iqn
