// SPEC §5.0's sampling and §2.1's episode bookkeeping (src/replay_math.hpp, src/replay.cpp)
// against the independent reference of replay_ref.hpp: the SPEC's known answers; exact
// indices and gathered batches on crafted and random rings (several environments, the ring's
// wrap-around, episodes open at the newest row, episodes whose start was overwritten, inserts
// longer than the ring); HER offsets that never leave their episode; and chi-square tests that
// rows, environments and HER offsets are drawn uniformly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "config.hpp"
#include "replay.hpp"
#include "replay_math.hpp"
#include "replay_ref.hpp"
#include "testutil.h"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}


using namespace fh;

namespace {

// Draws of the library (host) after the history `h` was inserted, against the reference:
// every index, and every gathered tensor of the batch bit for bit.
void expect_same_batch(const fh_config &c, const HostReplay &rp, const replay_ref::Rows &h,
                       uint64_t step, uint32_t row0) {
    const Dims d = make_dims(c);
    HostBatch got;
    std::vector<ReplayDraw> draws(d.B);
    rp.sample(c.seed, step, row0, host_batch_dst(d, got), draws.data());
    std::vector<replay_ref::Draw> want;
    const replay_ref::Batch b = replay_ref::batch(c.seed, step, row0, d.B, h, d.K, &want);
    for (uint32_t i = 0; i < d.B; ++i) {
        const ReplayDraw &g = draws[i];
        const replay_ref::Draw &w = want[i];
        if (g.row != w.row || g.env != w.env || g.rows_after != w.f || g.her_offset != w.o)
            fail_msg("step %llu, i %u: (n, e, f, o) = (%llu, %u, %llu, %llu), reference (%llu, "
                     "%u, %llu, %llu)", (unsigned long long)step, i, (unsigned long long)g.row,
                     g.env, (unsigned long long)g.rows_after, (unsigned long long)g.her_offset,
                     (unsigned long long)w.row, w.env, (unsigned long long)w.f,
                     (unsigned long long)w.o);
        assert_int_equal(g.slot, w.row % d.K);
        assert_int_equal(g.her_slot, (w.row + w.o) % d.K);
        // The HER goal comes from the same episode: no episode ends before row n + o, which
        // is valid.
        assert_true(w.row + w.o < h.R);
        for (uint64_t m = w.row; m < w.row + w.o; ++m) assert_false(h.ends(m, w.env));
    }
    auto same = [](const auto &a, const auto &b) {
        assert_int_equal(a.size(), b.size());
        assert_memory_equal(a.data(), b.data(), a.size() * sizeof(a[0]));
    };
    same(got.obs, b.obs);
    same(got.next_obs, b.next_obs);
    same(got.goal, b.goal);
    same(got.next_achieved_goal, b.nag);
    same(got.her_goal, b.her_goal);
    same(got.action, b.action);
    same(got.reward, b.reward);
    same(got.done, b.done);
    same(got.regime, b.regime);
}

}  // namespace

// SPEC §5.0: seed 0, step 0, i = 0..3; N·E = 7000 with E = 7; f = 9.
static void test_spec_known_answers(void **state) {
    (void)state;
    const uint32_t w[4][2] = {{0x710b8867, 0x00236596}, {0x32cde2b3, 0xa868072d},
                              {0x02dd5f19, 0xddf94b43}, {0x4d92ca10, 0xcad1e77b}};
    const uint64_t j[4] = {3091, 1389, 78, 2121}, e[4] = {4, 3, 1, 0}, a[4] = {441, 198, 11, 303};
    const uint64_t o[4] = {0, 6, 8, 7};
    for (uint32_t i = 0; i < 4; ++i) {
        const Words x = philox(0, i, 0, 0, PURPOSE_REPLAY);
        assert_int_equal(x.w[0], w[i][0]);
        assert_int_equal(x.w[1], w[i][1]);
        assert_int_equal(replay_index(x.w[0], 7000), j[i]);
        assert_int_equal(replay_her_offset(x.w[1], 9), o[i]);
    }
    // The same through replay_draw on a full ring of K = 1000 rows of E = 7 environments whose
    // episodes all have 10 rows (rows 9, 19, ... end theirs): a = age = row, and the sampled
    // rows 441, 198, 11 and 303 have f = 8, 1, 8 and 6.
    const uint64_t K = 1000;
    std::vector<uint8_t> ends(K * 7);
    for (uint64_t n = 0; n < K; ++n)
        for (int k = 0; k < 7; ++k) ends[n * 7 + k] = n % 10 == 9;
    std::vector<uint32_t> end_slot(K * 7, kEpisodeOpen);
    std::vector<uint64_t> open(7, 0);
    for (uint32_t k = 0; k < 7; ++k)
        replay_close_episodes(k, 0, K, K, 7, ends.data(), end_slot.data(), open.data());
    for (uint32_t i = 0; i < 4; ++i) {
        const ReplayDraw d = replay_draw(0, i, 0, K, K, 7, end_slot.data());
        assert_int_equal(d.env, e[i]);
        assert_int_equal(d.row, a[i]);
        assert_int_equal(d.rows_after, 9 - a[i] % 10);
    }
}

