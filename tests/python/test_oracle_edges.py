"""Targeted edge cases of SPEC §5 and §7, library against the oracle: the strict clamp mask,
argmax ties, HER corner cases, R = 1, and acting."""
import numpy as np
import pytest

import lockstep as ls
import oracle_torch as ot
from batches import make_batch


def one_step(foxhunt, c, writes=None, batch=None, seed=7):
    """Write the same tensors into a pipeline and an oracle, run one step on the same batch;
    returns (pipeline, oracle, tensors before the step)."""
    p = ls.open_pipeline(foxhunt, c)
    ref = ot.Oracle(c)
    for n, v in (writes or {}).items():
        p.write(n, v)
        ref.write(n, v)
    before = {n: p.read(n) for n, _, g in p.tensors() if g != "output"}
    b = batch if batch is not None else make_batch(c, np.random.default_rng(seed))
    p.upload(**b)
    ref.upload(**b)
    p.step()
    ref.step()
    return p, ref, before


def assert_close(lib, ref, rtol=1e-5, what=""):
    e = ls.rel_err(lib, ref)
    assert e <= rtol, "%s: rel err %.2e (lib %s, ref %s)" % (what, e, lib, ref)


def test_clamp_mask_is_strict(foxhunt_lib):
    """SPEC §5.4: dz = ... [-q_clip < z < q_clip] (strict). With U_b = 0 and e_b =
    (q_clip, -q_clip, 0.01) the logits sit exactly on the bounds for actions 0 and 1, so those
    rows of U_b and entries of e_b get no gradient and Adam leaves them exactly unchanged."""
    c = ls.config("td_only", q_clip=0.25)
    A, HB = c.actions_per_branch, c.branch_hidden
    writes = {}
    for b in range(c.num_branches):
        writes["q.U.%d" % b] = np.zeros((A, HB), np.float32)
        writes["q.e.%d" % b] = np.float32([0.25, -0.25, 0.01])
    p, ref, before = one_step(foxhunt_lib, c, writes)
    for b in range(c.num_branches):
        U, e = p.read("q.U.%d" % b), p.read("q.e.%d" % b)
        assert np.array_equal(e[:2], before["q.e.%d" % b][:2]), "gradient passed at the bound"
        assert np.array_equal(U[:2], before["q.U.%d" % b][:2]), "gradient passed at the bound"
        assert e[2] != before["q.e.%d" % b][2] and np.abs(U[2]).max() > 0
        assert_close(U, ref.read("q.U.%d" % b), what="q.U.%d" % b)
        assert_close(e, ref.read("q.e.%d" % b), what="q.e.%d" % b)
    assert_close(p.metrics()["td_loss"], ref.metrics()["td_loss"], what="td_loss")
    p.close()


def test_ddqn_argmax_ties_take_lowest_index(foxhunt_lib):
    """SPEC §5.3: a*_b = argmax of the online q, ties to the lowest index. The online heads tie
    everywhere; the target heads are (0.1, 0.2, 0.3), so another tie rule changes y."""
    c = ls.config("td_only")
    A, HB = c.actions_per_branch, c.branch_hidden
    writes = {}
    for b in range(c.num_branches):
        writes["q.U.%d" % b] = np.zeros((A, HB), np.float32)
        writes["q.e.%d" % b] = np.full(A, 0.05, np.float32)
        writes["target.q.U.%d" % b] = np.zeros((A, HB), np.float32)
        writes["target.q.e.%d" % b] = np.float32([0.1, 0.2, 0.3])
    p, ref, _ = one_step(foxhunt_lib, c, writes)
    assert_close(p.metrics()["td_loss"], ref.metrics()["td_loss"], what="td_loss")
    assert_close(p.read("d_states"), ref.read("d_states"), what="d_states")
    p.close()


def test_act_ties_take_lowest_index(foxhunt_lib):
    c = ls.config("td_only")
    with ls.open_pipeline(foxhunt_lib, c) as p:
        for b in range(c.num_branches):
            p.write("q.U.%d" % b, np.zeros((c.actions_per_branch, c.branch_hidden)))
            p.write("q.e.%d" % b, np.full(c.actions_per_branch, -0.5))
        rng = np.random.default_rng(3)
        a = p.act(rng.standard_normal((5, c.obs_dim)), rng.standard_normal((5, c.goal_dim)))
        assert not a.any()


