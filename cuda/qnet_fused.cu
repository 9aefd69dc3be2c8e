// ddqn's forward-only Q passes (SPEC §4, §5.3) as one kernel on Hopper's warpgroup tensor cores
// (TF32, wgmma m64n128k8): per tile of 64 rows, h1 = SiLU(x W1ᵀ + b1), h2 = SiLU(h1 W2ᵀ + b2), and
// per branch g_b = SiLU(h2 V_bᵀ + c_b) with the heads q_b = clamp(g_b U_bᵀ + e_b, ±q_clip) in the
// epilogue. Only q (and, for the target pass, h2 of the x̃' rows, which the confidence target
// reads) leaves the SM.
//
// Why: layer by layer (linear_silu.cu) each pass wrote h1 and h2 to memory and read them back,
// 2 × 32 MiB each way for the target pass at B = 16384, and every layer paid a launch, a ramp
// and a tail of its own; the three kernels of a pass ran at about 100 TFLOP/s.
//
// Tiling. One block per SM (persistent: tiles blockIdx.x, + gridDim.x, ...), two warpgroups.
// Both compute the same 64 rows: warpgroup w the output columns 128w .. 128w + 127 of a trunk
// layer, or branch 2p + w of the branch pass p (64 accumulators a thread either way). The
// activations stay in shared memory in the layout the products read (wgmma_tf32.cuh: K-major
// chunks of 32 columns, 128-byte swizzle): two regions of 64 rows × 256 columns (64 KiB each).
// A tile of parity p reads x̃ from region p, writes h1 to region 1 − p and h2 to region p; so
// the next tile's x̃ is copied into region 1 − p as soon as h1 is dead (after the second layer's
// products), while the branch passes run. The weights stream through a ring of three stages of
// 256 rows × 32 columns (32 KiB each, cp.async, two chunks ahead of the products) as one endless
// sequence, D/32 chunks of W1, 8 of W2, then 8 per branch pass of V_cat, tile after tile, so the
// ring never drains at a layer's or a tile's edge. 2 × 64 + 3 × 32 KiB (+ 1 KiB of alignment)
// is 225 KiB, Hopper's most for one block.
//
// Bitwise the layer-by-layer kernels' results: every output element is the same sequence of
// m64n128k8 products over the same k order on the same TF32 operands (W's packed copies, x̃
// rounded here with cvt.rna, h1 and h2 stored rounded), and the epilogues are theirs: the float
// expressions of bias + SiLU, and the heads as float32 dot products over the unrounded g, each
// thread's 32 columns in ascending order, then a butterfly over the quad.
#include "qnet_fused.hpp"

#include <algorithm>
#include <mutex>

#include "common.hpp"
#include "device_math.cuh"
#include "mma_tf32.cuh"
#include "wgmma_tf32.cuh"

namespace fh::cuda {

namespace {

constexpr int kRows = 64, kWidth = 256, kBK = 32, kStages = 3, kThreadsQ = 256;
constexpr int kChunkBytes = kRows * 128;                  // 64 rows × 32 floats: 8 KiB
constexpr int kRegionBytes = kWidth / kBK * kChunkBytes;  // 64 rows × 256 floats: 64 KiB
constexpr int kStageBytes = kWidth * 128;                 // 256 rows × 32 floats: 32 KiB
constexpr int kSmemBytes = 2 * kRegionBytes + kStages * kStageBytes + 1024;
static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on Hopper");
constexpr int kMaxA = 8;  // actions per branch: the heads' registers

#ifdef FH_HAVE_WGMMA
using namespace wgmma;

// A tile's chunks: nk1 of W1, 8 of W2, then 8 per branch pass (P passes of two branches).
struct Seq {
    int nk1, P, T;
};

// Weight chunk ci of the sequence into a stage: 256 rows of the layer's matrix, columns
// 32·kc .. 32·kc + 31. Rows past the branches (an odd NB's last pass) repeat the last one.
__device__ __forceinline__ void load_weights(uint32_t stage, const QFusedArgs &a, const Seq &sq,
                                             int ci) {
    const float *src = a.Vcat;
    int ld = kWidth, row0 = 0, rows = kWidth, kc = ci;
    if (ci < sq.nk1) {
        src = a.W1t;
        ld = a.D;
    } else if (ci < sq.nk1 + 8) {
        src = a.W2t;
        kc = ci - sq.nk1;
    } else {
        const int c = ci - sq.nk1 - 8;
        row0 = (c / 8) * kWidth;
        rows = a.NB * 128;
        kc = c % 8;
    }
#pragma unroll
    for (int i = 0; i < kWidth * 8 / kThreadsQ; ++i) {
        const int e = threadIdx.x + i * kThreadsQ, r = e >> 3, c = e & 7;
        const int gr = min(row0 + r, rows - 1);
        cp_async16(stage + sw128(r, c), src + (size_t)gr * ld + kc * kBK + 4 * c);
    }
}

// x̃'s rows m0 .. m0 + 63 into a region (rows past M repeat the last one; nothing is stored for
// them), and the same thread's copies rounded in place to TF32 once they landed.
__device__ __forceinline__ void load_x(uint32_t region, const QFusedArgs &a, int m0) {
    const int n = a.D / kBK * kRows * 8;
    for (int e = threadIdx.x; e < n; e += kThreadsQ) {
        const int kc = e / (kRows * 8), rem = e - kc * kRows * 8, r = rem >> 3, c = rem & 7;
        const int gr = min(m0 + r, a.M - 1);
        cp_async16(region + kc * kChunkBytes + sw128(r, c),
                   a.x + (size_t)gr * a.D + kc * kBK + 4 * c);
    }
}
__device__ __forceinline__ void round_x(uint32_t region, int D) {
    const int n = D / kBK * kRows * 8;
    for (int e = threadIdx.x; e < n; e += kThreadsQ) {
        const int kc = e / (kRows * 8), rem = e - kc * kRows * 8;
        const uint32_t s = region + kc * kChunkBytes + sw128(rem >> 3, rem & 7);
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(s));
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(s),
                     "f"(mma::stored<false>(v.x)), "f"(mma::stored<false>(v.y)),
                     "f"(mma::stored<false>(v.z)), "f"(mma::stored<false>(v.w))
                     : "memory");
    }
}

