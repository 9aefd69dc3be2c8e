#include "cql_paths.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "error.hpp"

namespace fh {

bool cql_head_pass(const Dims &d) {
    const char *e = getenv("FOXHUNT_CQL_GRADS");
    const bool pass = e && !strcmp(e, "pass");
    if (e && *e && !pass && strcmp(e, "gemm"))
        fail(FH_ERR_BAD_VALUE, "FOXHUNT_CQL_GRADS='%s': expected gemm or pass", e);
    return pass && d.A >= 1 && d.A <= kCqlHeadMaxA;
}

uint32_t cql_head_blocks(uint32_t B) {
    const uint64_t chunks = std::max<uint64_t>(1, ((uint64_t)B + kCqlHeadRows - 1) / kCqlHeadRows);
    return (uint32_t)std::min<uint64_t>(chunks, kCqlHeadBlocks);
}

uint64_t cql_partial_doubles(const Dims &d) {
    if (cql_head_pass(d))
        return (uint64_t)d.NB * cql_head_blocks(d.B) * ((uint64_t)d.A * d.HB + d.A);
    const uint64_t colsum_chunks = std::max<uint64_t>(1, (d.B + 255) / 256);  // cuda/reduce.cu
    return (uint64_t)d.NB * colsum_chunks * d.A;
}

}  // namespace fh