// Hand-made episodes in E = 3 columns of a ring of K = 5, inserted one row at a time: open
// episodes at the newest row, the wrap-around, episodes whose start was overwritten.
static void test_crafted_ring(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(5, 3, 64);
    const Dims d = make_dims(c);
    HostReplay rp(d);
    replay_ref::Rows h(c);
    // episode_end per row (columns e = 0, 1, 2): column 0 ends every 2nd row, column 1 never
    // (one open episode that outgrows the ring), column 2 at rows 2 and 9 only.
    const int ends[12][3] = {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 0}, {0, 0, 0}, {1, 0, 0},
                             {0, 0, 0}, {1, 0, 0}, {0, 0, 0}, {1, 0, 1}, {0, 0, 0}, {1, 0, 0}};
    for (uint32_t n = 0; n < 12; ++n) {
        replay_ref::Rows r = replay_ref::random_rows(c, 1, 100 + n, 0.0);
        for (uint32_t k = 0; k < 3; ++k) {
            r.episode_end[k] = (uint8_t)ends[n][k];
            r.done[k] = (uint8_t)(ends[n][k] && k == 2);
        }
        rp.insert(r.view());
        h.append(r);
        for (uint64_t step = 0; step < 3; ++step) expect_same_batch(c, rp, h, step, 0);
    }
    // After 12 rows the ring holds rows 7..11. Column 1's episode began at row 0 (overwritten)
    // and is open: f = 11 - n. Column 2's row 9 ends an episode that began at row 3.
    std::vector<ReplayDraw> draws(d.B);
    HostBatch out;
    rp.sample(c.seed, 7, 0, host_batch_dst(d, out), draws.data());
    int seen_open = 0;
    for (const ReplayDraw &w : draws) {
        assert_true(w.row >= 7 && w.row <= 11);
        if (w.env == 1) assert_int_equal(w.rows_after, 11 - w.row), ++seen_open;
        if (w.env == 2 && w.row <= 9) assert_int_equal(w.rows_after, 9 - w.row);
        if (w.env == 0) assert_int_equal(w.rows_after, (w.row % 2) ? 0 : 1);
    }
    assert_true(seen_open > 0);
}

// Random rings: sizes from one row up, 1..8 environments, inserts of 1 row to more than the
// ring, short and long episodes; a rank offset row0 as SPEC §9 has it.
static void test_random_rings(void **state) {
    (void)state;
    const uint32_t Ks[] = {1, 2, 7, 64};
    const uint32_t Es[] = {1, 3, 8};
    const double p_end[] = {0.0, 0.05, 0.5, 1.0};
    uint64_t seed = 1;
    for (uint32_t K : Ks)
        for (uint32_t E : Es)
            for (double p : p_end) {
                fh_config c = replay_ref::config(K, E, 40);
                c.seed = seed * 977;
                HostReplay rp(make_dims(c));
                replay_ref::Rows h(c);
                for (int ins = 0; ins < 12; ++ins) {
                    const uint32_t R = 1 + (uint32_t)(replay_ref::splitmix(seed) % (2 * K + 2));
                    const replay_ref::Rows r = replay_ref::random_rows(c, R, ++seed, p);
                    rp.insert(r.view());
                    h.append(r);
                    assert_int_equal(rp.rows_inserted(), h.R);
                    expect_same_batch(c, rp, h, (uint64_t)ins * 3, 0);
                    expect_same_batch(c, rp, h, (uint64_t)ins * 3 + 1, 40u * (uint32_t)ins);
                }
            }
}

// The ring's image (a checkpoint's replay) restores a replay that samples the same.
static void test_image_restores(void **state) {
    (void)state;
    const fh_config c = replay_ref::config(9, 4, 50);
    HostReplay a(make_dims(c)), b(make_dims(c));
    replay_ref::Rows h(c);
    for (int k = 0; k < 5; ++k) {
        const replay_ref::Rows r = replay_ref::random_rows(c, 4, 200 + k, 0.2);
        a.insert(r.view());
        h.append(r);
    }
    b.restore(a.image());
    assert_int_equal(b.rows_inserted(), h.R);
    expect_same_batch(c, b, h, 3, 0);
    // Both continue alike after more rows (the open episodes' bookkeeping came back too).
    const replay_ref::Rows more = replay_ref::random_rows(c, 3, 300, 0.2);
    a.insert(more.view());
    b.insert(more.view());
    h.append(more);
    expect_same_batch(c, a, h, 4, 0);
    expect_same_batch(c, b, h, 4, 0);
}

