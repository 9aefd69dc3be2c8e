"""Shared data of the binding tests: a small config and random valid batches."""
import os

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

# A small config used throughout the binding tests.
SMALL = dict(backend="cpu", batch_size=16, obs_dim=8, goal_dim=2, num_branches=2,
             actions_per_branch=3, trunk_hidden=16, branch_hidden=8, iql_hidden=8,
             iqn_hidden=8, iqn_cos=4, iqn_n=4, iqn_n_target=3, attn_token_dim=4,
             attn_d_model=8, attn_heads=2, attn_head_hidden=8, num_regimes=2)


def make_batch(cfg=SMALL, seed=0):
    rng = np.random.default_rng(seed)
    B, O, G, NB = cfg["batch_size"], cfg["obs_dim"], cfg["goal_dim"], cfg["num_branches"]
    b = dict(obs=rng.standard_normal((B, O)), action=rng.integers(0, cfg["actions_per_branch"],
                                                                 (B, NB)),
             reward=rng.standard_normal(B), done=rng.integers(0, 2, B).astype(bool),
             next_obs=rng.standard_normal((B, O)), regime=rng.integers(0, cfg["num_regimes"], B))
    if G:
        b.update(goal=rng.standard_normal((B, G)), next_achieved_goal=rng.standard_normal((B, G)),
                 her_goal=rng.standard_normal((B, G)))
    return b
