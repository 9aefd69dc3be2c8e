// SPEC §3 randomness: Philox4x32-10 (Salmon et al. 2011) through Random123's header, the same
// code on host and device. key = (seed lo, seed hi); counter = (c0, c1, c2, purpose).
#pragma once
#include <cstdint>

#include <Random123/philox.h>

#include "hd.hpp"

namespace fh {

enum Purpose : uint32_t {
    PURPOSE_HER = 1,        // (i, 0, step)
    PURPOSE_IQN_ONLINE = 2, // (i, n, step)
    PURPOSE_IQN_TARGET = 3, // (i, m, step)
    PURPOSE_INIT = 4,       // (element, tensor id, 0)
    PURPOSE_ACT = 5,        // (row, branch, act call)
    PURPOSE_SN_INIT = 6,    // (element, tensor id, 0)
    PURPOSE_REPLAY = 7      // (i, 0, step): row from word 0, HER offset from word 1 (§5.0)
};

struct Words { uint32_t w[4]; };

FH_HD Words philox(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t purpose) {
    r123::Philox4x32 gen;
    r123::Philox4x32::ctr_type ctr = {{c0, c1, c2, purpose}};
    r123::Philox4x32::key_type key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    r123::Philox4x32::ctr_type r = gen(ctr, key);
    return Words{{r.v[0], r.v[1], r.v[2], r.v[3]}};
}

// (x >> 8) * 2^-24: 24 random bits, exact in float32, in [0, 1).
FH_HD float uniform24(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

// ⌊uniform24(x) · n⌋ exactly, in integers: < n always. The float product uniform24(x) · n can
// round up to the next integer when n is not a power of two (about 2e-5 of draws at n = 1000),
// which SPEC's ⌊word · A⌋ does not allow.
FH_HD uint32_t uniform_index(uint32_t x, uint32_t n) {
    return (uint32_t)(((uint64_t)(x >> 8) * n) >> 24);
}

}  // namespace fh
