// The overlap analysis of foxhunt-timeline (bench/timeline.cpp), apart from CUPTI so that
// tests/test_timeline_sweep.cpp can check it on intervals whose answers are known.
//
// Given intervals [start, end) (kernels, in ns) and ascending bounds that cut the span into
// segments (the children), a sweep over their starts and ends gives, per segment, the time
// during which exactly n intervals are open (n = 0, 1, 2, and 3 or more together), the gaps with
// none open between the first start and the last end (longest first), and for each interval
// the time it was the only one open.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace fh::bench {

struct Interval {
    uint64_t start, end;
};

struct Gap {
    uint64_t from, to;
};

constexpr int kLevels = 4;  // 0, 1, 2, 3 or more open

struct Sweep {
    std::vector<std::array<uint64_t, kLevels>> level;  // [segment][n]
    std::vector<Gap> gaps;                              // longest first
    std::vector<uint64_t> alone;                        // per interval
};

// bounds b0 < b1 < ...: segment 0 is the time before b0, segment k the time in [b(k-1), bk), the
// last segment the time from the last bound on; only the span from the first start to the last
// end counts.
inline Sweep sweep(const std::vector<Interval> &iv, const std::vector<uint64_t> &bounds) {
    Sweep s;
    s.level.assign(bounds.size() + 1, std::array<uint64_t, kLevels>{});
    s.alone.assign(iv.size(), 0);
    if (iv.empty()) return s;
    // Points where the count can change: every start (+1), end (−1) and bound (0).
    struct Point {
        uint64_t t;
        int delta;
        size_t which;
    };
    std::vector<Point> pts;
    for (size_t i = 0; i < iv.size(); ++i) {
        if (iv[i].end <= iv[i].start) continue;  // empty: never open
        pts.push_back({iv[i].start, +1, i});
        pts.push_back({iv[i].end, -1, i});
    }
    for (uint64_t b : bounds) pts.push_back({b, 0, 0});
    // At one time, ends before bounds before starts: an interval ending where another starts
    // leaves no gap and no overlap.
    std::sort(pts.begin(), pts.end(), [](const Point &a, const Point &b) {
        return a.t != b.t ? a.t < b.t : a.delta < b.delta;
    });
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const Interval &x : iv)
        if (x.end > x.start) {
            lo = std::min(lo, x.start);
            hi = std::max(hi, x.end);
        }
    std::vector<size_t> open;  // indices of the open intervals
    for (size_t p = 0; p + 1 < pts.size(); ++p) {
        const Point &pt = pts[p];
        if (pt.delta > 0) open.push_back(pt.which);
        if (pt.delta < 0) open.erase(std::find(open.begin(), open.end(), pt.which));
        const uint64_t a = pt.t, b = pts[p + 1].t;
        if (b == a || a < lo || b > hi) continue;  // nothing between, or outside the span
        const size_t seg =
            (size_t)(std::upper_bound(bounds.begin(), bounds.end(), a) - bounds.begin());
        const size_t n = open.size();
        s.level[seg][std::min<size_t>(n, kLevels - 1)] += b - a;
        if (n == 1) s.alone[open[0]] += b - a;
        // A gap: no interval open (a bound inside it does not split it).
        if (n == 0) {
            if (!s.gaps.empty() && s.gaps.back().to == a)
                s.gaps.back().to = b;  // a bound fell inside the gap
            else
                s.gaps.push_back({a, b});
        }
    }
    std::sort(s.gaps.begin(), s.gaps.end(), [](const Gap &x, const Gap &y) {
        return x.to - x.from > y.to - y.from;
    });
    return s;
}

}  // namespace fh::bench
