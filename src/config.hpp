// The configuration (SPEC §1): defaults, validation, and the derived dimensions every
// executor uses.
#pragma once
#include <foxhunt.h>
#include <cstdint>

namespace fh {

// Dimensions derived once from a validated config. Names follow SPEC §1 and §4.
struct Dims {
    uint32_t B, O, G, D, NB, A, H, HB;
    uint32_t Hi;            // iql_hidden
    uint32_t Hq, C, N, Nt;  // iqn_hidden, iqn_cos, iqn_n, iqn_n_target
    uint32_t td, To, T, d, heads, dh, hh;  // attention: token dim, obs tokens, all tokens, ...
    uint32_t R;
    bool sn1, sn2;          // W1, W2 under spectral normalisation
};

Dims make_dims(const fh_config &c);

// Throws fh::Error naming the field and value at fault.
void validate_config(const fh_config &c);

}  // namespace fh
