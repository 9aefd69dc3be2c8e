"""Runs libfoxhunt (through the Python binding) and the PyTorch oracle side by side on the
same batches, and measures how far apart they are, tensor by tensor."""
import dataclasses
import os

import numpy as np

import oracle_torch as ot
from batches import make_batch

# A small configuration: every learner present, every size distinct enough to catch a
# transposed or mis-offset tensor (D = 10, H = 16, HB = 8, A = 3, T = 3).
SMALL = dict(batch_size=32, obs_dim=8, goal_dim=2, num_branches=2, actions_per_branch=3,
             trunk_hidden=16, branch_hidden=8, iql_hidden=8, iqn_hidden=8, iqn_cos=4,
             iqn_n=4, iqn_n_target=3, attn_token_dim=4, attn_d_model=8, attn_heads=2,
             attn_head_hidden=8, num_regimes=2)

# With adam_eps = 1e-2 (larger than most gradient elements) Adam's first update is close to
# lr * g / eps, linear in the gradient: comparing parameters after one step then compares
# gradients, magnitudes included. With the default eps = 1e-8 the first update is lr * sign(g)
# and only signs would be compared ("sparse_sn2" keeps the defaults for that regime).
LINEAR_ADAM = dict(adam_eps=1e-2)

# Variants covering HER (both rewards, terminal on/off), SN on W1 / W2 / both / none, CQL on
# and off, clamped outputs (with argmax ties at the clamp), global-norm clipping active,
# kappa != 1, the advantage-weight cap, the regime clamp, regime scaling with R = 1..4, a seed
# with both key words non-zero, and odd sizes throughout ("wide").
CONFIGS = {
    "sparse_sn2": dict(),
    "dense_sn12_clipped": dict(her_reward="dense", sn_layers=3, clip_norm=0.1,
                               huber_kappa=0.5, **LINEAR_ADAM),
    "sparse_noterm_sn1": dict(her_terminal_on_success=False, sn_layers=1, attn_token_dim=2,
                              num_regimes=3, regime_min=0.999, regime_max=1.001, **LINEAR_ADAM),
    "nogoal_nosn_r1": dict(goal_dim=0, sn_layers=0, num_regimes=1, **LINEAR_ADAM),
    "qclip_cql": dict(q_clip=0.012, cql_alpha=0.5, gamma=0.9, num_regimes=3, awr_beta=1.0,
                      awr_max=1.02, seed=(5 << 32) | 17, **LINEAR_ADAM),
    "td_only": dict(cql_alpha=0.0, sn_layers=3, **LINEAR_ADAM),
    "wide": dict(batch_size=37, obs_dim=12, goal_dim=3, num_branches=3, actions_per_branch=5,
                 trunk_hidden=40, branch_hidden=24, iql_hidden=20, iqn_hidden=24, iqn_cos=16,
                 iqn_n=8, iqn_n_target=6, attn_token_dim=3, attn_d_model=12, attn_heads=3,
                 attn_head_hidden=10, num_regimes=4, sn_layers=3, seed=123456789,
                 **LINEAR_ADAM),
    # SPEC §1's benchmark configuration itself (only the batch made small): D = 128, H = 256,
    # 32 attention tokens of 4 heads, 64 cosine features, Adam's eps = 1e-8
    "spec_defaults": dict(batch_size=64),
}
# configs that start from SPEC §1's defaults instead of SMALL
FROM_DEFAULTS = {"spec_defaults"}


def config(name, **over):
    kw = {} if name in FROM_DEFAULTS else dict(SMALL)
    kw.update(CONFIGS[name])
    kw.update(over)
    return ot.OracleConfig(**kw)


# Tensors whose gradient is exactly zero in exact arithmetic: the key bias shifts every score
# of a query row by the same amount, which the softmax cancels. Their updates are rounding
# noise that Adam amplifies (|update| <= about lr per step), so they are compared absolutely.
ZERO_GRADIENT = ("attn.bk",)

# tensor families, by what their values after a step depend on
OUTPUTS = ("d_states", "ensemble_mean", "ensemble_var", "confidence")


def family(name):
    if name in OUTPUTS:
        return name
    if name.startswith("target.iqn."):
        return "target_iqn"
    if name.startswith("target."):
        return "target_q"
    if name.startswith(("sn.u.", "regime.")):
        return name
    if name in ("q.w_u", "q.b_u"):
        return "conf_head"
    if name.startswith(("q.U.", "q.e.")):
        return "q_heads"
    if name.startswith("q."):
        return "q_trunk"
    return name.split(".")[0]  # iql_hi, iql_lo, iqn, attn


