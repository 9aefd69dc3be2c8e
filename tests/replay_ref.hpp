// The replay tests' independent reference of SPEC §2.1/§5.0 and their data: every row ever
// inserted is kept (the whole history, no ring), and a draw is computed from the SPEC's words
// alone: Philox straight from Random123, the products in 128-bit integers, and f found by
// walking the environment's column forward until an episode ends or the newest row. Nothing
// here uses src/replay_math.hpp. Header-only; include before cmocka.h (Random123 pulls in
// <iostream>, whose fail() collides with cmocka's macro).
#ifndef FOXHUNT_TEST_REPLAY_REF_HPP
#define FOXHUNT_TEST_REPLAY_REF_HPP

#include <Random123/philox.h>
#include <foxhunt.h>

#include "testutil.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace replay_ref {

// The tests' small config (CPU backend) with a replay of K rows of E environments.
inline fh_config config(uint32_t K, uint32_t E, uint32_t B = 32) {
    fh_config c = fh_test_small_config();
    c.replay_capacity = K;
    c.replay_envs = E;
    c.batch_size = B;
    return c;
}

// Rows of E transitions with owned arrays ([R, E, ...] each), appendable: the history.
struct Rows {
    uint32_t R = 0, E = 0, O = 0, G = 0, NB = 0;
    std::vector<float> obs, goal, reward, next_obs, nag;
    std::vector<int32_t> action, regime;
    std::vector<uint8_t> done, episode_end;

    Rows() = default;
    Rows(const fh_config &c) : E(c.replay_envs), O(c.obs_dim), G(c.goal_dim), NB(c.num_branches) {}

    // Host view of rows [first, first + count).
    fh_replay_rows view(uint32_t first = 0, uint32_t count = 0) const {
        if (count == 0) count = R - first;
        const size_t t = (size_t)first * E;
        fh_replay_rows r = FH_REPLAY_ROWS_INIT;
        r.num_rows = count;
        r.num_envs = E;
        r.obs = obs.data() + t * O;
        r.next_obs = next_obs.data() + t * O;
        r.goal = G ? goal.data() + t * G : nullptr;
        r.next_achieved_goal = G ? nag.data() + t * G : nullptr;
        r.action = action.data() + t * NB;
        r.reward = reward.data() + t;
        r.done = done.data() + t;
        r.regime = regime.data() + t;
        r.episode_end = episode_end.data() + t;
        return r;
    }

    void append(const Rows &o) {
        auto cat = [](auto &a, const auto &b) { a.insert(a.end(), b.begin(), b.end()); };
        cat(obs, o.obs); cat(goal, o.goal); cat(reward, o.reward); cat(next_obs, o.next_obs);
        cat(nag, o.nag); cat(action, o.action); cat(regime, o.regime); cat(done, o.done);
        cat(episode_end, o.episode_end);
        R += o.R;
    }
    bool ends(uint64_t n, uint32_t e) const { return episode_end[n * E + e] != 0; }
};

