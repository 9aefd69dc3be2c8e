#include "cql_plan.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "error.hpp"

namespace fh {

bool cql_grad_fused(const Dims &d) {
    bool fused = false;
    const char *e = getenv("FOXHUNT_CQL_GRAD");
    if (e && *e) {
        if (!strcmp(e, "fused"))
            fused = true;
        else if (strcmp(e, "gemm"))
            fail(FH_ERR_BAD_VALUE, "FOXHUNT_CQL_GRAD='%s': expected gemm or fused", e);
    }
    return fused && (uint64_t)d.NB * d.A * kCqlGradRows * sizeof(float) <= 48 * 1024;
}

uint32_t cql_grad_blocks(const Dims &d) {
    return (uint32_t)std::min<uint64_t>((d.B + kCqlGradRows - 1) / kCqlGradRows,
                                        kCqlGradMaxBlocks);
}

uint64_t cql_grad_partial_doubles(const Dims &d) {
    return (uint64_t)d.NB * d.A * (d.HB + 1);
}

}  // namespace fh
