/* The CUDA step against the CPU reference (the oracle), tensor by tensor: every parameter,
 * target, state tensor, step output and metric, from the same seed and batches.
 *
 * Error per tensor: ||gpu - cpu||_2 / ||cpu||_2; per metric |gpu - cpu| / |cpu|. Bounds:
 * - strict FP32, after 1 step: <= 1e-5 (the contract). The GEMMs sum in another order than
 *   OpenBLAS; everything else mirrors the CPU's arithmetic (the task files in cuda/).
 * - after 20 steps (strict) and with TF32: the measured numbers are printed ([ACCURACY] lines),
 *   the asserted bounds are below kBounds' comment and in docs/cuda.md. (Adam's first steps
 *   turn any gradient into ±lr, so a gradient element near zero whose sign differs would move
 *   its parameter by 2·lr; with TF32 that is what grows the parameter error.)
 * attn.bk is pure rounding noise (test_cuda_util.h) and is checked apart: |gpu - cpu| <= 2·lr·steps.
 *
 * Sizes: the test config (B = 32), config variants at 1 step, a mid-size config (default widths,
 * B = 2048) for 20 steps, and the default config (B = 16384) for FOXHUNT_TEST_DEFAULT_STEPS
 * steps (3 unless set; the CPU reference takes seconds per step there).
 * Skipped without a CUDA device. */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

struct Bounds {
    double strict1, strictN, tf32_1, tf32N, bf16_1, bf16N;
    double bf16_median;  /* BF16: the median of the per-tensor errors, at any step */
};

/* CPU and CUDA pipelines (strict; with `fast` also TF32 and BF16) on the same batches; compare
 * after step 1 and after the last step. */
void run(const char *name, const fh_config &base, int steps, const Bounds &bd,
         bool fast = true) {
    fh_config cc = base;
    cc.backend = FH_BACKEND_CPU;
    fh_pipeline *cpu = make(cc);
    const int maths[3] = {FH_MATH_STRICT, FH_MATH_TF32, FH_MATH_BF16};
    const char *names[3] = {"strict", "tf32", "bf16"};
    const int nmodes = fast ? 3 : 1;
    fh_pipeline *g[3] = {};
    for (int m = 0; m < nmodes; ++m) g[m] = make(cuda_config(base, maths[m], base.exec_mode));
    Batches bt(base, 1000, steps);
    for (int k = 0; k < steps; ++k) {
        step(cpu, bt.b[(size_t)k]);
        for (int m = 0; m < nmodes; ++m) step(g[m], bt.b[(size_t)k]);
        if (k != 0 && k != steps - 1) continue;
        const int done = k + 1;
        const double bk_bound = 2.0 * base.lr_aux * done + 1e-6;
        for (int mode = 0; mode < nmodes; ++mode) {
            char what[160];
            snprintf(what, sizeof what, "%s %s %d step%s", name, names[mode], done,
                     done == 1 ? "" : "s");
            const double tol = mode == 0   ? (done == 1 ? bd.strict1 : bd.strictN)
                               : mode == 1 ? (done == 1 ? bd.tf32_1 : bd.tf32N)
                                           : (done == 1 ? bd.bf16_1 : bd.bf16N);
            Diff d = compare(g[mode], cpu);
            print_diff(what, d);
            if (!(d.max_rel <= tol))
                fail_msg("%s: %s rel. error %.3e > %.1e", what, d.worst.c_str(), d.max_rel, tol);
            if (mode == 2 && !(d.median_tensor <= bd.bf16_median))
                fail_msg("%s: median tensor error %.3e > %.1e", what, d.median_tensor,
                         bd.bf16_median);
            if (!(d.bk_abs <= bk_bound))
                fail_msg("%s: attn.bk |diff| %.3e > %.3e", what, d.bk_abs, bk_bound);
        }
    }
    fh_pipeline_destroy(cpu);
    for (fh_pipeline *p : g) fh_pipeline_destroy(p);
}

/* strict after 1 step: the contract (1e-5). Measured on the H200 (2026-11-29, deterministic, so
 * a rerun gives the same numbers): strict <= 4.1e-7 after 1, 3 and 20 steps; TF32 <= 6.2e-4
 * per tensor after 1 step, <= 1.9e-3 after 3 steps (B = 16384), <= 7.8e-4 after 20 steps
 * (B = 2048), and 1.2e-2 for the metric q_mean after 1 step at B = 2048, where q_mean = 3e-5
 * is a cancellation. The bounds keep a margin of 20x or more over those.
 * BF16 (2026-12-01): <= 5.9e-3 per tensor at B = 32 and 2048 after 1 and 20 steps, 4.2e-2 for
 * q_mean (the cancellation above); at B = 16384 the zero-initialised branch biases q.c.b reach
 * 0.17 after 1 step and their targets 0.12 after 3: their gradient is a sum over 16384 rows
 * near zero, and Adam's first step turns each element into ±lr, so an element whose sign the
 * bfloat16 rounding flips is off by 2·lr (the TF32 remark above, eight times as often). So
 * BF16's worst tensor is bounded loosely (0.5, against O(1) for a wrong product) and its median
 * tensor tightly. */