@pytest.mark.parametrize("reward,terminal", [("sparse", True), ("sparse", False),
                                             ("dense", True)])
def test_her_every_transition_relabelled(foxhunt_lib, reward, terminal):
    """her_ratio = 1: every goal is relabelled; half the her_goals are within epsilon (sparse
    r~ = 0 and, with her_terminal_on_success, d~ = 1), the rest are far (r~ = -1)."""
    c = ls.config("td_only", her_ratio=1.0, her_reward=reward,
                  her_terminal_on_success=terminal)
    batch = make_batch(c, np.random.default_rng(11), success_fraction=0.5)
    batch["done"][:] = 0
    p, ref, _ = one_step(foxhunt_lib, c, batch=batch)
    lm, rm = p.metrics(), ref.metrics()
    assert lm["num_relabelled"] == rm["num_relabelled"] == c.batch_size
    assert_close(lm["td_loss"], rm["td_loss"], what="td_loss")
    assert_close(p.read("d_states"), ref.read("d_states"), what="d_states")
    p.close()


def test_her_ratio_zero_keeps_goals(foxhunt_lib):
    c = ls.config("td_only", her_ratio=0.0)
    p, ref, _ = one_step(foxhunt_lib, c)
    assert p.metrics()["num_relabelled"] == 0
    assert_close(p.metrics()["td_loss"], ref.metrics()["td_loss"], what="td_loss")
    assert_close(p.read("d_states"), ref.read("d_states"), what="d_states")
    p.close()


def test_single_regime_scale_is_one(foxhunt_lib):
    """SPEC §5.5.8: with R = 1, rho == 1 and s is not updated. The library makes the regime
    state read-only then, so no written value can weight the TD loss."""
    c = ls.config("nogoal_nosn_r1")
    p = ls.open_pipeline(foxhunt_lib, c)
    for name in ("regime.scale", "regime.s"):
        with pytest.raises(foxhunt_lib.FoxhuntError) as err:
            p.write(name, np.float32([2.5]))
        assert "num_regimes" in str(err.value)
    p.close()
    p, ref, _ = one_step(foxhunt_lib, c, {})
    assert p.read("regime.s")[0] == np.float32(1.0), "s updated with R = 1"
    assert p.metrics()["regime_scale"] == [1.0]
    assert p.read("regime.scale")[0] == 1.0
    assert ls.rel_err(p.metrics()["td_loss"], ref.metrics()["td_loss"]) <= 1e-5
    p.close()


@pytest.mark.parametrize("name", ["sparse_sn2", "dense_sn12_clipped", "nogoal_nosn_r1"])
def test_act_matches_oracle_and_keeps_state(foxhunt_lib, name):
    """SPEC §7: greedy actions and clamped q of the online net (SN from one power iteration
    that is not kept), epsilon-greedy from Philox purpose 5 keyed by the act call number
    (which a step does not advance)."""
    c = ls.config(name)
    rng = np.random.default_rng(2)
    p = ls.open_pipeline(foxhunt_lib, c)
    ref = ot.Oracle(c)
    state = lambda: {n: p.read(n) for n, _, g in p.tensors() if g != "output"}  # noqa: E731
    for phase in range(2):
        if phase == 1:  # after a step, from trained parameters (the oracle takes the
            b = make_batch(c, rng)  # library's, so that acting is tested on its own)
            p.upload(**b)
            p.step()
            for n, _, g in p.tensors():
                if g != "output":
                    ref.write(n, p.read(n))
        n = 9
        obs = rng.standard_normal((n, c.obs_dim)).astype(np.float32)
        goal = rng.standard_normal((n, c.goal_dim)).astype(np.float32) if c.goal_dim else None
        before = state()
        for eps in (0.0, 0.5, 1.0):
            a, q = p.act(obs, goal, epsilon=eps, return_q=True)
            ra, rq = ref.act(obs, goal, epsilon=eps)
            assert a.shape == (n, c.num_branches) and q.shape == (n, c.num_branches,
                                                                  c.actions_per_branch)
            assert_close(q, rq, what="q values")
            assert np.array_equal(a, ra), "eps=%s: lib %s ref %s" % (eps, a.tolist(), ra.tolist())
        after = state()
        assert all(np.array_equal(before[k], after[k]) for k in before), "act changed state"
    p.close()


