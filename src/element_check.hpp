// The element checks of SPEC §8 and §2.1 (finite floats, indices in range, 0/1 flags, done ⇒
// episode_end) as plain data, so that the host (fused with a copy, or in one read-only pass)
// and the CUDA kernels check the same elements in the same order, and a refusal reads the same
// wherever it was found: the first failing element of the first failing check, named with its
// tensor, coordinates and value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hd.hpp"

namespace fh {

enum CheckKind : uint32_t {
    CHECK_FINITE = 0,  // float32: not NaN or infinite
    CHECK_BELOW = 1,   // int32: in [0, hi)
    CHECK_FLAG = 2,    // uint8: 0 or 1
    CHECK_IMPLIES = 3  // uint8 pair (both already 0 or 1): data[i] = 1 requires data2[i] = 1
};

struct ElementCheck {
    const void *data;
    const void *data2;     // CHECK_IMPLIES only
    uint64_t count;        // elements
    uint32_t kind;         // CheckKind
    uint32_t hi;           // CHECK_BELOW's exclusive bound
    uint32_t ndim;         // coordinates in a message: 1, 2 or 3
    uint32_t dims[3];      // the shape as printed; dims[0] is not needed to split an index
    const char *name;      // "batch.obs" (read on the host only)
    const char *name2;     // CHECK_IMPLIES: the implied tensor's name
};

// Whether element i passes; @p raw receives its 32 bits (the float's bits, the int, the flag),
// all a message needs. The CUDA validation kernels call this too.
FH_HD bool element_ok(const ElementCheck &c, uint64_t i, uint32_t &raw) {
    const uint8_t *b = static_cast<const uint8_t *>(c.data);
    switch (c.kind) {
    case CHECK_FINITE:
        memcpy(&raw, b + 4 * i, 4);
        return (raw & 0x7f800000u) != 0x7f800000u;  // an all-ones exponent: NaN or infinity
    case CHECK_BELOW:
        memcpy(&raw, b + 4 * i, 4);
        return raw < c.hi;  // a negative int32 is a huge uint32
    case CHECK_FLAG:
        raw = b[i];
        return raw <= 1;
    default:  // CHECK_IMPLIES
        raw = b[i];
        return raw == 0 || static_cast<const uint8_t *>(c.data2)[i] == 1;
    }
}

// A check of the tensor @p data of shape [d0], [d0, d1] or [d0, d1, d2] (trailing zeros drop a
// dimension); @p hi is CHECK_BELOW's bound.
ElementCheck make_check(const char *name, const void *data, uint32_t kind, uint32_t hi,
                        uint32_t d0, uint32_t d1 = 0, uint32_t d2 = 0);

// Host side. The checks, in order; throws fh::Error for the first failing element of the first
// failing check (one vectorisable pass per tensor; the culprit is searched only on failure).
void check_elements(const ElementCheck *checks, size_t n);
inline void check_elements(const std::vector<ElementCheck> &v) { check_elements(v.data(), v.size()); }

// Copies c's elements (4 or 1 bytes each) to @p dst while checking them; throws as above.
void copy_checked(const ElementCheck &c, void *dst);

// The index of c's first failing element, or c.count if none fails.
uint64_t first_bad(const ElementCheck &c);

// Index of the first NaN or infinity of x[0, n), or n if there is none: one vectorisable pass,
// the search only when there is one (the divergence guard scans the whole state every step).
uint64_t first_non_finite_index(const float *x, uint64_t n);

// Throws the error for element @p i of c whose 32 bits are @p raw: FH_ERR_NON_FINITE or
// FH_ERR_OUT_OF_RANGE, e.g. "rows.obs[3, 1, 7] = nan is not finite". The CUDA backend turns a
// device check's (check, index, raw) into the same error with it.
[[noreturn]] void fail_element(const ElementCheck &c, uint64_t i, uint32_t raw);

}  // namespace fh
