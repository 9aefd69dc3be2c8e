// Device copies of the replay tests' data (replay_ref.hpp) for the CUDA replay tests
// (test_cuda_replay*.cpp), and bitwise batch comparison. Header-only; include after cmocka.h
// and replay_ref.hpp, in a build with CUDA.
#ifndef FOXHUNT_TEST_CUDA_REPLAY_UTIL_HPP
#define FOXHUNT_TEST_CUDA_REPLAY_UTIL_HPP

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "batch.hpp"
#include "cuda_dev.hpp"
#include "replay_ref.hpp"

namespace cuda_test {

// Rows on the device: the arrays and their fh_replay_rows view (memory = FH_MEMORY_DEVICE).
struct DevRows {
    Dev obs, goal, action, reward, done, next_obs, nag, regime, ends;
    fh_replay_rows view;
    explicit DevRows(const replay_ref::Rows &r)
        : obs(dev_of(r.obs)), goal(dev_of(r.goal)), action(dev_of(r.action)),
          reward(dev_of(r.reward)), done(dev_of(r.done)), next_obs(dev_of(r.next_obs)),
          nag(dev_of(r.nag)), regime(dev_of(r.regime)), ends(dev_of(r.episode_end)) {
        view = r.view();
        view.memory = FH_MEMORY_DEVICE;
        view.obs = (const float *)obs.p;
        view.goal = r.G ? (const float *)goal.p : nullptr;
        view.action = (const int32_t *)action.p;
        view.reward = (const float *)reward.p;
        view.done = (const uint8_t *)done.p;
        view.next_obs = (const float *)next_obs.p;
        view.next_achieved_goal = r.G ? (const float *)nag.p : nullptr;
        view.regime = (const int32_t *)regime.p;
        view.episode_end = (const uint8_t *)ends.p;
    }
};

// Four rows of config c (replay_ref::config(6, 3): O = 8, G = 2, NB = 3, 3 regimes) with fault
// number `fault` in [0, kFaults) planted: a NaN obs, a negative action, done = 2, done without
// episode_end, regime 9, and an infinite next_achieved_goal after a NaN reward (the first
// check in order, reward's, is the one reported).
constexpr int kFaults = 6;
inline replay_ref::Rows faulty_rows(const fh_config &c, int fault) {
    replay_ref::Rows bad = replay_ref::random_rows(c, 4, 7 + fault, 0.3);
    switch (fault) {
    case 0: bad.obs[(2 * 3 + 1) * 8 + 5] = NAN; break;
    case 1: bad.action[10] = -3; break;
    case 2: bad.done[4] = 2; break;
    case 3: bad.done[7] = 1; bad.episode_end[7] = 0; break;
    case 4: bad.regime[11] = 9; break;
    default: bad.nag[23] = INFINITY; bad.reward[1] = NAN; break;
    }
    return bad;
}

inline void same_batch(const fh::HostBatch &a, const fh::HostBatch &b) {
    auto same = [](const auto &x, const auto &y, const char *what) {
        if (x.size() != y.size() || memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) != 0)
            fail_msg("%s differs", what);
    };
    same(a.obs, b.obs, "obs");
    same(a.next_obs, b.next_obs, "next_obs");
    same(a.reward, b.reward, "reward");
    same(a.goal, b.goal, "goal");
    same(a.next_achieved_goal, b.next_achieved_goal, "next_achieved_goal");
    same(a.her_goal, b.her_goal, "her_goal");
    same(a.action, b.action, "action");
    same(a.regime, b.regime, "regime");
    same(a.done, b.done, "done");
}

}  // namespace cuda_test

#endif
