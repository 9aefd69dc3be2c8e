#include "replay.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "error.hpp"

namespace fh {

size_t row_field_bytes(const Dims &d, int f) {
    switch (f) {
    case RF_OBS: case RF_NEXT_OBS: return (size_t)d.O * sizeof(float);
    case RF_GOAL: case RF_NAG: return (size_t)d.G * sizeof(float);
    case RF_ACTION: return (size_t)d.NB * sizeof(int32_t);
    case RF_REWARD: return sizeof(float);
    case RF_REGIME: return sizeof(int32_t);
    default: return 1;  // done, episode_end
    }
}

const void *row_field(const fh_replay_rows &r, int f) {
    const void *p[RF_COUNT] = {r.obs, r.goal, r.action, r.reward, r.done, r.next_obs,
                               r.next_achieved_goal, r.regime, r.episode_end};
    return p[f];
}

fh_replay_rows read_rows(const fh_replay_rows *r) {
    if (!r) fail(FH_ERR_NULL_POINTER, "argument 'rows' is NULL");
    if (r->struct_size != sizeof(fh_replay_rows))
        fail(FH_ERR_STRUCT_SIZE, "rows.struct_size = %zu, expected %zu (use FH_REPLAY_ROWS_INIT)",
             r->struct_size, sizeof(fh_replay_rows));
    return *r;
}

void check_rows_header(const Dims &d, const fh_replay_rows &r) {
    if (r.num_rows == 0) fail(FH_ERR_BUFFER_SIZE, "rows.num_rows = 0: insert at least one row");
    if (r.num_envs != d.E)
        fail(FH_ERR_BUFFER_SIZE, "rows.num_envs = %u but the pipeline's replay_envs is %u",
             r.num_envs, d.E);
    const char *names[RF_COUNT] = {"obs", "goal", "action", "reward", "done", "next_obs",
                                   "next_achieved_goal", "regime", "episode_end"};
    for (int f = 0; f < RF_COUNT; ++f)
        if (f != RF_REGIME && row_field_bytes(d, f) > 0 && !row_field(r, f))
            fail(FH_ERR_NULL_POINTER, "rows.%s is NULL but required by this config", names[f]);
    if (r.memory != FH_MEMORY_HOST && r.memory != FH_MEMORY_DEVICE)
        fail(FH_ERR_BAD_VALUE, "rows.memory = %d is not an fh_memory_kind", r.memory);
}

std::vector<ElementCheck> rows_checks(const Dims &d, const fh_replay_rows &r) {
    const uint32_t R = r.num_rows, E = d.E;
    std::vector<ElementCheck> v = {make_check("rows.obs", r.obs, CHECK_FINITE, 0, R, E, d.O)};
    if (d.G > 0) v.push_back(make_check("rows.goal", r.goal, CHECK_FINITE, 0, R, E, d.G));
    v.push_back(make_check("rows.action", r.action, CHECK_BELOW, d.A, R, E, d.NB));
    v.push_back(make_check("rows.reward", r.reward, CHECK_FINITE, 0, R, E));
    v.push_back(make_check("rows.done", r.done, CHECK_FLAG, 0, R, E));
    v.push_back(make_check("rows.next_obs", r.next_obs, CHECK_FINITE, 0, R, E, d.O));
    if (d.G > 0)
        v.push_back(make_check("rows.next_achieved_goal", r.next_achieved_goal, CHECK_FINITE, 0,
                               R, E, d.G));
    if (r.regime) v.push_back(make_check("rows.regime", r.regime, CHECK_BELOW, d.R, R, E));
    v.push_back(make_check("rows.episode_end", r.episode_end, CHECK_FLAG, 0, R, E));
    ElementCheck implies = make_check("rows.done", r.done, CHECK_IMPLIES, 0, R, E);
    implies.data2 = r.episode_end;
    implies.name2 = "rows.episode_end";
    v.push_back(implies);
    return v;
}

void HostRows::resize(const Dims &d, uint64_t rows) {
    R = rows;
    E = d.E;
    for (int f = 0; f < RF_COUNT; ++f) field[f].assign(rows * d.E * row_field_bytes(d, f), 0);
}

fh_replay_rows HostRows::view() const {
    fh_replay_rows r = FH_REPLAY_ROWS_INIT;
    r.num_rows = (uint32_t)R;
    r.num_envs = E;
    auto f32 = [&](int f) { return field[f].empty() ? nullptr : (const float *)field[f].data(); };
    r.obs = f32(RF_OBS);
    r.goal = f32(RF_GOAL);
    r.action = (const int32_t *)field[RF_ACTION].data();
    r.reward = f32(RF_REWARD);
    r.done = field[RF_DONE].data();
    r.next_obs = f32(RF_NEXT_OBS);
    r.next_achieved_goal = f32(RF_NAG);
    r.regime = (const int32_t *)field[RF_REGIME].data();
    r.episode_end = field[RF_EPISODE_END].data();
    return r;
}

HostReplay::HostReplay(const Dims &d) : d_(d) {
    ring_.resize(d, d.K);
    end_slot_.assign((size_t)d.K * d.E, kEpisodeOpen);
    open_start_.assign(d.E, 0);
}

void HostReplay::insert(const fh_replay_rows &r) {
    check_elements(rows_checks(d_, r));
    append(r);
}

void HostReplay::append(const fh_replay_rows &r) {
    const uint64_t K = d_.K, E = d_.E, R = r.num_rows;
    const uint64_t keep = std::min(R, K);  // older rows of this insert are overwritten by it
    const uint64_t first_new = n_ins_;
    for (uint64_t k = R - keep; k < R;) {
        // Rows k.. go to slots (first_new + k) mod K.. up to the end of the ring.
        const uint64_t slot = (first_new + k) % K;
        const uint64_t run = std::min(R - k, K - slot);
        for (int f = 0; f < RF_COUNT; ++f) {
            const size_t bytes = row_field_bytes(d_, f) * E;
            if (bytes == 0) continue;
            uint8_t *dst = ring_.field[f].data() + slot * bytes;
            const void *src = row_field(r, f);
            if (src) memcpy(dst, (const uint8_t *)src + k * bytes, run * bytes);
            else memset(dst, 0, run * bytes);  // regime absent: 0 (SPEC §2.1)
        }
        k += run;
    }
    n_ins_ += R;
    const uint8_t *ends = ring_.field[RF_EPISODE_END].data();
    for (uint32_t e = 0; e < d_.E; ++e)
        replay_close_episodes(e, first_new, n_ins_, K, d_.E, ends, end_slot_.data(),
                              open_start_.data());
}

void HostReplay::sample(uint64_t seed, uint64_t step, uint32_t row0, const BatchDst &out,
                        ReplayDraw *draws) const {
    const Dims &d = d_;
    const auto *obs = (const float *)ring_.field[RF_OBS].data();
    const auto *next_obs = (const float *)ring_.field[RF_NEXT_OBS].data();
    const auto *goal = (const float *)ring_.field[RF_GOAL].data();
    const auto *nag = (const float *)ring_.field[RF_NAG].data();
    const auto *action = (const int32_t *)ring_.field[RF_ACTION].data();
    const auto *reward = (const float *)ring_.field[RF_REWARD].data();
    const auto *regime = (const int32_t *)ring_.field[RF_REGIME].data();
    const uint8_t *done = ring_.field[RF_DONE].data();
    for (uint32_t i = 0; i < d.B; ++i) {
        const ReplayDraw w = replay_draw(seed, row0 + i, step, n_ins_, d.K, d.E, end_slot_.data());
        if (draws) draws[i] = w;
        const size_t t = w.slot * d.E + w.env, h = w.her_slot * d.E + w.env;
        memcpy(out.obs + (size_t)i * d.O, obs + t * d.O, d.O * sizeof(float));
        memcpy(out.next_obs + (size_t)i * d.O, next_obs + t * d.O, d.O * sizeof(float));
        memcpy(out.action + (size_t)i * d.NB, action + t * d.NB, d.NB * sizeof(int32_t));
        out.reward[i] = reward[t];
        out.done[i] = done[t];
        out.regime[i] = regime[t];
        if (d.G == 0) continue;
        memcpy(out.goal + (size_t)i * d.G, goal + t * d.G, d.G * sizeof(float));
        memcpy(out.next_achieved_goal + (size_t)i * d.G, nag + t * d.G, d.G * sizeof(float));
        memcpy(out.her_goal + (size_t)i * d.G, nag + h * d.G, d.G * sizeof(float));
    }
}

uint64_t HostReplay::bytes() const {
    uint64_t n = end_slot_.size() * sizeof(uint32_t) + open_start_.size() * sizeof(uint64_t);
    for (const std::vector<uint8_t> &f : ring_.field) n += f.size();
    return n;
}

ReplayImage HostReplay::image() const {
    ReplayImage img;
    img.n_ins = n_ins_;
    const uint64_t N = replay_valid_rows(n_ins_, d_.K);
    img.rows.resize(d_, N);
    for (uint64_t a = 0; a < N; ++a) {  // age a = row n_ins - N + a
        const uint64_t slot = (n_ins_ - N + a) % d_.K;
        for (int f = 0; f < RF_COUNT; ++f) {
            const size_t bytes = row_field_bytes(d_, f) * d_.E;
            if (bytes) memcpy(img.rows.field[f].data() + a * bytes,
                              ring_.field[f].data() + slot * bytes, bytes);
        }
    }
    return img;
}

void HostReplay::restore(const ReplayImage &img) {
    const uint64_t N = img.rows.R;
    n_ins_ = img.n_ins - N;  // the rows before the oldest valid one are gone: start after them
    std::fill(end_slot_.begin(), end_slot_.end(), kEpisodeOpen);
    std::fill(open_start_.begin(), open_start_.end(), n_ins_);
    if (N > 0) append(img.rows.view());
}

}  // namespace fh
