// Initial state from the seed alone (SPEC §3), written into host buffers of the layout.
#pragma once
#include <cstdint>
#include <vector>

#include "layout.hpp"

namespace fh {

using HostBuffers = std::vector<std::vector<float>>;  // indexed by Buf

// Allocates every buffer of the layout and fills the persistent ones: parameters from Philox
// (purpose 4), targets as copies, zero Adam moments, spectral u (purpose 6), regime s = rho = 1.
HostBuffers initial_state(const Layout &L, uint64_t seed);

}  // namespace fh
