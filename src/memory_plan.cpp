#include "memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "error.hpp"
#include "iql_paths.hpp"
#include "iqn_paths.hpp"
#include "replay.hpp"
#include "schedule.hpp"

namespace fh {

namespace {

constexpr uint64_t F = sizeof(float), I = sizeof(int32_t), D8 = sizeof(double);

uint64_t persistent_floats(const Layout &L) {
    uint64_t n = 0;
    for (int b = 0; b < NUM_PERSISTENT; ++b) n += L.buf_size[b];
    return n;
}
uint64_t output_floats(const Layout &L) {
    uint64_t n = 0;
    for (int b = NUM_PERSISTENT; b < NUM_BUFS; ++b) n += L.buf_size[b];
    return n;
}

// Bytes of one transition in a replay row (fh_replay_rows' fields).
uint64_t transition_bytes(const Dims &d) {
    uint64_t n = 0;
    for (int f = 0; f < RF_COUNT; ++f) n += row_field_bytes(d, f);
    return n;
}

// src/cpu: CpuBackend, CpuStep, the learners' AuxWork (aux_learners.hpp), HostReplay.
MemoryPlan plan_cpu(const Layout &L) {
    const Dims &d = L.dims;
    const uint64_t B = d.B, D = d.D, H = d.H, NB = d.NB, A = d.A, HB = d.HB;
    MemoryPlan p;
    // State, the Q-net gradient, and the divergence guard's copy of the state.
    p.parameters = (2 * persistent_floats(L) + L.q.total) * F;
    // Created with the pipeline: step outputs and CpuStep's per-row vectors.
    const uint64_t base = output_floats(L) + 4 * B * D + 7 * B + 3 * B * NB;
    // The first step's: dz, dh2_b, effective trunk weights, v of the power iterations, the Q
    // caches over 4B rows (online x~, online x~', target [x~; x~']), then the learners.
    uint64_t first = NB * B * A + NB * B * H + 2 * (H * D + H * H) + (d.sn1 ? D : 0) +
                     (d.sn2 ? H : 0) + 4 * B * (4 * H + 2 + NB * (2 * HB + 2 * A));
    first += 2 * (6 * B * d.Hi + 2 * B) + 2 * (uint64_t)L.iql.total;
    const uint64_t MN = B * d.N, MNt = B * d.Nt, Hq = d.Hq;
    first += 2 * B * Hq + MN * d.C + 5 * MN * Hq + MN + MN + 3 * MN * Hq + B * Hq;  // online
    first += 2 * B * Hq + MNt * d.C + 5 * MNt * Hq + MNt;                          // target
    first += MN + 2 * MNt + L.iqn.total;                                            // τ, T, grad
    const uint64_t MT = B * d.T, dm = d.d, To = d.To;
    first += B * d.O + B * d.G + B * To * dm + (d.G ? B * dm : 0) + 6 * MT * dm + B * dm +
             2 * B * d.hh + B;                                                      // forward
    first += B + B * d.hh + B * dm + 6 * MT * dm + B * To * dm + (d.G ? B * dm : 0) +
             L.attn.total;                                                          // backward
    p.first_step = first * F;
    p.activations = base * F + p.first_step;
    // Two batches, the current one and the next upload's; with a replay one, which the step
    // samples into (allocated by the first step).
    p.batch_staging = (d.K > 0 ? 1 : 2) * B * ((2 * d.O + 3 * d.G + 1) * F + (NB + 1) * I + 1);
    // The replay's ring (K rows of E transitions), its episode table [K, E] of uint32 slots
    // and its per-environment open-episode starts (uint64), allocated at creation.
    const uint64_t KE = (uint64_t)d.K * d.E;
    p.replay = KE * (transition_bytes(d) + sizeof(uint32_t)) + (uint64_t)d.E * sizeof(uint64_t);
    // Locals of td.cpp (dpre of a branch) and cql.cpp (dz, dU, de).
    p.transient = std::max(B * HB, B * A + A * HB + A) * F;
    p.host = p.total() + p.transient;
    return p;
}

// cuda/aux_common: plan_rows() and the arenas' 256-byte offsets.
int row_blocks(uint64_t rows, uint64_t width, int per_warp, uint64_t extra_per_warp) {
    const uint64_t per = width * D8 + extra_per_warp;
    int w = 8;
    while (w > 1 && (uint64_t)w * per > 48u * 1024u) w /= 2;
    return (int)((rows + (uint64_t)w * per_warp - 1) / ((uint64_t)w * per_warp));
}
struct Arena {
    uint64_t size = 0;
    void add(uint64_t bytes) { size = (size + 255) / 256 * 256 + bytes; }
};

}  // namespace

uint64_t attention_head_factored_floats(const Dims &d, const fh_config &c) {
    constexpr uint64_t kWidth = 64, kMaxNa = 32;  // cuda/attention_head.hpp's
    const uint64_t na = (uint64_t)d.td + d.G + 1;
    if (c.math_mode == FH_MATH_STRICT || d.d != kWidth || d.hh != kWidth || na > kMaxNa) return 0;
    return kWidth * (kWidth + na + attention_rhs_cols(d) - kWidth);
}

AttentionBatchCols attention_batch_cols(const Dims &d, const fh_config &c) {
    const uint64_t LR = attention_rhs_cols(d);
    if (attention_head_factored_floats(d, c) > 0) return {LR - d.d, d.hh};
    return {LR, (uint64_t)d.hh + d.d};
}

// cuda/cuda_step.cpp (CudaStep), lanes.cpp, upload.cpp, act.cu, the learners' arenas,
// guard.cu, replay.cu.
MemoryPlan plan_cuda(const fh_config &c, const Layout &L, const AttentionSizes &attn) {
    const Dims &d = L.dims;
    const uint64_t B = d.B, D = d.D, H = d.H, NB = d.NB, A = d.A, HB = d.HB;
    MemoryPlan p;
    const std::vector<ChildDesc> sched = build_schedule(d, c);
    int nlanes = 1;
    for (const ChildDesc &cd : sched) nlanes = std::max(nlanes, cd.num_lanes);
    size_t slot_bytes[kMaxLanes];
    workspace_slot_bytes(c, sched, slot_bytes);  // act() borrows slot 0
    for (size_t b : slot_bytes)
        if (b) p.workspaces += b + bf16_stage_bytes(c);

    // State, the Q-net gradient, the step counter; the guard's copy of the state.
    p.parameters = (2 * persistent_floats(L) + L.q.total) * F + 8;

    auto chunks = [](uint64_t M, uint64_t per) { return std::max<uint64_t>(1, (M + per - 1) / per); };
    const uint64_t colch = chunks(B, 256);  // colsum_chunks
    const uint64_t cols[2] = {D, H};
    uint64_t a = output_floats(L) * F + 17 * F;        // outputs, DevMetrics (17 floats)
    a += (2 * B * D + 3 * B) * F + (B * NB + B) * I;   // HER outputs
    if (c.math_mode == FH_MATH_BF16) a += B * D * F;   // x~ as bfloat16 values (her.cu)
    for (int k = 0; k < 2; ++k)
        if (k == 0 ? d.sn1 : d.sn2) a += (2 * H * cols[k] + cols[k]) * F;
    const uint64_t power_scratch = power_scratch_doubles(d);
    a += power_scratch * D8;                           // sn_row (spectral.cu)
    auto cache = [&](uint64_t M, bool head, bool keep_pre) {
        uint64_t n = 2 * M * H + NB * M * HB + NB * M * A;
        if (keep_pre) n *= 2;
        if (head) n += 2 * M;
        return n * F;
    };
    a += cache(B, false, false) + cache(2 * B, false, false) + cache(B, true, true);
    if (ddqn_branches_packed(d)) a += 2 * packed_branch_floats(d) * F;  // next's and tgt's
    a += B * NB * I + (B * NB + B) * F;                // a*, y, Q̄sa
    a += (B * NB + 2 * NB * B * A + NB * A * HB + NB * A) * F + NB * colch * A * D8;
    a += (NB * B * HB + dh2_floats(d) + 2 * B * H) * F + 3 * B * NB * D8;
    a += (ensemble_blocks(B) + confidence_partial_doubles(d)) * D8;  // the aux tail's partials
    a += 4 * B * F + regime_scratch_doubles(d) * D8;   // aux vectors, regime scratch
    const uint64_t maxN = std::max({D, H, HB, A, (uint64_t)1});
    a += (uint64_t)nlanes * (colch * maxN * D8 + 1024 * D8);
    const uint64_t AC = 4096;                          // kActChunk
    a += cache(AC, false, false) + AC * D * F;
    for (int k = 0; k < 2; ++k)
        if (k == 0 ? d.sn1 : d.sn2) a += H * cols[k] * F;
    a += (H + std::max(D, H) + 2) * F + power_scratch * D8 + AC * NB * A * F + AC * NB * I;

    // IQL (iql.cu).
    Arena iql;
    const uint64_t BH = B * d.Hi, W = 2 * (uint64_t)d.Hi + 2;
    for (int k = 0; k < 4; ++k) iql.add(k == 0 && iql_fused(d, c) ? 0 : 2 * BH * F);  // pre1
    iql.add(2 * (uint64_t)L.iql.total * F);
    // The head's partial rows, or the fused kernel's (one per 128-row tile at most).
    iql.add(2 * std::max<uint64_t>(row_blocks(B, W, 8, 0), chunks(B, 128)) * W * D8);
    iql.add(2 * chunks(B, 128) * d.Hi * D8);
    iql.add(5 * 6 * sizeof(void *));
    // IQN (iqn.cu).
    Arena iqn;
    const uint64_t Hq = d.Hq, Rmax = B * std::max(d.N, d.Nt), Wq = 2 * Hq + 2;
    const IqnPaths ip = iqn_paths(d, c);
    const uint64_t half = ip.bf16_operands ? 2 : 1;  // dhpre stored as bfloat16
    // cos, or (with the fused backward) the dWφ kernel's partials.
    iqn.add(ip.backward ? iqn_dwphi_partial_floats(B * d.N) * F : Rmax * d.C * F);
    iqn.add(ip.bf16_operands ? 0 : Rmax * Hq * F);     // φ (BF16's dφpre shares m's buffer)
    // m; hraw unless every pass is fused.
    iqn.add(Rmax * Hq * F);
    iqn.add(ip.backward ? 0 : Rmax * Hq * F);
    iqn.add(B * d.N * Hq * F / half);
    for (int k = 0; k < 3; ++k) iqn.add(B * Hq * F);
    iqn.add(B * d.N * F);
    iqn.add(B * d.Nt * F);
    iqn.add(L.iqn.total * F);
    // Partials: the unfused kernels' grids or the fused kernels' (one block per 128-row tile at
    // most, cuda/iqn_fused.hpp), whichever is larger.
    const uint64_t iqn_tiles = chunks(B * d.N, 128);
    iqn.add(std::max<uint64_t>(row_blocks(B, Wq, 4, (2 * (uint64_t)d.N + d.Nt) * F), iqn_tiles) * Wq * D8);
    iqn.add(std::max(chunks(B, 32), iqn_tiles) * 2 * Hq * D8);
    iqn.add(ip.target ? 2 * Hq * D * F : 0);  // Wψ of both nets, rounded
    // Attention (attention.cu and the kernel path it picks, attention_paths.hpp): the partial
    // rows of the backward and the path's scratch follow the device's occupancy (@p attn).
    Arena at;
    const uint64_t d3 = 3 * (uint64_t)d.d;
    const uint64_t pw = d.T * d3 + d3 * d.td + d3 * d.G;
    const uint64_t LL = d.hh + d.d, LR = attention_rhs_cols(d);
    const AttentionBatchCols acols = attention_batch_cols(d, c);
    at.add((d3 * d.td + d3 * d.G + d.T * d3 + d.d) * F);
    at.add(B * acols.rhs * F);  // [pool | ā | aug | 0], or [ā | aug | 0] (the head factored)
    at.add(B * acols.lhs * F);  // [dh | dpool], or [dh]
    at.add(B * d.d * F);        // dā
    at.add(LL * LR * F);        // the weight gradients' blocks
    at.add(pw * F);
    at.add(L.attn.total * F);
    at.add(attn.partial_rows * pw * F);
    // The head's partial rows, or the fused head's (one per 128-row tile at most: cuda/
    // attention_head.hpp's kHeadFusedTileRows; test_cuda_memory_plan checks the two agree).
    at.add(std::max<uint64_t>(row_blocks(B, 2 * (uint64_t)d.hh + 2, 8, 0), chunks(B, 128)) *
           (2 * d.hh + 2) * D8);
    at.add(attention_head_factored_floats(d, c) * F);
    at.add(attn.scratch_bytes);
    a += iql.size + iqn.size + at.size;
    a += 64 * 1024;  // the guard's partials (guard.cu kScratchBytes)
    p.activations = a;

    // upload.cpp: the device batch block, and two pinned slots of its size unless the pipeline
    // has a replay (it refuses uploads); device_input.cpp: the check record and its pinned copy.
    auto r256 = [](uint64_t n) { return (n + 255) / 256 * 256; };
    const uint64_t in = 2 * r256(B * d.O * F) + r256(B * F) + 3 * r256(B * d.G * F) +
                        r256(B * NB * I) + r256(B * I) + r256(B);
    const uint64_t slots = d.K > 0 ? 0 : 2 * in, status = 16;  // replay::CheckStatus
    p.batch_staging = in + slots + 2 * status;
    // replay_lane.cpp: the ring in one allocation (replay.cu ring_bytes(): every field, the
    // episode table, the open-episode starts and the row count, each 256-byte aligned) and two
    // pinned insert slots of min(K, 16 MiB / row bytes) rows (at least one), fields aligned.
    uint64_t insert_slots = 0;
    if (d.K > 0) {
        const uint64_t KE = (uint64_t)d.K * d.E;
        for (int f = 0; f < RF_COUNT; ++f) p.replay += r256(KE * row_field_bytes(d, f));
        p.replay += r256(KE * sizeof(uint32_t)) + r256((uint64_t)d.E * sizeof(uint64_t)) + 256;
        const uint64_t row = d.E * transition_bytes(d);
        const uint64_t rows = std::min<uint64_t>(std::max<uint64_t>((16u << 20) / row, 1), d.K);
        for (int f = 0; f < RF_COUNT; ++f)
            insert_slots += 2 * r256(rows * d.E * row_field_bytes(d, f));
        p.replay += insert_slots;
    }
    const uint64_t pinned = slots + status + insert_slots;  // in the categories above
    p.device = p.total() - pinned;
    // The initial state is built in host memory and uploaded at creation; act()'s pinned
    // transfer buffers are not in any category.
    p.transient = (persistent_floats(L) + output_floats(L)) * F;
    p.host = pinned + (AC * D + AC * NB * A) * F + AC * NB * I + p.transient;
    return p;
}

MemoryPlan plan_memory(const fh_config &c, const Layout &L, int backend) {
    if (backend == FH_BACKEND_CUDA) return plan_cuda(c, L, cuda_attention_sizes(c, L.dims));
    return plan_cpu(L);
}

uint64_t largest_array(const Dims &d, const char **name) {
    const uint64_t B = d.B;
    const struct { const char *name; uint64_t n; } arrays[] = {
        {"[x~; x~'] (2 batch_size x (obs_dim + goal_dim))", 2 * B * d.D},
        {"the target branch caches (num_branches x 2 batch_size x branch_hidden)",
         2 * (uint64_t)d.NB * B * d.HB},
        {"the branch gradients dh2 (num_branches x batch_size x trunk_hidden)",
         (uint64_t)d.NB * B * d.H},
        {"the target trunk (2 batch_size x trunk_hidden)", 2 * B * d.H},
        {"the IQN features (batch_size x iqn_n x max(iqn_hidden, iqn_cos))",
         B * std::max(d.N, d.Nt) * std::max(d.Hq, d.C)},
        {"the IQL activations (2 batch_size x iql_hidden)", 2 * B * d.Hi},
    };
    size_t best = 0;
    for (size_t k = 1; k < sizeof arrays / sizeof arrays[0]; ++k)
        if (arrays[k].n > arrays[best].n) best = k;
    if (name) *name = arrays[best].name;
    return arrays[best].n;
}

uint64_t host_available_bytes(std::string *source) {
    uint64_t avail = UINT64_MAX;
    std::string src = "unknown";
    std::ifstream mi("/proc/meminfo");
    for (std::string line; std::getline(mi, line);) {
        unsigned long long kb;
        if (sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) {
            avail = (uint64_t)kb * 1024;
            src = "MemAvailable in /proc/meminfo";
        }
    }
    // cgroup v2: "0::/path" in /proc/self/cgroup; the limit is memory.max less memory.current.
    std::ifstream cg("/proc/self/cgroup");
    for (std::string line; std::getline(cg, line);) {
        if (line.rfind("0::", 0) != 0) continue;
        const std::string dir = "/sys/fs/cgroup" + line.substr(3);
        std::ifstream mx(dir + "/memory.max"), cur(dir + "/memory.current");
        unsigned long long max_b = 0, cur_b = 0;
        if (mx >> max_b && cur >> cur_b) {  // "max" (no limit) fails to parse
            const uint64_t left = max_b > cur_b ? max_b - cur_b : 0;
            if (left < avail) {
                avail = left;
                src = "the cgroup's memory.max less memory.current";
            }
        }
    }
    if (source) *source = src;
    return avail;
}

void check_fits(uint64_t need, uint64_t available, const std::string &where,
                const std::string &source, const MemoryPlan &p) {
    if (need <= available) return;
    fail(FH_ERR_OUT_OF_MEMORY,
         "config needs %llu bytes of %s (parameters %llu, activations %llu, workspaces %llu, "
         "batch staging %llu, replay %llu, step scratch %llu; fh_memory_plan() itemises it), "
         "%llu available (%s)", (unsigned long long)need, where.c_str(),
         (unsigned long long)p.parameters, (unsigned long long)p.activations,
         (unsigned long long)p.workspaces, (unsigned long long)p.batch_staging,
         (unsigned long long)p.replay, (unsigned long long)p.transient,
         (unsigned long long)available, source.c_str());
}

}  // namespace fh