inline uint64_t splitmix(uint64_t &s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
inline float unit(uint64_t &s) { return (float)((splitmix(s) >> 40) * (1.0 / 16777216.0)); }

// R valid random rows for config c; each transition ends its episode with probability p_end
// (then it is terminal, done = 1, half the time: the other half is a time limit).
inline Rows random_rows(const fh_config &c, uint32_t R, uint64_t seed, double p_end) {
    Rows r(c);
    r.R = R;
    const size_t n = (size_t)R * r.E;
    uint64_t s = seed * 0x5851F42D4C957F2Dull + 11;
    auto fill = [&](std::vector<float> &v, size_t count) {
        v.resize(count);
        for (float &x : v) x = 4.0f * unit(s) - 2.0f;
    };
    fill(r.obs, n * r.O);
    fill(r.next_obs, n * r.O);
    fill(r.goal, n * r.G);
    fill(r.nag, n * r.G);
    fill(r.reward, n);
    r.action.resize(n * r.NB);
    for (int32_t &a : r.action) a = (int32_t)(splitmix(s) % c.actions_per_branch);
    r.regime.resize(n);
    for (int32_t &z : r.regime) z = (int32_t)(splitmix(s) % c.num_regimes);
    r.done.resize(n);
    r.episode_end.resize(n);
    for (size_t i = 0; i < n; ++i) {
        r.episode_end[i] = unit(s) < p_end;
        r.done[i] = r.episode_end[i] && unit(s) < 0.5f;
    }
    return r;
}

struct Draw {
    uint64_t row;  // n
    uint32_t env;  // e
    uint64_t f, o;
};

// SPEC §5.0 for transition c0 of step `step` after the rows of `h` were inserted into a ring
// of K rows (only the newest min(h.R, K) are valid).
inline Draw draw(uint64_t seed, uint32_t c0, uint64_t step, const Rows &h, uint64_t K) {
    r123::Philox4x32 gen;
    r123::Philox4x32::ctr_type ctr = {{c0, 0, (uint32_t)step, 7}};
    r123::Philox4x32::key_type key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    const r123::Philox4x32::ctr_type w = gen(ctr, key);
    const uint64_t n_ins = h.R, N = n_ins < K ? n_ins : K, E = h.E;
    const unsigned __int128 j = ((unsigned __int128)w.v[0] * (N * E)) >> 32;
    Draw d;
    d.env = (uint32_t)(j % E);
    d.row = n_ins - N + (uint64_t)(j / E);
    d.f = 0;
    while (d.row + d.f + 1 < n_ins && !h.ends(d.row + d.f, d.env)) ++d.f;
    d.o = (uint64_t)(((unsigned __int128)w.v[1] * (d.f + 1)) >> 32);
    return d;
}

// The batch of B draws (c0 = row0 + i) as host arrays, built by hand from the history.
struct Batch {
    std::vector<float> obs, goal, reward, next_obs, nag, her_goal;
    std::vector<int32_t> action, regime;
    std::vector<uint8_t> done;
    fh_batch view(uint32_t B) const {
        fh_batch b = FH_BATCH_INIT;
        b.batch_size = B;
        b.obs = obs.data();
        b.goal = goal.empty() ? nullptr : goal.data();
        b.action = action.data();
        b.reward = reward.data();
        b.done = done.data();
        b.next_obs = next_obs.data();
        b.next_achieved_goal = nag.empty() ? nullptr : nag.data();
        b.her_goal = her_goal.empty() ? nullptr : her_goal.data();
        b.regime = regime.data();
        return b;
    }
};

inline Batch batch(uint64_t seed, uint64_t step, uint32_t row0, uint32_t B, const Rows &h,
                   uint64_t K, std::vector<Draw> *draws = nullptr) {
    Batch b;
    const uint32_t O = h.O, G = h.G, NB = h.NB, E = h.E;
    for (uint32_t i = 0; i < B; ++i) {
        const Draw d = draw(seed, row0 + i, step, h, K);
        if (draws) draws->push_back(d);
        const size_t t = d.row * E + d.env, u = (d.row + d.o) * E + d.env;
        b.obs.insert(b.obs.end(), &h.obs[t * O], &h.obs[t * O] + O);
        b.next_obs.insert(b.next_obs.end(), &h.next_obs[t * O], &h.next_obs[t * O] + O);
        b.goal.insert(b.goal.end(), h.goal.begin() + t * G, h.goal.begin() + (t + 1) * G);
        b.nag.insert(b.nag.end(), h.nag.begin() + t * G, h.nag.begin() + (t + 1) * G);
        b.her_goal.insert(b.her_goal.end(), h.nag.begin() + u * G, h.nag.begin() + (u + 1) * G);
        b.action.insert(b.action.end(), &h.action[t * NB], &h.action[t * NB] + NB);
        b.reward.push_back(h.reward[t]);
        b.done.push_back(h.done[t]);
        b.regime.push_back(h.regime[t]);
    }
    return b;
}

}  // namespace replay_ref

#endif
