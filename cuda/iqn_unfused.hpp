// The unfused passes of IQN (SPEC §5.5 step 3): the kernels that strict FP32, widths other than
// the fused kernels' and FOXHUNT_IQN_KERNELS = unfused run between cuBLAS GEMMs (cuda/iqn.cu
// orders them; its file comment lists the pass). Each mirrors src/cpu/iqn.cpp's float
// expressions in its order, double where the CPU uses double; sums in a fixed order, no atomics.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "aux_common.cuh"

namespace fh::cuda::iqn {

// τ = uniform24(philox(seed, c0 + i, n, step, purpose).w[0]) for rows r = i·Nr + n of
// `rows` (c0: this rank's first row, SPEC §9; step read from the device counter) into tau (if
// not null), and cos[r, k] = cos(π k τ) for k < C (evaluated in double, rounded once).
void taucos(uint64_t seed, const uint64_t *step, uint32_t purpose, uint32_t c0, size_t rows,
            int Nr, int C, float *cos, float *tau, cudaStream_t s);
// m[r] = ψ[r / Nr] ⊙ SiLU(φraw[r] + bφ), rows × Hq.
void merge(const float *phi_raw, const float *bphi, const float *psi, float *m, size_t rows,
           int Nr, int Hq, cudaStream_t s);
// Z[r] = SiLU(hraw[r] + bm) · w_z + b_z for `rows` rows of width Hq.
void zrows(const float *hraw, const float *bm, const float *wz, const float *bz, size_t rows,
           int Hq, float *z, cudaStream_t s);

// The quantile Huber head (Dabney et al. 2018) of the online pass, a warp per
// transition: Z_in, z_mean, T_im = r_i + γ(1 − d_i) Z̄_im, the loss terms, dZ_in and
// dhpre = (dZ w_z) ⊙ SiLU'(hraw + bm), with per-block partials of dbm, dw_z, db_z and the loss.
struct HeadArgs {
    const float *hraw;   // [B·N, Hq] online m Wmᵀ (no bias)
    const float *bm, *wz, *bz;
    const float *zt;     // [B, N'] target Z̄
    const float *tau;    // [B, N]
    const float *r, *done;
    float gamma, kappa;
    int B, N, Nt, Hq;
    double scale;        // 1 / (W·B·N'), SPEC §9
    float *z_mean;       // [B]
    float *dh;           // [B·N, Hq] out: dL/d(m Wmᵀ + bm)
    double *partial;     // [blocks, 2·Hq + 2]: dbm | dw_z | db_z | Σ loss terms
    int samples_per_blk;
};

// The head's launch plan for B transitions (blocks of samples_per_blk), its shared memory
// allowed for the kernel.
aux::RowPlan head_plan(int B, int N, int Nt, int Hq);
// Launches the head on plan p (a.samples_per_blk = p.rows_per_blk).
void head(const HeadArgs &a, const aux::RowPlan &p, cudaStream_t s);

// The backward through the merge layer from dm [B·N, Hq]: dφpre in place of φraw (phi),
// dψpre into dpsi [B, Hq], and per block of psiphi_chunks(B) transitions the column sums of
// dbφ and dbψ (partial [chunks, 2·Hq] doubles).
int psiphi_chunks(int B);
void psiphi_bwd(const float *dm, float *phi, const float *bphi, const float *psi,
                const float *psi_pre, const float *bpsi, float *dpsi, int B, int N, int Hq,
                double *partial, cudaStream_t s);

}  // namespace fh::cuda::iqn
