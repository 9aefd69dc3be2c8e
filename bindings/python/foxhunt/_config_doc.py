"""What ``help(foxhunt.Pipeline)`` shows for the keyword arguments: every ``fh_config`` field
with its default (fh_config_init, SPEC §1) and meaning, from include/foxhunt.h. A test checks
the defaults against the library's."""
import inspect

#: (field, default, meaning), in the header's order.
CONFIG_DOC = (
    ("backend", "auto", "'auto' (CUDA when built with it and a GPU exists), 'cpu' or 'cuda'"),
    ("device", 0, "CUDA device ordinal"),
    ("exec_mode", "multi_stream", "'multi_stream' or 'single_stream' (CUDA lanes)"),
    ("math_mode", "tf32", "CUDA GEMM operands: 'tf32', 'strict' float32 or 'bf16'"),
    ("iql_gemm", "auto", "'auto', 'grouped', 'batched' or 'sequential' (CUDA IQL GEMMs)"),
    ("workspace_mib", 32, "cuBLAS workspace per lane, MiB"),
    ("batch_size", 16384, "B, transitions per step"),
    ("obs_dim", 124, "O, observation features"),
    ("goal_dim", 4, "G, goal features; 0 disables HER and the goal token"),
    ("num_branches", 4, "NB, action branches"),
    ("actions_per_branch", 8, "A, sub-actions per branch"),
    ("trunk_hidden", 256, "H, trunk width"),
    ("branch_hidden", 128, "HB, branch width"),
    ("q_clip", 100.0, "branch outputs clamped to [-q_clip, q_clip]"),
    ("gamma", 0.99, "discount, in [0, 1]"),
    ("huber_kappa", 1.0, "Huber threshold of the TD and IQN losses"),
    ("her_ratio", 0.8, "HER relabel probability, in [0, 1]"),
    ("her_epsilon", 0.05, "HER success radius"),
    ("her_reward", "sparse", "'sparse' (0 / -1) or 'dense' (-distance)"),
    ("her_terminal_on_success", 1, "a reached relabelled goal is terminal (0 or 1)"),
    ("sn_layers", 2, "spectrally normalised trunk layers: bits 1 = W1, 2 = W2, or "
                     "'W2', ('W1', 'W2')"),
    ("iql_hidden", 128, "IQL value-net width"),
    ("iql_tau_hi", 0.9, "expectile of the high IQL net"),
    ("iql_tau_lo", 0.1, "expectile of the low IQL net"),
    ("awr_beta", 3.0, "advantage-weight temperature"),
    ("awr_max", 100.0, "advantage-weight cap"),
    ("iqn_hidden", 128, "IQN embedding width"),
    ("iqn_cos", 64, "IQN cosine features"),
    ("iqn_n", 8, "IQN online quantile samples"),
    ("iqn_n_target", 8, "IQN target quantile samples"),
    ("attn_token_dim", 4, "floats per observation token; must divide obs_dim"),
    ("attn_d_model", 64, "attention width"),
    ("attn_heads", 4, "attention heads; must divide attn_d_model"),
    ("attn_head_hidden", 64, "reward-head hidden width"),
    ("cql_alpha", 0.1, "CQL weight; 0 disables"),
    ("num_regimes", 4, "R regimes; 1 disables regime scaling"),
    ("regime_beta", 0.99, "regime-scale EMA rate"),
    ("regime_min", 0.25, "lower clamp of the regime scale"),
    ("regime_max", 4.0, "upper clamp of the regime scale"),
    ("ema_tau", 0.005, "Polyak rate of the target nets"),
    ("lr_q", 3e-4, "Adam learning rate of the Q net"),
    ("lr_aux", 3e-4, "Adam learning rate of IQL, IQN and attention"),
    ("adam_beta1", 0.9, "Adam beta1"),
    ("adam_beta2", 0.999, "Adam beta2"),
    ("adam_eps", 1e-8, "Adam epsilon"),
    ("clip_norm", 10.0, "global-norm clip of the Q-net gradient"),
    ("seed", 0, "all randomness derives from it"),
    ("replay_capacity", 0, "K rows of the pipeline's replay (SPEC 2.1); 0 = no replay"),
    ("replay_envs", 0, "E environments per replay row (SPEC 2.1); 0 = no replay"),
    ("nccl_comm", 0, "address of the caller's ncclComm_t (an int) for data-parallel steps "
                     "(SPEC 9, CUDA backend); 0 = none"),
)


def document(cls):
    """Give cls.__init__ a signature of every config keyword and append the table to the
    class docstring, so that help() and IDEs list them."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              inspect.Parameter("library", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=None)]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
               for name, default, _ in CONFIG_DOC]
    cls.__init__.__signature__ = inspect.Signature(params)
    width = max(len(name) for name, _, _ in CONFIG_DOC)
    rows = ["    %-*s  %-15r %s" % (width, name, default, meaning)
            for name, default, meaning in CONFIG_DOC]
    cls.__doc__ += ("\n    Keyword arguments (fh_config's fields; default, meaning):\n\n"
                    + "\n".join(rows) + "\n")
    return cls
