// foxhunt-timeline's overlap analysis (bench/timeline_sweep.hpp) on intervals whose answers are
// worked out by hand below: the time with 0, 1, 2 and 3+ intervals open, per segment between
// bounds; the gaps with none open; each interval's time alone.
#include "../bench/timeline_sweep.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

using fh::bench::Interval;
using fh::bench::sweep;

namespace {

void expect_levels(const std::array<uint64_t, fh::bench::kLevels> &got, uint64_t l0, uint64_t l1,
                   uint64_t l2, uint64_t l3) {
    assert_int_equal(got[0], l0);
    assert_int_equal(got[1], l1);
    assert_int_equal(got[2], l2);
    assert_int_equal(got[3], l3);
}

}  // namespace

// A [0, 10), B [5, 15), C [20, 30): one open on [0, 5), [10, 15) and [20, 30) (20), two on
// [5, 10) (5), none on [15, 20) (5, the only gap); A alone 5, B 5, C 10.
static void test_two_overlapping_and_one_apart(void **) {
    const std::vector<Interval> iv = {{0, 10}, {5, 15}, {20, 30}};
    const auto s = sweep(iv, {});
    assert_int_equal(s.level.size(), 1);
    expect_levels(s.level[0], 5, 20, 5, 0);
    assert_int_equal(s.gaps.size(), 1);
    assert_int_equal(s.gaps[0].from, 15);
    assert_int_equal(s.gaps[0].to, 20);
    assert_int_equal(s.alone[0], 5);
    assert_int_equal(s.alone[1], 5);
    assert_int_equal(s.alone[2], 10);
}

// The same cut at 12 and at 17 (inside the gap): segment 0 [0, 12): one open 5 + 2, two 5;
// segment 1 [12, 17): one 3, none 2; segment 2 [17, 30): none 3, one 10. The gap stays one
// gap of 5 across the bound.
static void test_bounds_split_the_time(void **) {
    const std::vector<Interval> iv = {{0, 10}, {5, 15}, {20, 30}};
    const auto s = sweep(iv, {12, 17});
    assert_int_equal(s.level.size(), 3);
    expect_levels(s.level[0], 0, 7, 5, 0);
    expect_levels(s.level[1], 2, 3, 0, 0);
    expect_levels(s.level[2], 3, 10, 0, 0);
    assert_int_equal(s.gaps.size(), 1);
    assert_int_equal(s.gaps[0].to - s.gaps[0].from, 5);
}

// D [0, 4), E [1, 3), F [2, 6), G [2, 3): one open on [0, 1) and [4, 6) (3), two on [1, 2) and
// [3, 4) (2), four on [2, 3) (1, counted as 3+); D alone 1, F alone 2, E and G never.
static void test_three_or_more(void **) {
    const std::vector<Interval> iv = {{0, 4}, {1, 3}, {2, 6}, {2, 3}};
    const auto s = sweep(iv, {});
    expect_levels(s.level[0], 0, 3, 2, 1);
    assert_int_equal(s.alone[0], 1);
    assert_int_equal(s.alone[1], 0);
    assert_int_equal(s.alone[2], 2);
    assert_int_equal(s.alone[3], 0);
    assert_true(s.gaps.empty());
}

// One interval ending where the next starts: no gap, no overlap. Gaps come longest first.
static void test_touching_intervals_and_gap_order(void **) {
    const std::vector<Interval> iv = {{0, 5}, {5, 10}, {12, 13}, {20, 21}};
    const auto s = sweep(iv, {});
    expect_levels(s.level[0], 9, 12, 0, 0);
    assert_int_equal(s.gaps.size(), 2);
    assert_int_equal(s.gaps[0].from, 13);
    assert_int_equal(s.gaps[0].to, 20);
    assert_int_equal(s.gaps[1].from, 10);
    assert_int_equal(s.gaps[1].to, 12);
}

// Nothing traced: no time, no gap; bounds before the first start count nothing; an empty
// interval counts nothing.
static void test_empty_and_bounds_outside(void **) {
    const auto e = sweep({}, {3});
    assert_int_equal(e.level.size(), 2);
    expect_levels(e.level[0], 0, 0, 0, 0);
    assert_true(e.gaps.empty());
    const auto s = sweep({{10, 20}}, {5});
    expect_levels(s.level[0], 0, 0, 0, 0);
    expect_levels(s.level[1], 0, 10, 0, 0);
    assert_true(s.gaps.empty());
    // An empty interval [7, 7) is never open and does not widen the span.
    const auto z = sweep({{7, 7}, {10, 20}}, {});
    expect_levels(z.level[0], 0, 10, 0, 0);
    assert_int_equal(z.alone[0], 0);
    assert_int_equal(z.alone[1], 10);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_overlapping_and_one_apart),
        cmocka_unit_test(test_bounds_split_the_time),
        cmocka_unit_test(test_three_or_more),
        cmocka_unit_test(test_touching_intervals_and_gap_order),
        cmocka_unit_test(test_empty_and_bounds_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
