#include "iqn_paths.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "error.hpp"

namespace fh {

IqnPaths iqn_paths(const Dims &d, const fh_config &c) {
    int level = 3;
    const char *e = getenv("FOXHUNT_IQN_KERNELS");
    if (e && *e) {
        const char *names[] = {"unfused", "target", "online", "fused", "auto"};
        level = -1;
        for (int k = 0; k < 5; ++k)
            if (!strcmp(e, names[k])) level = std::min(k, 3);
        if (level < 0)
            fail(FH_ERR_BAD_VALUE, "FOXHUNT_IQN_KERNELS='%s': expected auto, fused, online, "
                 "target or unfused", e);
    }
    IqnPaths p;
    p.target = c.math_mode != FH_MATH_STRICT && d.Hq == kIqnFusedHidden &&
               d.C == kIqnFusedCos && level >= 1;
    p.online = p.target && d.N >= 1 && d.N <= 16 && 16 % d.N == 0 && level >= 2;
    p.backward = p.online && level >= 3;
    p.bf16_operands = p.backward && c.math_mode == FH_MATH_BF16;
    return p;
}

}  // namespace fh
