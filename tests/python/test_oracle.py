"""libfoxhunt's CPU step against the PyTorch oracle (oracle_torch.py), tensor by tensor.

Each comparison is the relative error per tensor, ||lib - ref|| / ||ref||, the reference in
float64. Parameters are also compared by their update p_after - p_before ("delta"), which is
what a step computes, beyond the one float32 ulp per element that storing the parameter allows
(update_err); in most configs adam_eps = 1e-2 makes that update nearly linear in the gradient
(lockstep.LINEAR_ADAM), so gradients are compared with their magnitudes.

A test that depends on a learner (directly, or through a value it feeds: CQL and the confidence
target need IQL/IQN, the global-norm clip needs every Q-net gradient) also asserts that the
learner ran: a loss of exactly 0 where the oracle's is not fails.
"""
import numpy as np
import pytest

import lockstep as ls
import oracle_torch as ot

# Tolerances (see the module doc and README of the report for what was reached)
RTOL_VALUE_1 = 1e-5    # any tensor or metric after 1 step
ATOL_METRIC = 1e-8     # metrics that are means of signed terms (q_mean) can cancel to ~1e-5
#                        of their terms; float32 rounding of the terms then shows absolutely
RTOL_DELTA_1 = 1e-4    # parameter updates of 1 step (adam_eps = 1e-2: gradient-linear)
RTOL_DELTA_1_SIGN = 1e-3  # ... with adam_eps = 1e-8, where the update is lr * g / (|g| + eps):
#                           elements with |g| ~ eps turn float32 rounding of g into update
#                           error (reached: 1.2e-4 at the SPEC defaults)
RTOL_VALUE_10 = 1e-5   # after 10 steps (reached: ~2e-7 on the TD path)
RTOL_DELTA_10 = 1e-3   # summed updates of 10 steps (reached: ~5e-6 on the TD path)
ULP_INIT_U = 2         # spectral u at init: float32 normalize may differ by an ulp or two

VARIANTS = ["fresh", "written"]
CONFIG_NAMES = list(ls.CONFIGS)
ALL_LEARNERS = ["iql", "iqn", "attn", "cql", "conf", "ensemble"]


@pytest.fixture(scope="module")
def runs(foxhunt_lib):
    cache = {}

    def get(name, steps=1, variant="fresh"):
        key = (name, steps, variant)
        if key not in cache:
            cache[key] = ls.run_lockstep(foxhunt_lib, ls.config(name), steps,
                                         data_seed=1000 + CONFIG_NAMES.index(name),
                                         write_random=variant == "written")
        return cache[key]
    return get


# ---- helpers --------------------------------------------------------------------------------


def q_gradient_deps(run):
    """Learners whose gradients enter the Q-net gradient (and so grad_norm and the clip)."""
    deps = ["conf", "ensemble", "iql", "iqn"]
    if run.config.cql_alpha > 0:
        deps += ["cql"]
    return deps


def clip_active(run):
    return any(m["grad_norm"] > run.config.clip_norm for m in run.ref_metrics)


def expect_learners(request, run, learners):
    """Every learner the test depends on must report a loss where the oracle's is not 0."""
    missing = run.missing(sorted(set(learners)))
    assert not missing, "the library reports these losses as exactly 0: " + ", ".join(missing)


def kind(request, steps):
    """Label under which the errors reached are recorded."""
    return "%d step%s" % (steps, "s" if steps > 1 else "")


def update_err(after, before, ref_after, ref_before):
    """||excess|| / ||ref update||, excess = |lib update - ref update| less one float32 ulp of
    the parameter per element. Both sides store parameters in float32 (the oracle rounds its
    float64 step's result, oracle_torch.py), so where the exact new value lies near a rounding
    midpoint, float32 noise in the library's gradient far below the tolerance can flip the
    stored value by one ulp: with updates of 1e-4 of the weights that one ulp alone is ~1e-3 of
    the element's update (a 1.87e-4 update error on iqn.Wphi, qclip_cql, on one machine and not
    on another). An error of the update itself still shows, above that resolution."""
    lib_d = np.asarray(after, np.float64) - np.asarray(before, np.float64)
    ref_d = np.asarray(ref_after, np.float64) - np.asarray(ref_before, np.float64)
    ulp = np.spacing(np.abs(np.asarray(ref_after, np.float32))).astype(np.float64)
    excess = np.maximum(np.abs(lib_d - ref_d) - ulp, 0.0)
    nb = np.linalg.norm(ref_d)
    return float(np.linalg.norm(excess) / nb) if nb > 0 else float(np.linalg.norm(lib_d))


