// Kernels of the replay on the CUDA side; replay_device.hpp has the contract of each function.
//
// Determinism: the checks find "the first failing element" with atomicMin on a 64-bit key
// (check index, element index). A minimum does not depend on the order in which threads reach
// it, so the reported element is the same run to run; no atomic touches a value of the step.
#include "replay_device.hpp"

#include <algorithm>

#include "common.hpp"
#include "replay_math.hpp"
#include "launch.cuh"

namespace fh::cuda::replay {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kIndexBits = 48;

int grid_for(uint64_t n) {
    return (int)std::max<uint64_t>(1, std::min<uint64_t>((n + kThreads - 1) / kThreads, 8192));
}

struct CheckList {
    ElementCheck c[kMaxChecks];
    int n;
};

__global__ void k_checks(CheckList list, CheckStatus *st) {
    pdl_enter();
    for (int k = 0; k < list.n; ++k) {
        const unsigned long long base = (unsigned long long)k << kIndexBits;
        // A failure in an earlier check decides the outcome: skip the rest.
        if (*(volatile unsigned long long *)&st->key < base) return;
        const ElementCheck &c = list.c[k];
        for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < c.count;
             i += (uint64_t)gridDim.x * blockDim.x) {
            uint32_t raw;
            if (!element_ok(c, i, raw)) atomicMin(&st->key, base | i);
        }
    }
}

// The failing element's bits, read once the minimum is known.
__global__ void k_check_raw(CheckList list, CheckStatus *st) {
    pdl_enter();
    const unsigned long long key = st->key;
    if (key == kAllPassed) return;
    uint32_t raw = 0;
    element_ok(list.c[key >> kIndexBits], key & ((1ull << kIndexBits) - 1), raw);
    st->raw = raw;
}

__device__ bool failed(const CheckStatus *st) { return st && st->key != kAllPassed; }

// Rows [first_src, first_src + rows) of a field ([rows, row_bytes] at src; null: zeros) into
// slots (first_slot + r) mod K of dst, in units of T.
template <class T>
__global__ void k_copy_rows(uint8_t *dst, const uint8_t *src, uint64_t row_bytes,
                            uint64_t first_src, uint64_t first_slot, uint64_t rows, uint64_t K,
                            const CheckStatus *st) {
    pdl_enter();
    if (failed(st)) return;
    const uint64_t per_row = row_bytes / sizeof(T), total = rows * per_row;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t r = i / per_row, w = i % per_row;
        T *d = reinterpret_cast<T *>(dst + ((first_slot + r) % K) * row_bytes) + w;
        *d = src ? reinterpret_cast<const T *>(src + (first_src + r) * row_bytes)[w] : T(0);
    }
}

__global__ void k_close_episodes(DeviceRing ring, uint64_t first_new, uint64_t n_after,
                                 const CheckStatus *st) {
    pdl_enter();
    if (failed(st)) return;
    const uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= ring.E) return;
    replay_close_episodes(e, first_new, n_after, ring.K, ring.E, ring.field[RF_EPISODE_END],
                          ring.end_slot, ring.open_start);
}

__global__ void k_set_count(uint64_t *n_ins, uint64_t v, const CheckStatus *st) {
    pdl_enter();
    if (!failed(st)) *n_ins = v;
}

__global__ void k_reset(DeviceRing ring) {
    pdl_enter();
    const uint64_t n = (uint64_t)ring.K * ring.E;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        ring.end_slot[i] = kEpisodeOpen;
        if (i < ring.E) ring.open_start[i] = 0;
        if (i == 0) *ring.n_ins = 0;
    }
}

// One warp per transition: every lane computes the draw (cheaper than sharing it), the lanes
// copy the float rows, lane 0 the scalars.
__global__ void k_sample(DeviceRing ring, uint64_t seed, const uint64_t *step, uint32_t row0,
                         uint32_t B, BatchBlock out, ReplayDraw *draws) {
    pdl_enter();
    const uint64_t n_ins = *ring.n_ins;
    const uint32_t i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n_ins == 0 || i >= B) return;
    const ReplayDraw w =
        replay_draw(seed, row0 + i, *step, n_ins, ring.K, ring.E, ring.end_slot);
    const uint64_t t = w.slot * ring.E + w.env, h = w.her_slot * ring.E + w.env;
    const uint32_t O = ring.O, G = ring.G, NB = ring.NB;
    const float *obs = reinterpret_cast<const float *>(ring.field[RF_OBS]);
    const float *next_obs = reinterpret_cast<const float *>(ring.field[RF_NEXT_OBS]);
    for (uint32_t k = lane; k < O; k += 32) {
        out.obs[(size_t)i * O + k] = obs[t * O + k];
        out.next_obs[(size_t)i * O + k] = next_obs[t * O + k];
    }
    if (G > 0) {
        const float *goal = reinterpret_cast<const float *>(ring.field[RF_GOAL]);
        const float *nag = reinterpret_cast<const float *>(ring.field[RF_NAG]);
        for (uint32_t k = lane; k < G; k += 32) {
            out.goal[(size_t)i * G + k] = goal[t * G + k];
            out.nag[(size_t)i * G + k] = nag[t * G + k];
            out.her_goal[(size_t)i * G + k] = nag[h * G + k];
        }
    }
    const int32_t *action = reinterpret_cast<const int32_t *>(ring.field[RF_ACTION]);
    for (uint32_t k = lane; k < NB; k += 32) out.action[(size_t)i * NB + k] = action[t * NB + k];
    if (lane == 0) {
        out.reward[i] = reinterpret_cast<const float *>(ring.field[RF_REWARD])[t];
        out.regime[i] = reinterpret_cast<const int32_t *>(ring.field[RF_REGIME])[t];
        out.done[i] = ring.field[RF_DONE][t];
        if (draws) draws[i] = w;
    }
}