// The thread's place in its warpgroup's accumulators (wgmma_tf32.cuh): rows r and r + 8,
// columns 8j + t2, 8j + t2 + 1.
struct Frag {
    int r, t2, lane;
};
__device__ __forceinline__ Frag frag() {
    const int lane = threadIdx.x & 31, v = (threadIdx.x >> 5) & 3;
    return Frag{16 * v + (lane >> 2), 2 * (lane & 3), lane};
}

// A trunk layer's epilogue: tf32(SiLU(d + bias)) into region `out` (the next layer's operand),
// and into h2 [M, 256] at rows ≥ h2_from where h2 is given.
__device__ __forceinline__ void epilogue_trunk(const float (&d)[64], uint32_t out,
                                               const float *__restrict__ bias, int w, int m0,
                                               int M, float *h2, int h2_from) {
    const Frag f = frag();
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int col = 128 * w + 8 * j + f.t2;
        const float2 b = *reinterpret_cast<const float2 *>(bias + col);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = f.r + 8 * h;
            const float a0 = mma::stored<false>(dev_silu(__fadd_rn(d[4 * j + 2 * h], b.x)));
            const float a1 = mma::stored<false>(dev_silu(__fadd_rn(d[4 * j + 2 * h + 1], b.y)));
            const uint32_t at = out + (col >> 5) * kChunkBytes + sw128(r, (col & 31) >> 2) +
                                (col & 3) * 4;
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(a0), "f"(a1)
                         : "memory");
            const int row = m0 + r;
            if (h2 && row >= h2_from && row < M)
                *reinterpret_cast<float2 *>(h2 + (size_t)row * kWidth + col) = make_float2(a0, a1);
        }
    }
}

// Branch b's heads from its accumulators (linear_silu.cu's epilogue_silu<true>, U_b read
// through the cache): each thread's share of z[row][a] = Σ_c g[row][c] U_b[a][c] over its 32
// columns in ascending order, the quad's four shares by a butterfly (the same bits in every
// lane), + e_b and the clamp; lane t writes actions t and t + 4 of its two rows.
__device__ __forceinline__ void epilogue_heads(const float (&d)[64], int b, int m0,
                                               const QFusedArgs &a) {
    const Frag f = frag();
    const float *bias = a.ccat + (size_t)b * 128;
    const float *Ub = a.U + (size_t)b * a.ue_stride, *eb = a.e + (size_t)b * a.ue_stride;
    float zp[kMaxA][2];
#pragma unroll
    for (int k = 0; k < kMaxA; ++k) zp[k][0] = zp[k][1] = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int col = 8 * j + f.t2;
        const float2 bb = *reinterpret_cast<const float2 *>(bias + col);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float g0 = dev_silu(__fadd_rn(d[4 * j + 2 * h], bb.x));
            const float g1 = dev_silu(__fadd_rn(d[4 * j + 2 * h + 1], bb.y));
#pragma unroll
            for (int k = 0; k < kMaxA; ++k)
                if (k < a.A) {
                    const float2 u = __ldg(reinterpret_cast<const float2 *>(Ub + k * 128 + col));
                    zp[k][h] = fmaf(g1, u.y, fmaf(g0, u.x, zp[k][h]));
                }
        }
    }
    float *qb = a.q + (size_t)b * a.M * a.A;
#pragma unroll
    for (int k = 0; k < kMaxA; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float s = zp[k][h];
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            const int row = m0 + f.r + 8 * h;
            if (k < a.A && (k & 3) == (f.lane & 3) && row < a.M) {
                const float z = __fadd_rn(s, __ldg(eb + k));
                qb[(size_t)row * a.A + k] = fminf(fmaxf(z, -a.clip), a.clip);
            }
        }
}
#endif

