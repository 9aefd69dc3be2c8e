// The kernels of IQN's unfused passes (iqn_unfused.hpp) and their launches.
#include "iqn_unfused.hpp"

#include <algorithm>

#include "launch.cuh"
#include "nn.cuh"
#include "philox.hpp"

namespace fh::cuda::iqn {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kTauRows = 32;          // rows of cosine features per block
constexpr int kHeadSamplesPerWarp = 4;
constexpr int kBwdSamples = 32;       // transitions per block of the ψ/φ backward
constexpr int kTx = 32, kTy = 8;

// τ = uniform24(philox(seed, c0 + i, n, step, purpose).w[0]) for rows i·Nr + n (c0: this
// rank's first row, SPEC §9), and the features cos(π k τ) evaluated in double and rounded once
// (as the CPU: (float)cos(kPi·k·τ)).
__global__ void k_taucos(uint64_t seed, const uint64_t *step, uint32_t purpose, uint32_t c0,
                         size_t rows, int Nr, int C, float *cosf_out, float *tau_out) {
    pdl_enter();
    __shared__ float tau_s[kTauRows];
    const size_t row0 = (size_t)blockIdx.x * kTauRows;
    const uint32_t st = (uint32_t)*step;
    for (int rr = threadIdx.x; rr < kTauRows; rr += blockDim.x) {
        const size_t row = row0 + rr;
        float t = 0.0f;
        if (row < rows) {
            const uint32_t i = c0 + (uint32_t)(row / Nr), n = (uint32_t)(row % Nr);
            t = uniform24(philox(seed, i, n, st, purpose).w[0]);
            if (tau_out) tau_out[row] = t;
        }
        tau_s[rr] = t;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTauRows * C; idx += blockDim.x) {
        const int rr = idx / C, k = idx - rr * C;
        const size_t row = row0 + rr;
        if (row < rows)
            cosf_out[row * C + k] = (float)cos(kPi * (double)k * (double)tau_s[rr]);
    }
}

// m[r] = ψ[r / Nr] ⊙ SiLU(φraw[r] + bφ). grid (row chunks, column tiles), block (32, 8).
__global__ void k_merge(const float *__restrict__ phi_raw, const float *__restrict__ bphi,
                        const float *__restrict__ psi, float *__restrict__ m, size_t rows, int Nr,
                        int Hq) {
    pdl_enter();
    const int j = blockIdx.y * kTx + threadIdx.x;
    if (j >= Hq) return;
    const size_t r0 = (size_t)blockIdx.x * aux::kColRows, r1 = min(rows, r0 + aux::kColRows);
    const float b = bphi[j];
    for (size_t r = r0 + threadIdx.y; r < r1; r += kTy) {
        const size_t i = r / Nr;
        const float phi = dev_silu(__fadd_rn(phi_raw[r * Hq + j], b));
        m[r * Hq + j] = __fmul_rn(psi[i * Hq + j], phi);
    }
}

// Z[r] = SiLU(hraw[r] + bm) · w_z + b_z, one warp per row.
__global__ void k_zrows(const float *__restrict__ hraw, const float *__restrict__ bm,
                        const float *__restrict__ wz, const float *__restrict__ bz, size_t rows,
                        int Hq, float *__restrict__ z) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const size_t nwarps = (size_t)gridDim.x * (blockDim.x >> 5);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
         r += nwarps) {
        const float *h = hraw + r * Hq;
        float s = 0.0f;
        for (int j = lane; j < Hq; j += 32) s = fmaf(dev_silu(__fadd_rn(h[j], bm[j])), wz[j], s);
        s = warp_sum(s);
        if (lane == 0) z[r] = __fadd_rn(s, *bz);
    }
}

