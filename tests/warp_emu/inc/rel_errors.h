#pragma once
// Relative L2 errors of several outputs against float64, for the IQN emulations: add(k, got,
// want) per element of output k, then report() prints ‖got − want‖ / ‖want‖ of each and whether
// all are within the bound (a NaN is not).
#include <cmath>
#include <cstdio>
#include <vector>

struct RelErrors {
    std::vector<const char *> names;
    std::vector<double> e, n;
    explicit RelErrors(std::vector<const char *> outputs)
        : names(std::move(outputs)), e(names.size(), 0.0), n(names.size(), 0.0) {}
    void add(int k, double got, double want) {
        e[k] += (got - want) * (got - want);
        n[k] += want * want;
    }
    // "<label>: name err ...  ok|FAILED"; true when every error is at most bound.
    bool report(const char *label, double bound) const {
        bool good = true;
        printf("%s:", label);
        for (size_t k = 0; k < names.size(); ++k) {
            const double err = std::sqrt(e[k] / n[k]);
            good &= err <= bound;  // false for NaN
            printf(" %s %.1e", names[k], err);
        }
        printf("  %s\n", good ? "ok" : "FAILED");
        return good;
    }
};
