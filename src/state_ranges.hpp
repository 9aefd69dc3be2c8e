// The ranges of state tensors beyond finiteness, checked where new values come in: a write
// (fh_pipeline_write_tensor) and a checkpoint load, so that neither can bring in state from which
// every later step would be skipped (SPEC §5.2, §5.5 step 8).
#pragma once
#include <functional>

#include <foxhunt.h>

#include "layout.hpp"

namespace fh {

// A tensor's values as they are, or would be after the write or load: t.count() floats.
using TensorValues = std::function<const float *(const TensorEntry &t)>;

// Throws fh::Error(FH_ERR_BAD_VALUE) naming the tensor (and the index and value where one element
// is at fault) when `t`, at values(t), breaks its range:
// - sn.u.Wk: not all zeros;
// - a layer under spectral normalisation (q.Wk or sn.u.Wk with Wk in sn_layers): the power
//   iteration's first product, v = Wᵀu rounded to float, must have a norm of at least the 1e-12
//   that normalize() divides by at the least; below it v is not a unit vector and σ = uᵀWv
//   vanishes (0 for W = 0), so W/σ is not finite and every step is skipped (SPEC §5.2);
// - target.q.Wk under spectral normalisation: not all zeros (σ̄ = uᵀW̄v would be 0);
// - regime.s: no element negative (a running mean square; ρ = √(s̄/s_k));
// - regime.scale: every element in [regime_min, regime_max] or 1 (ρ's initial value, which that
//   range need not hold); exactly 1 with num_regimes = 1 (ρ ≡ 1).
// Other tensors pass. values() supplies the layer's other tensor (W for u, u for W).
void check_state_range(const fh_config &c, const Layout &L, const TensorEntry &t,
                       const TensorValues &values);

}  // namespace fh