// One warp per transition i. Shared memory: [warps][2·Hq + 2] doubles, then per warp
// Z_in [N], T_im [N'], dZ_in [N] floats.
__global__ void k_iqn_head(HeadArgs a) {
    pdl_enter();
    extern __shared__ double acc_all[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int Hq = a.Hq, N = a.N, Nt = a.Nt, W = 2 * Hq + 2;
    double *acc = acc_all + (size_t)warp * W;
    float *zs = reinterpret_cast<float *>(acc_all + (size_t)nw * W) + (size_t)warp * (2 * N + Nt);
    float *tg = zs + N, *dz = tg + Nt;
    for (int c = lane; c < W; c += 32) acc[c] = 0.0;
    __syncwarp();
    const float bz = *a.bz;

    const int i0 = blockIdx.x * a.samples_per_blk, i1 = min(a.B, i0 + a.samples_per_blk);
    for (int i = i0 + warp; i < i1; i += nw) {
        // Z_in = SiLU(h + bm)·w_z + b_z
        for (int n = 0; n < N; ++n) {
            const float *h = a.hraw + ((size_t)i * N + n) * Hq;
            float s = 0.0f;
            for (int j = lane; j < Hq; j += 32)
                s = fmaf(dev_silu(__fadd_rn(h[j], a.bm[j])), a.wz[j], s);
            s = warp_sum(s);
            if (lane == 0) zs[n] = __fadd_rn(s, bz);
        }
        // T_im = r + (γ (1 − d)) Z̄_im, as the CPU writes it.
        const float ri = a.r[i], disc = __fmul_rn(a.gamma, __fadd_rn(1.0f, -a.done[i]));
        for (int m = lane; m < Nt; m += 32)
            tg[m] = __fadd_rn(ri, __fmul_rn(disc, a.zt[(size_t)i * Nt + m]));
        __syncwarp();
        // Loss terms and dZ_in = −(Σ_m ρ'(u)) / (W B N'), sums over m in order in double.
        double lsum = 0.0;
        for (int n = lane; n < N; n += 32) {
            const float t = a.tau[(size_t)i * N + n], z = zs[n];
            double ls = 0.0, ds = 0.0;
            for (int m = 0; m < Nt; ++m) {
                const float u = __fadd_rn(tg[m], -z);
                const float w = fabsf(__fadd_rn(t, -(u < 0.0f ? 1.0f : 0.0f)));
                ls += (double)__fdiv_rn(__fmul_rn(w, dev_huber(u, a.kappa)), a.kappa);
                ds += (double)__fdiv_rn(__fmul_rn(w, dev_dhuber(u, a.kappa)), a.kappa);
            }
            dz[n] = (float)(-ds * a.scale);
            lsum += ls;
        }
        lsum = warp_sum(lsum);
        if (lane == 0) {
            double zsum = 0.0;
            for (int n = 0; n < N; ++n) zsum += (double)zs[n];
            a.z_mean[i] = (float)(zsum / N);
            acc[2 * Hq + 1] += lsum;
        }
        __syncwarp();
        // dhpre = (dZ w_z) ⊙ SiLU'(h + bm); dw_z += dZ SiLU(h + bm); dbm += dhpre; db_z += dZ.
        for (int n = 0; n < N; ++n) {
            const float dZ = dz[n];
            const size_t row = (size_t)i * N + n;
            const float *h = a.hraw + row * Hq;
            float *dh = a.dh + row * Hq;
            for (int j = lane; j < Hq; j += 32) {
                const float pre = __fadd_rn(h[j], a.bm[j]);
                const float sg = dev_sigmoid(pre);
                const float v = __fmul_rn(__fmul_rn(dZ, a.wz[j]), dev_dsilu_s(pre, sg));
                dh[j] = v;
                acc[j] += (double)v;
                acc[Hq + j] += (double)dZ * (double)__fmul_rn(pre, sg);
            }
            if (lane == 0) acc[2 * Hq] += (double)dZ;
        }
        __syncwarp();
    }
    aux::flush_row_acc(acc_all, W, a.partial + (size_t)blockIdx.x * W);
}

// dφpre and dψpre (in place of φraw, and into dpsi) with the column-sum partials of dbφ and dbψ:
//   dφpre_inj = (dm_inj ψ_ij) SiLU'(φpre_inj);  dψpre_ij = (float)(Σ_n dm_inj φ_inj) SiLU'(ψpre_ij)
// (ψpre = psi_pre + bpsi: bias_silu leaves the bias out of psi_pre)
// grid (transition chunks, column tiles), block (32, 8); partial [chunks, 2·Hq] doubles.
__global__ void k_psiphi_bwd(const float *__restrict__ dm, float *phi,
                             const float *__restrict__ bphi, const float *__restrict__ psi,
                             const float *__restrict__ psi_pre, const float *__restrict__ bpsi,
                             float *__restrict__ dpsi, int B, int N, int Hq, double *partial) {
    pdl_enter();
    __shared__ double sh[2][kTy][kTx + 1];
    const int j = blockIdx.y * kTx + threadIdx.x;
    const int i0 = blockIdx.x * kBwdSamples, i1 = min(B, i0 + kBwdSamples);
    double acc_phi = 0.0, acc_psi = 0.0;
    if (j < Hq) {
        const float b = bphi[j];
        for (int i = i0 + threadIdx.y; i < i1; i += kTy) {
            const float ps = psi[(size_t)i * Hq + j];
            double dps = 0.0;
            // Unrolled so that the loads of several rows are in flight at once (the sums keep
            // their order).
#pragma unroll 8
            for (int n = 0; n < N; ++n) {
                const size_t rj = ((size_t)i * N + n) * Hq + j;
                const float g = dm[rj];
                const float pre = __fadd_rn(phi[rj], b);
                const float sg = dev_sigmoid(pre);
                dps += (double)g * (double)__fmul_rn(pre, sg);
                const float v = __fmul_rn(__fmul_rn(g, ps), dev_dsilu_s(pre, sg));
                phi[rj] = v;
                acc_phi += (double)v;
            }
            const float pp = psi_pre[(size_t)i * Hq + j];
            const float v = __fmul_rn((float)dps, dev_dsilu(__fadd_rn(pp, bpsi[j])));
            dpsi[(size_t)i * Hq + j] = v;
            acc_psi += (double)v;
        }
    }
    sh[0][threadIdx.y][threadIdx.x] = acc_phi;
    sh[1][threadIdx.y][threadIdx.x] = acc_psi;
    __syncthreads();
    if (threadIdx.y == 0 && j < Hq) {
        double sp = 0.0, sq = 0.0;
        for (int y = 0; y < kTy; ++y) {
            sp += sh[0][y][threadIdx.x];
            sq += sh[1][y][threadIdx.x];
        }
        partial[(size_t)blockIdx.x * 2 * Hq + j] = sp;
        partial[(size_t)blockIdx.x * 2 * Hq + Hq + j] = sq;
    }
}

}  // namespace