def random_state(c, rng):
    """Random values for every writable tensor: weights ~ N(0, 1/in), biases ~ N(0, 0.1^2),
    targets = online + noise (so the EMA is visible), non-unit u, regime state in [0.5, 2]."""
    vals = {}
    for name, shape, fan_in, _ in ot.param_specs(c):
        scale = 1.0 / np.sqrt(fan_in) if fan_in else 0.1
        vals[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    for name in list(vals):
        if name.startswith(("q.", "iqn.")):
            vals["target." + name] = (vals[name] + 0.05 * rng.standard_normal(vals[name].shape)
                                      * np.std(vals[name] + 1e-3)).astype(np.float32)
    if c.sn1:
        vals["sn.u.W1"] = rng.standard_normal(c.trunk_hidden).astype(np.float32) * 3
    if c.sn2:
        vals["sn.u.W2"] = rng.standard_normal(c.trunk_hidden).astype(np.float32) * 0.5
    if c.num_regimes > 1:  # with R = 1, rho == 1 by SPEC and the regime state is read-only
        vals["regime.s"] = rng.uniform(0.5, 2.0, c.num_regimes).astype(np.float32)
        # rho lives in [regime_min, regime_max]; the library refuses anything else.
        vals["regime.scale"] = rng.uniform(max(0.5, c.regime_min), min(2.0, c.regime_max),
                                           c.num_regimes).astype(np.float32)
    return vals


# The backend under test: the CPU reference by default; FOXHUNT_TEST_BACKEND=cuda runs the same
# comparisons against the CUDA executor (with FH_MATH_STRICT: IEEE float32 GEMMs, not TF32).
BACKEND = os.environ.get("FOXHUNT_TEST_BACKEND", "cpu")


def open_pipeline(foxhunt, c):
    extra = {"math_mode": "strict"} if BACKEND == "cuda" else {}
    return foxhunt.Pipeline(backend=BACKEND, **extra, **c.pipeline_kwargs())


@dataclasses.dataclass
class Run:
    config: ot.OracleConfig
    lib_metrics: list   # per step
    ref_metrics: list
    lib_before: dict    # every tensor before the first step
    ref_before: dict
    lib_after: dict     # every tensor after the last step
    ref_after: dict
    lib_names: list

    def missing(self, learners):
        """Learners among @p learners whose loss the library reports as exactly 0 at some
        step where the oracle's is not 0 (a learner that did not run)."""
        keys = {"iql": ("iql_loss_hi", "iql_loss_lo"), "iqn": ("iqn_loss",),
                "attn": ("attn_loss",), "cql": ("cql_loss",), "conf": ("conf_loss",),
                "ensemble": ("ensemble_std",)}
        out = []
        for learner in learners:
            for k in keys[learner]:
                if any(lm[k] == 0.0 and rm[k] != 0.0
                       for lm, rm in zip(self.lib_metrics, self.ref_metrics)):
                    out.append("%s (%s == 0)" % (learner, k))
                    break
        return out


def run_lockstep(foxhunt, c, steps, data_seed=1, write_random=False):
    p = open_pipeline(foxhunt, c)
    ref = ot.Oracle(c)
    rng = np.random.default_rng(data_seed)
    if write_random:
        for name, value in random_state(c, rng).items():
            p.write(name, value)
            ref.write(name, value)
    names = [n for n, _, _ in p.tensors()]
    state_names = [n for n in names if n not in OUTPUTS]
    lib_before = {n: p.read(n) for n in state_names}
    ref_before = {n: ref.read(n) for n in state_names}
    lib_m, ref_m = [], []
    for _ in range(steps):
        b = make_batch(c, rng)
        p.upload(**b)
        ref.upload(**b)
        p.step()
        ref.step()
        lib_m.append(p.metrics())
        ref_m.append(ref.metrics())
    lib_after = {n: p.read(n) for n in names}
    ref_after = {n: ref.read(n) for n in names}
    p.close()
    return Run(c, lib_m, ref_m, lib_before, ref_before, lib_after, ref_after, names)


# Largest error seen per (kind, tensor family) in this session; conftest prints it.
MEASURED = {}


def record(kind, family_name, err):
    key = (kind, family_name)
    MEASURED[key] = max(MEASURED.get(key, 0.0), err)


def rel_err(a, b):
    """||a - b|| / ||b|| (or ||a|| when b = 0), in float64."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a))


def metric_err(lib, ref, key):
    """Relative error of one metric (tuples/lists by norm)."""
    return rel_err(np.ravel(lib[key]), np.ravel(ref[key]))
