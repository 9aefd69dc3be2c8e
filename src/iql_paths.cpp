#include "iql_paths.hpp"

#include <cstdlib>
#include <cstring>

#include "error.hpp"

namespace fh {

bool iql_fused(const Dims &d, const fh_config &c) {
    bool want = true;
    const char *e = getenv("FOXHUNT_IQL_KERNELS");
    if (e && *e) {
        if (!strcmp(e, "unfused")) want = false;
        else if (strcmp(e, "fused") && strcmp(e, "auto"))
            fail(FH_ERR_BAD_VALUE, "FOXHUNT_IQL_KERNELS='%s': expected auto, fused or unfused", e);
    }
    return want && c.math_mode != FH_MATH_STRICT && d.Hi == kIqlFusedHidden && d.D % 8 == 0 &&
           d.D >= 8 && d.D <= kIqlFusedMaxInput;
}

}  // namespace fh