void taucos(uint64_t seed, const uint64_t *step, uint32_t purpose, uint32_t c0, size_t rows,
            int Nr, int C, float *cos, float *tau, cudaStream_t s) {
    FH_LAUNCH(k_taucos, (unsigned)((rows + kTauRows - 1) / kTauRows), 256, 0, s, seed, step,
              purpose, c0, rows, Nr, C, cos, tau);
}

void merge(const float *phi_raw, const float *bphi, const float *psi, float *m, size_t rows,
           int Nr, int Hq, cudaStream_t s) {
    FH_LAUNCH(k_merge, dim3(aux::col_chunks(rows), (Hq + kTx - 1) / kTx), dim3(kTx, kTy), 0, s,
              phi_raw, bphi, psi, m, rows, Nr, Hq);
}

void zrows(const float *hraw, const float *bm, const float *wz, const float *bz, size_t rows,
           int Hq, float *z, cudaStream_t s) {
    const int blocks = (int)std::min<size_t>((rows + 7) / 8, 8192);
    FH_LAUNCH(k_zrows, blocks, 256, 0, s, hraw, bm, wz, bz, rows, Hq, z);
}

aux::RowPlan head_plan(int B, int N, int Nt, int Hq) {
    const aux::RowPlan p = aux::plan_rows(B, 2 * Hq + 2, kHeadSamplesPerWarp,
                                          (2 * (size_t)N + Nt) * sizeof(float), "IQN head");
    aux::allow_smem((const void *)k_iqn_head, p.smem, "IQN head");
    return p;
}

void head(const HeadArgs &a, const aux::RowPlan &p, cudaStream_t s) {
    FH_LAUNCH(k_iqn_head, p.blocks, p.warps * 32, p.smem, s, a);
}

int psiphi_chunks(int B) { return (B + kBwdSamples - 1) / kBwdSamples; }

void psiphi_bwd(const float *dm, float *phi, const float *bphi, const float *psi,
                const float *psi_pre, const float *bpsi, float *dpsi, int B, int N, int Hq,
                double *partial, cudaStream_t s) {
    FH_LAUNCH(k_psiphi_bwd, dim3(psiphi_chunks(B), (Hq + kTx - 1) / kTx), dim3(kTx, kTy), 0, s,
              dm, phi, bphi, psi, psi_pre, bpsi, dpsi, B, N, Hq, partial);
}

}  // namespace fh::cuda::iqn