// The tensors of a batch: source, destination and element count, elements of 4 bytes or (done)
// 1 byte; a null source writes zeros.
struct Segments {
    const void *src[9];
    void *dst[9];
    uint64_t count[9];
    int unit[9];
    int n;
};

template <class T>
__device__ void copy_segment(const void *src, void *dst, uint64_t n) {
    const T *x = static_cast<const T *>(src);
    T *y = static_cast<T *>(dst);
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        y[i] = x ? x[i] : T(0);
}

__global__ void k_copy_segments(Segments sg, const CheckStatus *st) {
    pdl_enter();
    if (failed(st)) return;
    for (int k = 0; k < sg.n; ++k) {
        if (sg.unit[k] == 4) copy_segment<uint32_t>(sg.src[k], sg.dst[k], sg.count[k]);
        else copy_segment<uint8_t>(sg.src[k], sg.dst[k], sg.count[k]);
    }
}

void launch_copy_rows(const DeviceRing &ring, int f, const uint8_t *src, uint64_t first_src,
                      uint64_t first_slot, uint64_t rows, const CheckStatus *st,
                      cudaStream_t s) {
    const uint64_t rb = ring.row_bytes[f];
    if (rb % 4 == 0) {
        FH_LAUNCH(k_copy_rows<uint32_t>, grid_for(rows * rb / 4), kThreads, 0, s, ring.field[f],
                  src, rb, first_src, first_slot, rows, ring.K, st);
    } else {
        FH_LAUNCH(k_copy_rows<uint8_t>, grid_for(rows * rb), kThreads, 0, s, ring.field[f], src, rb,
                  first_src, first_slot, rows, ring.K, st);
    }
}

void finish_append(const DeviceRing &ring, uint64_t n_before, uint64_t R, const CheckStatus *st,
                   cudaStream_t s) {
    FH_LAUNCH(k_close_episodes, (ring.E + 127) / 128, 128, 0, s, ring, n_before, n_before + R, st);
    FH_LAUNCH(k_set_count, 1, 1, 0, s, ring.n_ins, n_before + R, st);
}

}  // namespace

size_t ring_bytes(const Dims &d) {
    auto up = [](size_t n) { return (n + 255) / 256 * 256; };
    size_t n = 0;
    for (int f = 0; f < RF_COUNT; ++f) n += up((size_t)d.K * d.E * row_field_bytes(d, f));
    return n + up((size_t)d.K * d.E * sizeof(uint32_t)) + up(d.E * sizeof(uint64_t)) + 256;
}

DeviceRing ring_at(const Dims &d, void *base) {
    DeviceRing r{};
    r.K = d.K;
    r.E = d.E;
    r.O = d.O;
    r.G = d.G;
    r.NB = d.NB;
    uint8_t *at = static_cast<uint8_t *>(base);
    auto take = [&](size_t n) {
        uint8_t *p = at;
        at += (n + 255) / 256 * 256;
        return p;
    };
    for (int f = 0; f < RF_COUNT; ++f) {
        r.row_bytes[f] = (uint32_t)(d.E * row_field_bytes(d, f));
        r.field[f] = r.row_bytes[f] ? take((size_t)d.K * r.row_bytes[f]) : nullptr;
    }
    r.end_slot = reinterpret_cast<uint32_t *>(take((size_t)d.K * d.E * sizeof(uint32_t)));
    r.open_start = reinterpret_cast<uint64_t *>(take(d.E * sizeof(uint64_t)));
    r.n_ins = reinterpret_cast<uint64_t *>(take(sizeof(uint64_t)));
    return r;
}

void ring_reset(const DeviceRing &ring, cudaStream_t s) {
    FH_LAUNCH(k_reset, grid_for((uint64_t)ring.K * ring.E), kThreads, 0, s, ring);
}