namespace {

// Chi-square statistic of `counts` against equal expected counts.
double chi_square(const std::vector<uint64_t> &counts) {
    double total = 0;
    for (uint64_t x : counts) total += (double)x;
    const double expect = total / (double)counts.size();
    double chi = 0;
    for (uint64_t x : counts) chi += ((double)x - expect) * ((double)x - expect) / expect;
    return chi;
}

// The upper 0.1% point of chi-square with df degrees of freedom (Wilson & Hilferty 1931;
// within 0.5% of the exact value for df >= 9): the significance level of these tests.
double chi_square_999(double df) {
    const double z = 3.0902323;  // the standard normal's 0.999 quantile
    const double t = 1.0 - 2.0 / (9.0 * df) + z * std::sqrt(2.0 / (9.0 * df));
    return df * t * t * t;
}

}  // namespace

// Rows and environments are drawn uniformly: 10^6 draws (100 steps of B = 10^4, seed 5) over
// the 200 transitions of a wrapped ring (K = 50, E = 4, 130 rows inserted); and the index j
// over N·E = 3·2^30 transitions, counted in 256 equal bins. Significance 0.1%; the same test
// rejects j = w0 mod N·E (modulo bias: the first third of the range twice as likely), so it
// can fail.
static void test_uniform_chi_square(void **state) {
    (void)state;
    const uint32_t K = 50, E = 4, B = 10000;
    fh_config c = replay_ref::config(K, E, B);
    c.seed = 5;
    const Dims d = make_dims(c);
    HostReplay rp(d);
    rp.insert(replay_ref::random_rows(c, 130, 9, 0.1).view());
    HostBatch out;
    std::vector<ReplayDraw> draws(B);
    std::vector<uint64_t> cells(K * E, 0);
    for (uint32_t step = 0; step < 100; ++step) {
        rp.sample(c.seed, step, 0, host_batch_dst(d, out), draws.data());
        for (const ReplayDraw &w : draws) ++cells[(w.row - (130 - K)) * E + w.env];
    }
    const double chi_cells = chi_square(cells), crit_cells = chi_square_999(K * E - 1);
    printf("rows x envs: chi-square %.1f, 0.1%% critical value %.1f (df %u)\n", chi_cells,
           crit_cells, K * E - 1);
    assert_true(chi_cells < crit_cells);

    const uint64_t NE = 3ull << 30;
    std::vector<uint64_t> bins(256, 0), biased(256, 0);
    for (uint32_t i = 0; i < 1000000; ++i) {
        const Words w = philox(c.seed, i, 0, 1000, PURPOSE_REPLAY);
        ++bins[replay_index(w.w[0], NE) * 256 / NE];
        ++biased[(w.w[0] % NE) * 256 / NE];
    }
    const double chi_j = chi_square(bins), chi_bad = chi_square(biased);
    const double crit_j = chi_square_999(255);
    printf("j over 3*2^30: chi-square %.1f (modulo-biased %.1f), critical %.1f\n", chi_j,
           chi_bad, crit_j);
    assert_true(chi_j < crit_j);
    assert_true(chi_bad > crit_j);
}

// HER offsets are uniform over 0..f: a row with f = 9 (episode of 10 rows), 10^5 draws.
static void test_her_offset_chi_square(void **state) {
    (void)state;
    std::vector<uint64_t> counts(10, 0);
    for (uint32_t i = 0; i < 100000; ++i) {
        const Words w = philox(11, i, 0, 3, PURPOSE_REPLAY);
        const uint64_t o = replay_her_offset(w.w[1], 9);
        assert_true(o <= 9);
        ++counts[o];
    }
    const double chi = chi_square(counts), crit = chi_square_999(9);
    printf("HER offset over 0..9: chi-square %.2f, critical %.2f\n", chi, crit);
    assert_true(chi < crit);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_known_answers),
        cmocka_unit_test(test_crafted_ring),
        cmocka_unit_test(test_random_rings),
        cmocka_unit_test(test_image_restores),
        cmocka_unit_test(test_uniform_chi_square),
        cmocka_unit_test(test_her_offset_chi_square),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