// grid min(tiles, SMs), kThreadsQ threads, kSmemBytes of dynamic shared memory.
__global__ void __launch_bounds__(kThreadsQ, 1) k_q_fused(QFusedArgs a) {
#ifdef FH_HAVE_WGMMA
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const auto region = [&](int k) { return base + k * kRegionBytes; };
    const uint32_t ring = base + 2 * kRegionBytes;
    const int w = threadIdx.x >> 7;
    Seq sq{a.D / kBK, (a.NB + 1) / 2, 0};
    sq.T = sq.nk1 + 8 + 8 * sq.P;
    const int ntiles = (a.M + kRows - 1) / kRows;
    const int mine = (ntiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    const int total = mine * sq.T;
    // One cp.async group per chunk of the sequence; the first tile's x̃ rides with chunk 0.
    load_x(region(0), a, blockIdx.x * kRows);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
        if (s < total) load_weights(ring + s * kStageBytes, a, sq, s % sq.T);
        cp_async_commit();
    }
    float d[64];
    for (int q = 0; q < total; ++q) {
        const int ti = q / sq.T, ci = q - ti * sq.T, p = ti & 1;
        const int m0 = ((int)blockIdx.x + ti * (int)gridDim.x) * kRows;
        // Chunk q (and with a tile's first chunk its x̃) has landed: this thread's copies, then
        // everyone's after the barrier, which also orders the last epilogue's stores before
        // these products.
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1) : "memory");
        if (ci == 0) round_x(region(p), a.D);
        fence_async_smem();
        __syncthreads();
        int layer, kc;
        if (ci < sq.nk1) {
            layer = 0;
            kc = ci;
        } else if (ci < sq.nk1 + 8) {
            layer = 1;
            kc = ci - sq.nk1;
        } else {
            layer = 2 + (ci - sq.nk1 - 8) / 8;
            kc = (ci - sq.nk1 - 8) % 8;
        }
        const uint32_t in = layer == 1 ? region(p ^ 1) : region(p);
        const int branch = 2 * (layer - 2) + w;
        const bool active = layer < 2 || branch < a.NB;
        if (kc == 0) {
#pragma unroll
            for (int j = 0; j < 64; ++j) d[j] = 0.0f;
        }
        if (active) {
            chunk_k32(d, sw128_desc(in + kc * kChunkBytes),
                      sw128_desc(ring + (q % kStages) * kStageBytes + w * 128 * 128));
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        }
        // Both warpgroups are done with the stage (and, after the second layer, with h1):
        // the stage takes chunk q + kStages, and h1's region the next tile's x̃.
        __syncthreads();
        if (q + kStages < total) load_weights(ring + (q % kStages) * kStageBytes, a, sq, (q + kStages) % sq.T);
        if (layer == 1 && kc == 7 && ti + 1 < mine)
            load_x(region(p ^ 1), a, m0 + (int)gridDim.x * kRows);
        cp_async_commit();
        if (kc == (layer == 0 ? sq.nk1 - 1 : 7)) {
            if (layer == 0)
                epilogue_trunk(d, region(p ^ 1), a.b1, w, m0, a.M, nullptr, 0);
            else if (layer == 1)
                epilogue_trunk(d, region(p), a.b2, w, m0, a.M, a.h2, a.h2_from);
            else if (active)
                epilogue_heads(d, branch, m0, a);
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

std::mutex g_prepare_mutex;
bool g_prepared[64];

void prepare() {
    int dev = 0;
    FH_CUDA(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(g_prepare_mutex);
    if (dev >= 0 && dev < 64 && g_prepared[dev]) return;
    FH_CUDA(cudaFuncSetAttribute((const void *)k_q_fused,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    if (dev >= 0 && dev < 64) g_prepared[dev] = true;
}

}  // namespace

bool q_fused_fits(const QFusedArgs &a) {
    const auto al = [](const void *p, uintptr_t n) { return (uintptr_t)p % n == 0; };
    return a.H == kWidth && a.HB == 128 && a.M > 0 && a.D >= kBK && a.D <= kWidth && a.D % kBK == 0 && a.NB >= 1 && a.A >= 1 &&
           a.A <= kMaxA && a.x && a.W1t && a.W2t && a.Vcat && a.b1 && a.b2 && a.ccat && a.U &&
           a.e && a.q && al(a.x, 16) && al(a.W1t, 16) && al(a.W2t, 16) && al(a.Vcat, 16) &&
           al(a.b1, 8) && al(a.b2, 8) && al(a.ccat, 8) && al(a.U, 8) && a.ue_stride % 2 == 0 &&
           al(a.h2, 8);
}

bool q_forward_fused(const QFusedArgs &a, cudaStream_t s) {
    if (!q_fused_fits(a)) return false;
    prepare();
    const int tiles = (a.M + kRows - 1) / kRows;
    k_q_fused<<<std::min(tiles, sm_count()), kThreadsQ, kSmemBytes, s>>>(a);
    FH_LAUNCHED("k_q_fused");
    return true;
}

}  // namespace fh::cuda