def test_absent_regime_means_zero_and_only_present_regimes_update(foxhunt_lib):
    """SPEC §2: regime absent => all 0; §5.5.8: s_k moves only for regimes that occur."""
    c = ls.config("sparse_noterm_sn1", regime_min=0.25, regime_max=4.0)  # R = 3
    batch = make_batch(c, np.random.default_rng(21))
    del batch["regime"]
    writes = {"regime.s": np.float32([0.8, 1.3, 2.0]), "regime.scale": np.float32([1.5, 0.7, 1.2])}
    p, ref, _ = one_step(foxhunt_lib, c, writes, batch=batch)
    s = p.read("regime.s")
    assert s[1] == np.float32(1.3) and s[2] == np.float32(2.0) and s[0] != np.float32(0.8)
    for n in ("regime.s", "regime.scale", "d_states"):
        assert_close(p.read(n), ref.read(n), what=n)
    assert_close(p.metrics()["td_loss"], ref.metrics()["td_loss"], what="td_loss")
    p.close()


def test_steps_repeat_on_the_current_batch(foxhunt_lib, request):
    """Every step trains on the last uploaded batch; HER and IQN draws move with the step."""
    c = ls.config("wide")
    p = ls.open_pipeline(foxhunt_lib, c)
    ref = ot.Oracle(c)
    b = make_batch(c, np.random.default_rng(4))
    p.upload(**b)
    ref.upload(**b)
    lib_m, ref_m = [], []
    for _ in range(3):
        p.step()
        ref.step()
        lib_m.append(p.metrics())
        ref_m.append(ref.metrics())
    missing = sorted({k for lm, rm in zip(lib_m, ref_m) for k in
                      ("iql_loss_hi", "iql_loss_lo", "iqn_loss", "attn_loss")
                      if lm[k] == 0.0 and rm[k] != 0.0})
    assert not missing, "the library reports %s as exactly 0" % ", ".join(missing)
    counts = [lm["num_relabelled"] for lm in lib_m]
    assert counts == [rm["num_relabelled"] for rm in ref_m]
    assert len(set(counts)) > 1, "HER draws should differ from step to step"
    for lm, rm in zip(lib_m, ref_m):
        for k in ("td_loss", "iqn_loss", "iql_loss_hi", "attn_loss", "conf_loss", "grad_norm"):
            assert_close(lm[k], rm[k], what=k)
    for n, _, _ in p.tensors():
        if n not in ls.ZERO_GRADIENT:
            assert_close(p.read(n), ref.read(n), what=n)
    p.close()


def test_her_success_radius_is_inclusive(foxhunt_lib):
    """SPEC §1/§5.1: r = 0 if ||ag' - g||_2 <= eps (inclusive). Half the rows sit exactly on
    the radius (offsets of 0.5 = eps on one axis, exact in float32), half just outside."""
    c = ls.config("td_only", her_ratio=1.0, her_epsilon=0.5)
    rng = np.random.default_rng(31)
    batch = make_batch(c, rng)
    B, G = c.batch_size, c.goal_dim
    ag = (rng.integers(-8, 8, (B, G)) / 8).astype(np.float32)
    her = ag.copy()
    her[:, 0] += np.where(np.arange(B) % 2 == 0, np.float32(0.5), np.float32(0.625))
    batch.update(next_achieved_goal=ag, her_goal=her)
    batch["done"][:] = 0
    p, ref, _ = one_step(foxhunt_lib, c, batch=batch)
    assert p.metrics()["num_relabelled"] == B
    assert_close(p.metrics()["td_loss"], ref.metrics()["td_loss"], what="td_loss")
    assert_close(p.read("d_states"), ref.read("d_states"), what="d_states")
    p.close()