def tensor_errors(run, names, rtol, drtol, kind):
    """Failures (as text) of the named tensors; also records the errors reached."""
    fails = []
    if drtol == RTOL_DELTA_1 and run.config.adam_eps < 1e-4:
        drtol = RTOL_DELTA_1_SIGN
    steps = len(run.ref_metrics)
    for n in names:
        a, b = run.lib_after[n], run.ref_after[n]
        if n in ls.ZERO_GRADIENT:
            bound = 3 * run.config.lr_aux * steps
            err = float(np.abs(a.astype(np.float64) - b).max())
            if err > bound:
                fails.append("%s: |lib - ref| = %.2e > %.1e (zero-gradient tensor)"
                             % (n, err, bound))
            continue
        e = ls.rel_err(a, b)
        ls.record(kind, ls.family(n), e)
        if not e <= rtol:
            fails.append("%s: rel err %.2e > %.0e" % (n, e, rtol))
        # updates of parameters only: a target's EMA update tau (theta - theta_bar) and the
        # state's updates are a few float32 ulps of the value, so only values are compared
        if drtol is not None and n in run.lib_before and not n.startswith(
                ("sn.", "regime.", "target.")):
            d = update_err(a, run.lib_before[n], b, run.ref_before[n])
            ls.record(kind + " (update)", ls.family(n), d)
            if not d <= drtol:
                fails.append("%s: update rel err %.2e > %.0e" % (n, d, drtol))
    return fails


def metric_errors(run, keys, rtol, kind, steps=None):
    fails = []
    for s, (lm, rm) in enumerate(zip(run.lib_metrics, run.ref_metrics)):
        if steps is not None and s not in steps:
            continue
        for k in keys:
            if k == "num_relabelled" or k == "step":
                if lm[k] != rm[k]:
                    fails.append("step %d %s: lib %s, ref %s" % (s + 1, k, lm[k], rm[k]))
                continue
            e = ls.metric_err(lm, rm, k)
            ls.record(kind, "metric " + k, e)
            absdiff = float(np.abs(np.subtract(lm[k], rm[k], dtype=np.float64)).max())
            if not (e <= rtol or absdiff <= ATOL_METRIC):
                fails.append("step %d %s: lib %s, ref %s (rel err %.2e > %.0e)"
                             % (s + 1, k, lm[k], rm[k], e, rtol))
    return fails


def check(fails):
    assert not fails, "\n".join(fails)


def names_in(run, *families):
    return [n for n in run.lib_names if ls.family(n) in families]


params = pytest.mark.parametrize("variant", VARIANTS)
configs = pytest.mark.parametrize("name", CONFIG_NAMES)


# ---- initial state ----------------------------------------------------------------------------


@configs
def test_tensor_names_order_and_shapes(foxhunt_lib, name):
    c = ls.config(name)
    with ls.open_pipeline(foxhunt_lib, c) as p:
        listed = p.tensors()
    specs = ot.param_specs(c)
    assert [(n, tuple(s)) for n, s, _, _ in specs] == \
        [(n, tuple(s)) for n, s, _ in listed[:len(specs)]], "SPEC §3 order and shapes"
    names = {n for n, _, _ in listed}
    expect = set(ot.initial_state(c)) | set(ls.OUTPUTS)
    assert names == expect


@configs
def test_initial_state_identical(foxhunt_lib, name):
    c = ls.config(name)
    ref = ot.initial_state(c)
    fails = []
    with ls.open_pipeline(foxhunt_lib, c) as p:
        for n, want in ref.items():
            got = p.read(n)
            if n.startswith("sn.u."):
                ulps = np.abs(got.view(np.int32) - want.view(np.int32)).max()
                if ulps > ULP_INIT_U:
                    fails.append("%s differs by %d ulp" % (n, ulps))
            elif not np.array_equal(got, want):
                fails.append("%s: %d elements differ, max %.3g" % (
                    n, int((got != want).sum()), float(np.abs(got - want).max())))
    check(fails)