void enqueue_checks(const std::vector<ElementCheck> &checks, CheckStatus *status,
                    cudaStream_t s) {
    if (checks.size() > (size_t)kMaxChecks)
        fail(FH_ERR_INTERNAL, "%zu element checks, at most %d", checks.size(), kMaxChecks);
    CheckList list{};
    uint64_t most = 1;
    for (size_t k = 0; k < checks.size(); ++k) {
        if (checks[k].count >> kIndexBits)
            fail(FH_ERR_BUFFER_SIZE, "%s has %llu elements, more than 2^48", checks[k].name,
                 (unsigned long long)checks[k].count);
        list.c[k] = checks[k];
        list.c[k].name = list.c[k].name2 = nullptr;  // host strings stay on the host
        most = std::max(most, checks[k].count);
    }
    list.n = (int)checks.size();
    FH_CUDA(cudaMemsetAsync(status, 0xff, sizeof(CheckStatus), s));
    FH_LAUNCH(k_checks, grid_for(most), kThreads, 0, s, list, status);
    FH_LAUNCH(k_check_raw, 1, 1, 0, s, list, status);
}

void throw_check_status(const CheckStatus &st, const std::vector<ElementCheck> &checks) {
    if (st.key == kAllPassed) return;
    const uint64_t k = st.key >> kIndexBits, i = st.key & ((1ull << kIndexBits) - 1);
    if (k >= checks.size())
        fail(FH_ERR_INTERNAL, "device check status names check %llu of %zu",
             (unsigned long long)k, checks.size());
    fail_element(checks[k], i, st.raw);
}

void enqueue_append_device(const DeviceRing &ring, const fh_replay_rows &rows, uint64_t n_before,
                           const CheckStatus *status, cudaStream_t s) {
    const uint64_t R = rows.num_rows, keep = std::min<uint64_t>(R, ring.K);
    for (int f = 0; f < RF_COUNT; ++f)
        if (ring.row_bytes[f])
            launch_copy_rows(ring, f, static_cast<const uint8_t *>(row_field(rows, f)), R - keep,
                             (n_before + R - keep) % ring.K, keep, status, s);
    finish_append(ring, n_before, R, status, s);
}

void enqueue_append_host(const DeviceRing &ring, const fh_replay_rows &rows, uint64_t n_before,
                         cudaStream_t s) {
    const uint64_t R = rows.num_rows, K = ring.K, keep = std::min<uint64_t>(R, K);
    for (uint64_t k = R - keep; k < R;) {  // contiguous runs of slots up to the ring's end
        const uint64_t slot = (n_before + k) % K, run = std::min(R - k, K - slot);
        for (int f = 0; f < RF_COUNT; ++f) {
            const uint64_t rb = ring.row_bytes[f];
            if (!rb) continue;
            const uint8_t *src = static_cast<const uint8_t *>(row_field(rows, f));
            if (src)
                FH_CUDA(cudaMemcpyAsync(ring.field[f] + slot * rb, src + k * rb, run * rb,
                                        cudaMemcpyHostToDevice, s));
            else
                FH_CUDA(cudaMemsetAsync(ring.field[f] + slot * rb, 0, run * rb, s));
        }
        k += run;
    }
    finish_append(ring, n_before, R, nullptr, s);
}

void enqueue_sample(const DeviceRing &ring, uint64_t seed, const uint64_t *step, uint32_t row0,
                    uint32_t B, const BatchBlock &out, ReplayDraw *draws, cudaStream_t s) {
    constexpr int kWarps = 8;
    FH_LAUNCH(k_sample, (B + kWarps - 1) / kWarps, 32 * kWarps, 0, s, ring, seed, step, row0, B,
              out, draws);
}

void enqueue_batch_copy(const Dims &d, const fh_batch &b, const CheckStatus *status,
                        const BatchBlock &out, cudaStream_t s) {
    const uint64_t B = d.B;
    Segments sg{};
    auto add = [&](const void *src, void *dst, uint64_t count, int unit) {
        sg.src[sg.n] = src;
        sg.dst[sg.n] = dst;
        sg.count[sg.n] = count;
        sg.unit[sg.n++] = unit;
    };
    add(b.obs, out.obs, B * d.O, 4);
    add(b.next_obs, out.next_obs, B * d.O, 4);
    add(b.reward, out.reward, B, 4);
    if (d.G > 0) {
        add(b.goal, out.goal, B * d.G, 4);
        add(b.next_achieved_goal, out.nag, B * d.G, 4);
        add(b.her_goal, out.her_goal, B * d.G, 4);
    }
    add(b.action, out.action, B * d.NB, 4);
    add(b.regime, out.regime, B, 4);  // NULL: zeros (SPEC §2)
    add(b.done, out.done, B, 1);
    FH_LAUNCH(k_copy_segments, grid_for(B * d.O), kThreads, 0, s, sg, status);
}

}  // namespace fh::cuda::replay