const Bounds kBounds = {1e-5, 1e-5, 5e-2, 5e-2, 0.5, 0.5, 1e-2};

void use_all_cores() {
    if (openblas_set_num_threads) openblas_set_num_threads(16);
}

void test_small_20_steps(void **) {
    if (!fh_test_have_cuda()) skip();
    run("small (B=32)", fh_test_small_config(), 20, kBounds);
}

void test_small_variants_1_step(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c = fh_test_small_config();
    {
        fh_config v = c;
        v.goal_dim = 0;
        run("variant G=0 (no HER)", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        v.sn_layers = FH_SN_W1 | FH_SN_W2;
        run("variant SN on W1 and W2", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        v.num_regimes = 1;
        v.cql_alpha = 0;
        run("variant R=1, cql_alpha=0", v, 1, kBounds, false);
        v.num_branches = 2;  /* nothing on lane 3: three lanes in all */
        run("variant NB=2, R=1, cql_alpha=0", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        v.num_branches = 6;  /* more branches than branch lanes */
        v.her_reward = FH_HER_REWARD_DENSE;
        run("variant NB=6, dense HER", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        /* Rows and goals longer than one round of HER's loads (cuda/her.cu: 128 row floats and
         * 32 goal floats a warp): the rewards come from the distance over both goal chunks. */
        v.obs_dim = 260;
        v.goal_dim = 36;
        v.her_reward = FH_HER_REWARD_SPARSE;
        v.her_terminal_on_success = 1;
        run("variant O=260, G=36, sparse HER", v, 1, kBounds, false);
        v.her_reward = FH_HER_REWARD_DENSE;
        run("variant O=260, G=36, dense HER", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        v.exec_mode = FH_EXEC_SINGLE_STREAM;
        v.sn_layers = 0;
        run("variant single-stream, no SN", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        /* Heads wider than 128: the IQL and attention reward heads' general kernels (the ones up
         * to 128 keep their columns in registers). */
        v.iql_hidden = 160;
        v.attn_head_hidden = 136;
        run("variant IQL and reward heads wider than 128", v, 1, kBounds, false);
    }
    {
        /* Branch shapes: A = 12 with ddqn's branches packed (NB·A <= H); A = 40 over
         * branch_hidden = 40, packed; one branch (never packed). */
        fh_config v = c;
        v.actions_per_branch = 12;
        v.trunk_hidden = 48;
        run("variant A=12, H=48 (packed heads)", v, 1, kBounds, false);
        v.num_branches = 2;
        v.actions_per_branch = 40;
        v.branch_hidden = 40;
        v.trunk_hidden = 96;
        run("variant NB=2, A=40, HB=40 (packed heads)", v, 1, kBounds, false);
        v.num_branches = 1;
        v.actions_per_branch = 4;
        run("variant NB=1", v, 1, kBounds, false);
    }
    {
        fh_config v = c;
        v.batch_size = 1000;  /* not a multiple of any block size */
        v.clip_norm = 1e-3f;  /* clipping active */
        run("variant B=1000, clip active", v, 2, kBounds, false);
        /* The regime scales' sums at their widest: every regime a few of the 1000 rows, in
         * blocks of 256 rows and a partial last block (regime.cu). */
        v.num_regimes = FH_MAX_REGIMES;
        run("variant B=1000, R=64", v, 2, kBounds, false);
    }
}

void test_mid_20_steps(void **) {
    if (!fh_test_have_cuda()) skip();
    use_all_cores();
    run("mid (defaults, B=2048)", default_config(2048), 20, kBounds);
}

void test_default_config(void **) {
    if (!fh_test_have_cuda()) skip();
    use_all_cores();
    int steps = 3;
    if (const char *e = getenv("FOXHUNT_TEST_DEFAULT_STEPS")) steps = atoi(e) > 0 ? atoi(e) : 3;
    run("default (B=16384)", default_config(16384), steps, kBounds);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_20_steps),
        cmocka_unit_test(test_small_variants_1_step),
        cmocka_unit_test(test_mid_20_steps),
        cmocka_unit_test(test_default_config),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
