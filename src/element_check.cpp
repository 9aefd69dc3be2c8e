#include "element_check.hpp"

#include <cstdio>
#include <string>

#include "error.hpp"

namespace fh {

namespace {

// One pass that ORs every element's failure bit: integer work the compiler vectorises
// (alongside the copy when there is one). Elements are moved with memcpy, which reads a float
// as its bits without breaking the aliasing rules.
template <class T, class Bad>
bool scan(const ElementCheck &c, void *dst, Bad bad) {
    const uint8_t *x = static_cast<const uint8_t *>(c.data);
    uint32_t any = 0;
    if (dst) {
        uint8_t *o = static_cast<uint8_t *>(dst);
        for (uint64_t i = 0; i < c.count; ++i) {
            T v;
            memcpy(&v, x + i * sizeof(T), sizeof(T));
            memcpy(o + i * sizeof(T), &v, sizeof(T));
            any |= bad(v, i);
        }
    } else {
        for (uint64_t i = 0; i < c.count; ++i) {
            T v;
            memcpy(&v, x + i * sizeof(T), sizeof(T));
            any |= bad(v, i);
        }
    }
    return !any;
}

bool pass(const ElementCheck &c, void *dst) {
    switch (c.kind) {
    case CHECK_FINITE:
        return scan<uint32_t>(c, dst, [](uint32_t v, uint64_t) -> uint32_t {
            return (v & 0x7f800000u) == 0x7f800000u;
        });
    case CHECK_BELOW: {
        const uint32_t hi = c.hi;
        return scan<uint32_t>(c, dst, [hi](uint32_t v, uint64_t) -> uint32_t { return v >= hi; });
    }
    case CHECK_FLAG:
        return scan<uint8_t>(c, dst, [](uint8_t v, uint64_t) -> uint32_t { return v > 1; });
    default: {
        const uint8_t *y = static_cast<const uint8_t *>(c.data2);
        return scan<uint8_t>(c, dst, [y](uint8_t v, uint64_t i) -> uint32_t { return v > y[i]; });
    }
    }
}

std::string coords(const ElementCheck &c, uint64_t i) {
    char s[96];
    if (c.ndim == 3) {
        const uint64_t inner = (uint64_t)c.dims[1] * c.dims[2];
        snprintf(s, sizeof s, "%llu, %llu, %llu", (unsigned long long)(i / inner),
                 (unsigned long long)(i / c.dims[2] % c.dims[1]),
                 (unsigned long long)(i % c.dims[2]));
    } else if (c.ndim == 2) {
        snprintf(s, sizeof s, "%llu, %llu", (unsigned long long)(i / c.dims[1]),
                 (unsigned long long)(i % c.dims[1]));
    } else {
        snprintf(s, sizeof s, "%llu", (unsigned long long)i);
    }
    return s;
}

}  // namespace

ElementCheck make_check(const char *name, const void *data, uint32_t kind, uint32_t hi,
                        uint32_t d0, uint32_t d1, uint32_t d2) {
    ElementCheck c{};
    c.name = name;
    c.data = data;
    c.kind = kind;
    c.hi = hi;
    c.ndim = 1 + (d1 > 0) + (d2 > 0);
    c.dims[0] = d0;
    c.dims[1] = d1;
    c.dims[2] = d2;
    c.count = (uint64_t)d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1);
    return c;
}

void check_elements(const ElementCheck *checks, size_t n) {
    for (size_t k = 0; k < n; ++k)
        if (!pass(checks[k], nullptr)) {
            const uint64_t i = first_bad(checks[k]);
            uint32_t raw;
            element_ok(checks[k], i, raw);
            fail_element(checks[k], i, raw);
        }
}

void copy_checked(const ElementCheck &c, void *dst) {
    if (pass(c, dst)) return;
    const uint64_t i = first_bad(c);
    uint32_t raw;
    element_ok(c, i, raw);
    fail_element(c, i, raw);
}

uint64_t first_bad(const ElementCheck &c) {
    uint32_t raw;
    for (uint64_t i = 0; i < c.count; ++i)
        if (!element_ok(c, i, raw)) return i;
    return c.count;
}

uint64_t first_non_finite_index(const float *x, uint64_t n) {
    ElementCheck c{};
    c.data = x;
    c.count = n;
    c.kind = CHECK_FINITE;
    return pass(c, nullptr) ? n : first_bad(c);
}

void fail_element(const ElementCheck &c, uint64_t i, uint32_t raw) {
    const std::string at = coords(c, i);
    switch (c.kind) {
    case CHECK_FINITE: {
        float v;
        memcpy(&v, &raw, 4);
        fail(FH_ERR_NON_FINITE, "%s[%s] = %g is not finite", c.name, at.c_str(), (double)v);
    }
    case CHECK_BELOW:
        fail(FH_ERR_OUT_OF_RANGE, "%s[%s] = %d is outside [0, %u)", c.name, at.c_str(),
             (int32_t)raw, c.hi);
    case CHECK_FLAG:
        fail(FH_ERR_OUT_OF_RANGE, "%s[%s] = %u is not 0 or 1", c.name, at.c_str(), raw);
    default:
        fail(FH_ERR_OUT_OF_RANGE, "%s[%s] = 1 but %s[%s] = 0: a terminal transition ends its "
             "episode (SPEC §2.1)", c.name, at.c_str(), c.name2, at.c_str());
    }
}

}  // namespace fh