# ---- one step, per part of SPEC §5 ------------------------------------------------------------


@configs
@params
def test_her_relabel_count(runs, request, name, variant):
    run = runs(name, 1, variant)
    check(metric_errors(run, ["num_relabelled", "step"], 0, kind(request, 1)))
    if run.config.goal_dim > 0:
        assert 0 < run.ref_metrics[0]["num_relabelled"] < run.config.batch_size


@configs
@params
def test_spectral_sigma_and_u(runs, request, name, variant):
    run = runs(name, 1, variant)
    check(metric_errors(run, ["sigma", "sigma_target"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, [n for n in run.lib_names if n.startswith("sn.u.")],
                          RTOL_VALUE_1, None, kind(request, 1)))


@configs
@params
def test_td_loss_q_mean_and_d_states(runs, request, name, variant):
    """SPEC §5.1 (HER), §5.3 (ddqn targets), §5.4 (TD loss with regime weights), d_states."""
    run = runs(name, 1, variant)
    check(metric_errors(run, ["td_loss", "q_mean"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, ["d_states"], RTOL_VALUE_1, None, kind(request, 1)))


@configs
@params
def test_q_trunk_update(runs, request, name, variant):
    """W1, b1, W2, b2, V_b, c_b: TD gradient only (all Q gradients when the clip is active)."""
    run = runs(name, 1, variant)
    if clip_active(run):
        expect_learners(request, run, q_gradient_deps(run))
    check(tensor_errors(run, names_in(run, "q_trunk"), RTOL_VALUE_1, RTOL_DELTA_1,
                        kind(request, 1)))


@configs
@params
def test_q_heads_update(runs, request, name, variant):
    """U_b, e_b: TD + CQL gradients (CQL weighted by IQL's advantage weights)."""
    run = runs(name, 1, variant)
    deps = ["cql", "iql"] if run.config.cql_alpha > 0 else []
    if clip_active(run):
        deps += q_gradient_deps(run)
    expect_learners(request, run, deps)
    check(tensor_errors(run, names_in(run, "q_heads"), RTOL_VALUE_1, RTOL_DELTA_1,
                        kind(request, 1)))


@configs
@params
def test_confidence_output(runs, request, name, variant):
    """c = 1/(1 + sqrt(u(x~))) from the online head before the update (SPEC §6)."""
    run = runs(name, 1, variant)
    check(tensor_errors(run, ["confidence"], RTOL_VALUE_1, None, kind(request, 1)))


@configs
@params
def test_confidence_head_and_loss(runs, request, name, variant):
    """SPEC §5.5.7: target from the ensemble variance and the post-EMA target head."""
    run = runs(name, 1, variant)
    deps = ["conf", "ensemble", "iql", "iqn"]
    if clip_active(run):
        deps += q_gradient_deps(run)
    expect_learners(request, run, deps)
    check(metric_errors(run, ["conf_loss"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, names_in(run, "conf_head"), RTOL_VALUE_1, RTOL_DELTA_1,
                          kind(request, 1)))


@configs
@params
def test_ema_targets(runs, request, name, variant):
    """SPEC §5.5.1: theta_bar <- tau theta + (1 - tau) theta_bar from theta before Adam, for the
    Q net (incl. the confidence head) and the IQN net. (The update tau (theta - theta_bar) is
    ~2.5e-4 of the value in the written variant, so only values are compared.)"""
    run = runs(name, 1, variant)
    check(tensor_errors(run, names_in(run, "target_q", "target_iqn"), RTOL_VALUE_1, None,
                        kind(request, 1)))


@configs
@params
def test_regime_scale(runs, request, name, variant):
    """SPEC §5.5.8 (the written variant starts from random s and rho)."""
    run = runs(name, 1, variant)
    check(metric_errors(run, ["regime_scale"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, ["regime.s", "regime.scale"], RTOL_VALUE_1, None, kind(request, 1)))


@configs
@params
def test_iql(runs, request, name, variant):
    """SPEC §5.5.2: expectile losses against Qbar_sa, Adam (lr_aux), both trainers."""
    run = runs(name, 1, variant)
    expect_learners(request, run, ["iql"])
    check(metric_errors(run, ["iql_loss_hi", "iql_loss_lo"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, names_in(run, "iql_hi", "iql_lo"), RTOL_VALUE_1, RTOL_DELTA_1,
                          kind(request, 1)))


@configs
@params
def test_iqn(runs, request, name, variant):
    """SPEC §5.5.3: quantile Huber loss with Philox tau (purposes 2, 3), target after EMA."""
    run = runs(name, 1, variant)
    expect_learners(request, run, ["iqn"])
    check(metric_errors(run, ["iqn_loss"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, names_in(run, "iqn"), RTOL_VALUE_1, RTOL_DELTA_1, kind(request, 1)))


@configs
@params
def test_attention(runs, request, name, variant):
    """SPEC §4 attention reward model, §5.5.4 MSE on r~ (goal token from g~)."""
    run = runs(name, 1, variant)
    expect_learners(request, run, ["attn"])
    check(metric_errors(run, ["attn_loss"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, names_in(run, "attn"), RTOL_VALUE_1, RTOL_DELTA_1, kind(request, 1)))


@configs
@params
def test_cql_loss(runs, request, name, variant):
    """SPEC §5.5.5 (0 when cql_alpha = 0)."""
    run = runs(name, 1, variant)
    expect_learners(request, run, ["cql", "iql"] if run.config.cql_alpha > 0 else [])
    check(metric_errors(run, ["cql_loss"], RTOL_VALUE_1, kind(request, 1)))


@configs
@params
def test_ensemble(runs, request, name, variant):
    """SPEC §5.5.6: mean and population variance of {Qbar_sa, V_hi, V_lo, mean_n Z}."""
    run = runs(name, 1, variant)
    expect_learners(request, run, ["ensemble", "iql", "iqn"])
    check(metric_errors(run, ["ensemble_std"], RTOL_VALUE_1, kind(request, 1))
          + tensor_errors(run, ["ensemble_mean", "ensemble_var"], RTOL_VALUE_1, None,
                          kind(request, 1)))


@configs
@params
def test_grad_norm(runs, request, name, variant):
    """SPEC §5.6: global norm of TD + CQL + confidence gradients, before clipping."""
    run = runs(name, 1, variant)
    expect_learners(request, run, q_gradient_deps(run))
    check(metric_errors(run, ["grad_norm"], RTOL_VALUE_1, kind(request, 1)))


# ---- ten steps --------------------------------------------------------------------------------

TD_PATH_METRICS = ["step", "num_relabelled", "td_loss", "q_mean", "sigma", "sigma_target",
                   "regime_scale"]


@params
def test_ten_steps_td_path(runs, request, variant):
    """cql_alpha = 0 and no clipping: the Q net except its confidence head, its target, u,
    the regime state and d_states depend on no auxiliary learner, over any number of steps."""
    run = runs("td_only", 10, variant)
    assert not clip_active(run)
    names = [n for n in run.lib_names
             if ls.family(n) in ("q_trunk", "q_heads", "target_q", "d_states")
             or n.startswith(("sn.u.", "regime."))]
    names = [n for n in names if n not in ("target.q.w_u", "target.q.b_u")]
    check(metric_errors(run, TD_PATH_METRICS, RTOL_VALUE_10, kind(request, 10))
          + tensor_errors(run, names, RTOL_VALUE_10, RTOL_DELTA_10, kind(request, 10)))


@configs
@params
def test_ten_steps_everything(runs, request, name, variant):
    """Every tensor and every metric of every step, after 10 steps."""
    run = runs(name, 10, variant)
    expect_learners(request, run, ALL_LEARNERS)
    keys = [k for k in run.ref_metrics[0] if k != "num_regimes"]
    check(metric_errors(run, keys, RTOL_VALUE_10, kind(request, 10))
          + tensor_errors(run, run.lib_names, RTOL_VALUE_10, RTOL_DELTA_10, kind(request, 10)))
