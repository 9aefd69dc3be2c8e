"""Random but valid batches (SPEC §2) for the oracle tests, with HER goals placed well away from
the success radius so that float32 and float64 agree on every success decision."""
import numpy as np


def make_batch(c, rng, success_fraction=0.4):
    """One batch as a dict of numpy arrays with foxhunt.Pipeline.upload's keyword names.
    A fraction of rows has her_goal within her_epsilon / 4 of next_achieved_goal (a sparse
    success when relabelled); all other rows are at least 3 * her_epsilon away."""
    B, O, G, NB = c.batch_size, c.obs_dim, c.goal_dim, c.num_branches
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    batch = {
        "obs": f(B, O),
        "action": rng.integers(0, c.actions_per_branch, size=(B, NB)).astype(np.int32),
        "reward": f(B),
        "done": (rng.random(B) < 0.2).astype(np.uint8),
        "next_obs": f(B, O),
        "regime": rng.integers(0, c.num_regimes, size=B).astype(np.int32),
    }
    if G > 0:
        eps = c.her_epsilon
        ag = f(B, G)
        her = f(B, G)
        near = rng.random(B) < success_fraction
        for i in range(B):
            if near[i]:
                d = rng.standard_normal(G)
                d *= (eps / 4) * rng.random() / max(np.linalg.norm(d), 1e-12)
                her[i] = (ag[i] + d).astype(np.float32)
            else:
                while np.linalg.norm(her[i].astype(np.float64) - ag[i]) < 3 * eps:
                    her[i] = rng.standard_normal(G).astype(np.float32)
        batch.update(goal=f(B, G), next_achieved_goal=ag, her_goal=her)
    return batch
