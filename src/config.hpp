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
    uint32_t K, E;          // replay rows and environments (SPEC §2.1); both 0 without a replay
};

Dims make_dims(const fh_config &c);

// fh_config as this version lays it out, from a caller's struct of this or the 0.1 size (which
// ends at `seed`: no replay). Throws FH_ERR_STRUCT_SIZE for any other size.
fh_config read_config(const fh_config &c);

// Throws fh::Error naming the field and value at fault. @p c is read_config()'s result.
void validate_config(const fh_config &c);

}  // namespace fh
