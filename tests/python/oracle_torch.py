"""A PyTorch reference of the foxhunt training step, written from SPEC.md v1.2 §3-§7 alone.

It is an oracle for the C library: float64 by default, gradients by autograd, parameters
initialised by SPEC §3's tensor ids and formula, and every draw from Philox4x32-10
(philox_ref.py). The step is one function of tensors (`step_tensors`) with no host
synchronisation and no data-dependent Python control flow, so the same code also runs in
float32 on a GPU in eager mode, under CUDA graphs and under torch.compile (bench_torch_peer.py).

Choices where SPEC is silent (each also noted where it is made):
- `softplus` is the exact log(1 + e^z) (torch's threshold of 20 changes it by < 1e-9 rel.).
- The IQN cosine feature uses `cos(pi * k * tau)` with k = 0..iqn_cos-1, as SPEC §4 writes.
- "normalize" for the spectral vectors is computed in the oracle's dtype; the stored u is
  rounded to float32 at the end of the step like every other persistent tensor.
- Persistent state (parameters, targets, Adam moments, u, regime state) is rounded to float32
  after every step (SPEC: "every tensor is float32"); within a step the oracle computes in
  its dtype (float64), so the comparison measures only the library's float32 arithmetic.
"""
import dataclasses
import math

import numpy as np
import torch

import philox_ref as philox

# ------------------------------------------------------------------------------------------
# configuration


@dataclasses.dataclass
class OracleConfig:
    """SPEC §1 configuration; field names are foxhunt.h's, defaults the benchmark config."""
    batch_size: int = 16384
    obs_dim: int = 124
    goal_dim: int = 4
    num_branches: int = 4
    actions_per_branch: int = 8
    trunk_hidden: int = 256
    branch_hidden: int = 128
    q_clip: float = 100.0
    gamma: float = 0.99
    huber_kappa: float = 1.0
    her_ratio: float = 0.8
    her_epsilon: float = 0.05
    her_reward: str = "sparse"
    her_terminal_on_success: bool = True
    sn_layers: int = 2  # FH_SN_W1 = 1, FH_SN_W2 = 2
    iql_hidden: int = 128
    iql_tau_hi: float = 0.9
    iql_tau_lo: float = 0.1
    awr_beta: float = 3.0
    awr_max: float = 100.0
    iqn_hidden: int = 128
    iqn_cos: int = 64
    iqn_n: int = 8
    iqn_n_target: int = 8
    attn_token_dim: int = 4
    attn_d_model: int = 64
    attn_heads: int = 4
    attn_head_hidden: int = 64
    cql_alpha: float = 0.1
    num_regimes: int = 4
    regime_beta: float = 0.99
    regime_min: float = 0.25
    regime_max: float = 4.0
    ema_tau: float = 0.005
    lr_q: float = 3e-4
    lr_aux: float = 3e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_norm: float = 10.0
    seed: int = 0

    def __post_init__(self):
        # The library holds every float of the config as float32: so does the oracle.
        for f in dataclasses.fields(self):
            if f.type is float or f.type == "float":
                setattr(self, f.name, float(np.float32(getattr(self, f.name))))
        if isinstance(self.her_reward, int):
            self.her_reward = ("sparse", "dense")[self.her_reward]
        assert self.obs_dim % self.attn_token_dim == 0
        assert self.attn_d_model % self.attn_heads == 0

    def pipeline_kwargs(self):
        """Keyword arguments for foxhunt.Pipeline with the same math."""
        kw = dataclasses.asdict(self)
        kw["her_terminal_on_success"] = int(self.her_terminal_on_success)
        return kw

    # derived sizes
    @property
    def D(self):
        return self.obs_dim + self.goal_dim

    @property
    def T_obs(self):
        return self.obs_dim // self.attn_token_dim

    @property
    def T(self):
        return self.T_obs + (1 if self.goal_dim > 0 else 0)

    @property
    def sn1(self):
        return bool(self.sn_layers & 1)

    @property
    def sn2(self):
        return bool(self.sn_layers & 2)


def param_specs(c):
    """SPEC §3's parameter table: [(name, shape, fan_in, group)] in tensor-id order; fan_in 0
    marks a bias (zero, no draws, but it takes an id). Vectors have 1-D shapes."""
    specs = []

    def W(name, out, inn, group):
        specs.append((name, (out, inn), inn, group))

    def vec(name, n, group):  # a vector weight counts as [1, in]
        specs.append((name, (n,), n, group))

    def bias(name, n, group):
        specs.append((name, (n,), 0, group))

    H, D, HB, A = c.trunk_hidden, c.D, c.branch_hidden, c.actions_per_branch
    W("q.W1", H, D, "q"); bias("q.b1", H, "q"); W("q.W2", H, H, "q"); bias("q.b2", H, "q")
    for b in range(c.num_branches):
        W("q.V.%d" % b, HB, H, "q"); bias("q.c.%d" % b, HB, "q")
        W("q.U.%d" % b, A, HB, "q"); bias("q.e.%d" % b, A, "q")
    vec("q.w_u", H, "q"); bias("q.b_u", 1, "q")
    Hi = c.iql_hidden
    for net in ("iql_hi", "iql_lo"):
        W(net + ".W1", Hi, D, net); bias(net + ".b1", Hi, net)
        W(net + ".W2", Hi, Hi, net); bias(net + ".b2", Hi, net)
        vec(net + ".w3", Hi, net); bias(net + ".b3", 1, net)
    Hq, C = c.iqn_hidden, c.iqn_cos
    W("iqn.Wpsi", Hq, D, "iqn"); bias("iqn.bpsi", Hq, "iqn")
    W("iqn.Wphi", Hq, C, "iqn"); bias("iqn.bphi", Hq, "iqn")
    W("iqn.Wm", Hq, Hq, "iqn"); bias("iqn.bm", Hq, "iqn")
    vec("iqn.w_z", Hq, "iqn"); bias("iqn.b_z", 1, "iqn")
    d, td, hh = c.attn_d_model, c.attn_token_dim, c.attn_head_hidden
    W("attn.Wt", d, td, "attn"); bias("attn.bt", d, "attn")
    if c.goal_dim > 0:
        W("attn.Wg", d, c.goal_dim, "attn"); bias("attn.bg", d, "attn")
    W("attn.P", c.T, d, "attn")  # the positional table uses in = d
    for p in ("Wq", "Wk", "Wv"):
        W("attn." + p, d, d, "attn")
    for p in ("bq", "bk", "bv"):
        bias("attn." + p, d, "attn")
    W("attn.Wo", d, d, "attn"); bias("attn.bo", d, "attn")
    W("attn.Wr1", hh, d, "attn"); bias("attn.br1", hh, "attn")
    vec("attn.w_r2", hh, "attn"); bias("attn.b_r2", 1, "attn")
    return specs


def tensor_ids(c):
    return {name: i for i, (name, _, _, _) in enumerate(param_specs(c))}


def init_weight(seed, tensor_id, shape, fan_in):
    """SPEC §3: element = f32(2u - 1) * f32(1/sqrt(in)), u from purpose 4 with
    counter (element, tensor id, 0)."""
    n = int(np.prod(shape))
    u = philox.uniform(seed, np.arange(n, dtype=np.int64), tensor_id, 0, philox.PURPOSE_INIT)
    two_u_minus_1 = np.float32(2.0) * u - np.float32(1.0)  # exact in float32
    scale = np.float32(1.0 / math.sqrt(fan_in))            # rounded to float32 once
    return (two_u_minus_1 * scale).astype(np.float32).reshape(shape)


def init_sn_u(seed, tensor_id, n):
    """SPEC §3 purpose 6: u = normalize(2U - 1), U from counter (j, tensor id of the layer, 0).
    normalize in float64, then rounded to float32 (SPEC does not say; see the module doc)."""
    u = philox.uniform(seed, np.arange(n, dtype=np.int64), tensor_id, 0, philox.PURPOSE_SN_U)
    x = (np.float32(2.0) * u - np.float32(1.0)).astype(np.float64)
    return (x / max(np.linalg.norm(x), 1e-12)).astype(np.float32)


def initial_state(c):
    """Every named tensor of a fresh pipeline (parameters, targets, spectral u, regime state)
    as float32 numpy arrays, keyed by the library's names."""
    st = {}
    for tid, (name, shape, fan_in, group) in enumerate(param_specs(c)):
        st[name] = (init_weight(c.seed, tid, shape, fan_in) if fan_in
                    else np.zeros(shape, np.float32))
    for name in list(st):
        if name.startswith("q.") or name.startswith("iqn."):
            st["target." + name] = st[name].copy()  # target nets are copies
    ids = tensor_ids(c)
    if c.sn1:
        st["sn.u.W1"] = init_sn_u(c.seed, ids["q.W1"], c.trunk_hidden)
    if c.sn2:
        st["sn.u.W2"] = init_sn_u(c.seed, ids["q.W2"], c.trunk_hidden)
    st["regime.s"] = np.ones(c.num_regimes, np.float32)      # s_k starts at 1
    st["regime.scale"] = np.ones(c.num_regimes, np.float32)  # rho starts at 1
    return st


def initial_tensors(c, dtype=torch.float64, device="cpu"):
    """initial_state as tensors of dtype on device, with Adam's moments (zero) keyed by
    parameter name: (S, M, V)."""
    S = {k: torch.as_tensor(v, dtype=dtype, device=device) for k, v in initial_state(c).items()}
    names = [n for n, _, _, _ in param_specs(c)]
    return S, {n: torch.zeros_like(S[n]) for n in names}, {n: torch.zeros_like(S[n])
                                                            for n in names}


# ------------------------------------------------------------------------------------------
# building blocks


def silu(z):
    return z * torch.sigmoid(z)


def softplus(z):
    # exact log(1 + e^z) without overflow: max(z, 0) + log1p(e^-|z|)
    return torch.clamp(z, min=0) + torch.log1p(torch.exp(-torch.abs(z)))


def huber(u, k):
    a = torch.abs(u)
    return torch.where(a <= k, 0.5 * u * u, k * (a - 0.5 * k))


def normalize(x):
    return x / torch.clamp(torch.linalg.vector_norm(x), min=1e-12)


def clamp_strict(z, c):
    """clamp(z, -c, c) whose gradient is 1 only strictly inside (SPEC §5.4 d_logits_clamp);
    torch.clamp's own backward also passes the gradient at the bounds."""
    inside = (z > -c) & (z < c)
    return torch.where(inside, z, z.detach().clamp(-c, c))


def first_argmax(q):
    """argmax over the last axis, ties to the lowest index (SPEC §5.3, §7)."""
    A = q.shape[-1]
    idx = torch.arange(A, device=q.device).expand_as(q)
    top = q.max(dim=-1, keepdim=True).values
    return torch.where(q == top, idx, torch.full_like(idx, A)).min(dim=-1).values


def torch_uniform(seed, c0, c1, c2, purpose, dtype, word=0):
    """SPEC §3 uniforms from torch int64 counters (broadcast), on their device."""
    c0, c1, c2 = torch.broadcast_tensors(c0, c1, c2)
    c3 = torch.full_like(c0, purpose)
    k0, k1 = philox.seed_key(seed)
    w = philox.philox4x32_10(c0, c1, c2, c3, k0, k1)[word]
    return (w >> 8).to(dtype) * (2.0 ** -24)


def q_forward(p, pre, x, W1, W2, c):
    """SPEC §4 Q net with effective (possibly spectrally normalised) W1, W2.
    Returns h2 [B, H], g_b list, z_b list, clamped q_b list."""
    h1 = silu(x @ W1.T + p[pre + "b1"])
    h2 = silu(h1 @ W2.T + p[pre + "b2"])
    gs, zs, qs = [], [], []
    for b in range(c.num_branches):
        g = silu(h2 @ p[pre + "V.%d" % b].T + p[pre + "c.%d" % b])
        z = g @ p[pre + "U.%d" % b].T + p[pre + "e.%d" % b]
        gs.append(g); zs.append(z); qs.append(clamp_strict(z, c.q_clip))
    return h2, gs, zs, qs


def iql_value(p, pre, x):
    h = silu(x @ p[pre + "W1"].T + p[pre + "b1"])
    h = silu(h @ p[pre + "W2"].T + p[pre + "b2"])
    return h @ p[pre + "w3"] + p[pre + "b3"]


def iqn_value(p, pre, x, tau, c):
    """Z(x_i, tau_in) [B, N] (Dabney et al. 2018 with SPEC §4's cosine indexing k = 0..C-1)."""
    psi = silu(x @ p[pre + "Wpsi"].T + p[pre + "bpsi"])                    # [B, Hq]
    k = torch.arange(c.iqn_cos, device=x.device, dtype=x.dtype)
    feats = torch.cos(math.pi * k * tau.unsqueeze(-1))                       # [B, N, C]
    phi = silu(feats @ p[pre + "Wphi"].T + p[pre + "bphi"])                  # [B, N, Hq]
    m = psi.unsqueeze(1) * phi
    return silu(m @ p[pre + "Wm"].T + p[pre + "bm"]) @ p[pre + "w_z"] + p[pre + "b_z"]


def attn_reward(p, obs, goal, c):
    """SPEC §4 attention reward model r_hat [B]."""
    B = obs.shape[0]
    d, H = c.attn_d_model, c.attn_heads
    dh = d // H
    tok = obs.reshape(B, c.T_obs, c.attn_token_dim)
    e = tok @ p["attn.Wt"].T + p["attn.bt"] + p["attn.P"][: c.T_obs]
    if c.goal_dim > 0:
        eg = goal @ p["attn.Wg"].T + p["attn.bg"] + p["attn.P"][c.T_obs]
        e = torch.cat([e, eg.unsqueeze(1)], dim=1)                           # goal token last
    T = e.shape[1]

    def heads(t):
        return t.reshape(B, T, H, dh).permute(0, 2, 1, 3)                    # [B, H, T, dh]
    q = heads(e @ p["attn.Wq"].T + p["attn.bq"])
    k = heads(e @ p["attn.Wk"].T + p["attn.bk"])
    v = heads(e @ p["attn.Wv"].T + p["attn.bv"])
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
    out = (att @ v).permute(0, 2, 1, 3).reshape(B, T, d)                     # heads in order
    e2 = e + out @ p["attn.Wo"].T + p["attn.bo"]
    pool = e2.mean(dim=1)
    return silu(pool @ p["attn.Wr1"].T + p["attn.br1"]) @ p["attn.w_r2"] + p["attn.b_r2"]


def her(c, batch, step, rows):
    """SPEC §5.1: (g~, r~, d~, x~, x~', number relabelled); rows = arange(B) on the device."""
    obs, nobs, reward, done = batch["obs"], batch["next_obs"], batch["reward"], batch["done"]
    if c.goal_dim == 0:
        return None, reward, done, obs, nobs, torch.zeros((), dtype=torch.int64,
                                                          device=rows.device)
    B, dt = c.batch_size, obs.dtype
    u_her = torch_uniform(c.seed, rows, torch.zeros_like(rows), step.expand(B),
                          philox.PURPOSE_HER, dt)
    relabel = u_her < c.her_ratio
    dist = torch.linalg.vector_norm(batch["next_achieved_goal"] - batch["her_goal"], dim=1)
    success = dist <= c.her_epsilon
    if c.her_reward == "sparse":
        r_her = torch.where(success, torch.zeros_like(dist), -torch.ones_like(dist))
    else:
        r_her = -dist
    g_t = torch.where(relabel.unsqueeze(1), batch["her_goal"], batch["goal"])
    r_t = torch.where(relabel, r_her, reward)
    if c.her_reward == "sparse" and c.her_terminal_on_success:
        d_t = torch.where(relabel & success, torch.ones_like(done), done)
    else:
        d_t = done
    return g_t, r_t, d_t, torch.cat([obs, g_t], 1), torch.cat([nobs, g_t], 1), relabel.sum()


def iqn_loss(c, Z, T_im, tau_in):
    """SPEC §5.5 step 3: mean_i sum_n (1/N') sum_m |tau_in - [u < 0]| huber_kappa(u) / kappa,
    u = T_im - Z_in (Dabney et al. 2018); Z, tau_in [B, N], T_im [B, N']."""
    u_q = T_im.unsqueeze(1) - Z.unsqueeze(2)                                   # [B, N, N']
    rho_q = torch.abs(tau_in.unsqueeze(2) - (u_q < 0).to(Z.dtype)) * huber(u_q, c.huber_kappa) \
        / c.huber_kappa
    return (rho_q.sum(dim=(1, 2)) / c.iqn_n_target).mean()


def regime_update(c, s, regime, delta):
    """SPEC §5.5 step 8: the regimes' EMA of the mean squared TD error (those present in the
    batch) and the scales rho from it; delta [B, NB] detached. Returns (s, rho)."""
    R = c.num_regimes
    if R == 1:
        return s, torch.ones_like(s)
    onehot = (regime.unsqueeze(1) == torch.arange(R, device=s.device)).to(s.dtype)  # [B, R]
    cnt = onehot.sum(0)
    m_k = (onehot * (delta ** 2).mean(1, keepdim=True)).sum(0) / torch.clamp(cnt, min=1)
    s = torch.where(cnt > 0, c.regime_beta * s + (1.0 - c.regime_beta) * m_k, s)
    return s, torch.clamp(torch.sqrt(s.mean() / (s + 1e-8)), c.regime_min, c.regime_max)


def ensemble(qbar_sa, v_hi, v_lo, z_mean):
    """SPEC §5.5 step 6: per sample the mean and population variance of the four estimates
    [B] each; returns (mu, var, ensemble_std = mean of sqrt(var))."""
    est = torch.stack([qbar_sa, v_hi, v_lo, z_mean], 1)
    mu = est.mean(1)
    var = ((est - mu.unsqueeze(1)) ** 2).mean(1)                               # population
    return mu, var, torch.sqrt(var).mean()


def confidence_loss(c, h2b_next, w_u_bar, b_u_bar, var, d_t, h2, w_u, b_u):
    """SPEC §5.5 step 7 (O'Donoghue et al. 2018): the target t = var + gamma^2 (1 - d~)
    softplus(h2bar(x~') w_u_bar + b_u_bar) from the target head after the EMA, and
    L = mean 1/2 (u - t)^2 with u = softplus(h2 w_u + b_u), h2 detached (gradient into w_u, b_u
    only). Returns (L, u)."""
    with torch.no_grad():
        t_conf = var + c.gamma * c.gamma * (1.0 - d_t) * softplus(h2b_next @ w_u_bar + b_u_bar)
    u_on = softplus(h2.detach() @ w_u + b_u)
    return (0.5 * (u_on - t_conf) ** 2).mean(), u_on


def clip_factor(c, gn):
    """SPEC §5.6: min(1, clip_norm / ||g||) for the global norm gn (no epsilon; g = 0 stays 0)."""
    return torch.where(gn > c.clip_norm, c.clip_norm / torch.clamp(gn, min=1e-30),
                       torch.ones_like(gn))


def power_iteration(W, u):
    """SPEC §5.2: one power iteration (no gradient): v = normalize(W^T u), u' = normalize(W v)."""
    with torch.no_grad():
        v = normalize(W.T @ u)
        u2 = normalize(W @ v)
    return u2, v


def spectral_weight(W, u, v):
    """W / sigma with sigma = u^T W v from constant u, v. Autograd through this is exactly
    SPEC §5.2's backward: dW = (dWsn - <dWsn, Wsn> u v^T) / sigma (checked in test_oracle)."""
    sigma = u @ W @ v
    return W / sigma, sigma


def spectral_backward_formula(dWsn, W, u, v):
    """SPEC §5.2's backward as written, for the check against autograd."""
    sigma = u @ W @ v
    Wsn = W / sigma
    return (dWsn - (dWsn * Wsn).sum() * torch.outer(u, v)) / sigma


def bias_correction(beta, t, dtype):
    """1 - beta^t in float64 from the float32 beta, then rounded to float32 (SPEC §5.6)."""
    # torch.full, not torch.tensor: no host-to-device copy, so CUDA-graph capture works
    beta64 = torch.full((), float(np.float32(beta)), dtype=torch.float64, device=t.device)
    return (1.0 - beta64 ** t.to(torch.float64)).to(torch.float32).to(dtype)


def adam_update(params, grads, m, v, names, lr, c, t):
    """Kingma & Ba Algorithm 1 as SPEC §5.6 writes it; returns new (p, m, v) dicts."""
    b1, b2, eps = c.adam_beta1, c.adam_beta2, c.adam_eps
    dtype = params[names[0]].dtype
    bc1, bc2 = bias_correction(b1, t, dtype), bias_correction(b2, t, dtype)
    P, M, V = {}, {}, {}
    for n in names:
        g = grads[n]
        M[n] = b1 * m[n] + (1.0 - b1) * g
        V[n] = b2 * v[n] + (1.0 - b2) * g * g
        P[n] = params[n] - lr * (M[n] / bc1) / (torch.sqrt(V[n] / bc2) + eps)
    return P, M, V


# ------------------------------------------------------------------------------------------
# the step


def names_of(c, group):
    return [n for n, _, _, g in param_specs(c) if g == group]


def step_tensors(c, S, M, V, batch, step):
    """One training step (SPEC §5). S: every named tensor (see initial_state), M/V: Adam
    moments by parameter name, batch: dict of tensors (floats in the oracle dtype, action and
    regime int64, done in the float dtype), step: 0-dim int64 tensor = steps completed before.
    Returns (new S, new M, new V, outputs) without modifying the inputs; outputs hold the
    metrics and the step outputs as tensors (no host synchronisation anywhere)."""
    dt = S["q.W1"].dtype
    dev = S["q.W1"].device
    B, NB = c.batch_size, c.num_branches
    obs, reward, action, regime = batch["obs"], batch["reward"], batch["action"], batch["regime"]
    rows = torch.arange(B, device=dev, dtype=torch.int64)
    out = {}

    # ---- 5.1 her
    g_t, r_t, d_t, x, xn, out["num_relabelled"] = her(c, batch, step, rows)

    # ---- leaf copies of the trained parameters
    q_names, iqn_names = names_of(c, "q"), names_of(c, "iqn")
    P = {n: S[n].detach().clone().requires_grad_(True)
         for n in q_names + names_of(c, "iql_hi") + names_of(c, "iql_lo") + iqn_names
         + names_of(c, "attn")}
    Tq = {n: S["target." + n] for n in q_names}

    # ---- 5.2 spectral
    W_on, W_tg, newS = {}, {}, {}
    zero = torch.zeros((), dtype=dt, device=dev)
    out["sigma"] = [zero, zero]
    out["sigma_target"] = [zero, zero]
    for li, layer in enumerate(("W1", "W2")):
        W, Wb = P["q." + layer], Tq["q." + layer]
        if (c.sn_layers >> li) & 1:
            u2, v = power_iteration(W, S["sn.u." + layer])
            W_on[layer], sig = spectral_weight(W, u2, v)
            W_tg[layer], sig_b = spectral_weight(Wb, u2, v)      # sigma_bar: the same u, v
            newS["sn.u." + layer] = u2
            out["sigma"][li], out["sigma_target"][li] = sig.detach(), sig_b.detach()
        else:
            W_on[layer], W_tg[layer] = W, Wb

    # ---- 5.3 ddqn
    with torch.no_grad():
        _, _, _, q_next = q_forward(P, "q.", xn, W_on["W1"].detach(), W_on["W2"].detach(), c)
        a_star = [first_argmax(q) for q in q_next]                            # lane A
        _, _, _, qb_x = q_forward(Tq, "q.", x, W_tg["W1"], W_tg["W2"], c)     # lane B
        h2b_n, _, _, qb_n = q_forward(Tq, "q.", xn, W_tg["W1"], W_tg["W2"], c)
        notdone = 1.0 - d_t
        y = torch.stack([r_t + c.gamma * notdone * qb_n[b].gather(1, a_star[b][:, None])[:, 0]
                         for b in range(NB)], 1)                               # [B, NB]
        qbar_sa = torch.stack([qb_x[b].gather(1, action[:, b:b + 1])[:, 0]
                               for b in range(NB)], 1).mean(1)                 # [B]

    # ---- 5.4 forward, TD loss, backward
    xg = x.detach().clone().requires_grad_(True)
    h2, gs, zs, qs = q_forward(P, "q.", xg, W_on["W1"], W_on["W2"], c)
    q_sa = torch.stack([qs[b].gather(1, action[:, b:b + 1])[:, 0] for b in range(NB)], 1)
    delta = q_sa - y
    # rho from the previous step; with R = 1, rho == 1 whatever the stored scale (SPEC §5.5.8)
    w_reg = S["regime.scale"][regime] if c.num_regimes > 1 else torch.ones_like(reward)
    L_td = (w_reg.unsqueeze(1) * huber(delta, c.huber_kappa)).sum() / (B * NB)
    td_params = [n for n in q_names if n not in ("q.w_u", "q.b_u")]
    g_td = torch.autograd.grad(L_td, [P[n] for n in td_params] + [xg], allow_unused=True)
    grads = {n: torch.zeros_like(P[n]) for n in q_names}
    for n, g in zip(td_params, g_td[:-1]):
        if g is not None:
            grads[n] = grads[n] + g
    out["d_states"] = g_td[-1]  # = dpre1 · W1 (W1/sigma1 under SN): the input gradient
    out["td_loss"], out["q_mean"] = L_td.detach(), q_sa.detach().mean()
    delta = delta.detach()

    # ---- 5.5 aux
    # 1. EMA of the Q net (incl. confidence head) and the IQN net, from theta before Adam
    tau = c.ema_tau
    for n in q_names + iqn_names:
        newS["target." + n] = tau * S[n] + (1.0 - tau) * S["target." + n]
    # 2. IQL hi / lo (Kostrikov et al. 2021), Adam (lr_aux); advantage weights from V_hi
    xd, xnd = x.detach(), xn.detach()
    values = {}
    for net, tau_e in (("iql_hi", c.iql_tau_hi), ("iql_lo", c.iql_tau_lo)):
        Vx = iql_value(P, net + ".", xd)
        diff = qbar_sa - Vx
        L = (torch.abs(tau_e - (diff < 0).to(dt)) * diff * diff).mean()
        names = names_of(c, net)
        gl = torch.autograd.grad(L, [P[n] for n in names])
        upd = adam_update(P, dict(zip(names, gl)), M, V, names, c.lr_aux, c, step + 1)
        for n in names:
            newS[n], M_n, V_n = upd[0][n], upd[1][n], upd[2][n]
            out.setdefault("_M", {})[n], out.setdefault("_V", {})[n] = M_n, V_n
        out["iql_loss_" + net[4:]] = L.detach()
        values[net] = Vx.detach()
    omega = torch.clamp(torch.exp(c.awr_beta * (qbar_sa - values["iql_hi"])), max=c.awr_max)
    # 3. IQN lane (Dabney et al. 2018): online tau (purpose 2), target tau' (purpose 3)
    N, Nt = c.iqn_n, c.iqn_n_target
    tau_in = torch_uniform(c.seed, rows[:, None], torch.arange(N, device=dev)[None, :],
                           step, philox.PURPOSE_IQN_ONLINE, dt)                # [B, N]
    tau_t = torch_uniform(c.seed, rows[:, None], torch.arange(Nt, device=dev)[None, :],
                          step, philox.PURPOSE_IQN_TARGET, dt)                 # [B, N']
    Tiqn = {n: newS["target." + n] for n in iqn_names}                     # after the EMA
    with torch.no_grad():
        Zt = iqn_value(Tiqn, "iqn.", xnd, tau_t, c)
        T_im = r_t.unsqueeze(1) + c.gamma * (1.0 - d_t).unsqueeze(1) * Zt      # [B, N']
    Z = iqn_value(P, "iqn.", xd, tau_in, c)                                    # [B, N]
    L_iqn = iqn_loss(c, Z, T_im, tau_in)
    gl = torch.autograd.grad(L_iqn, [P[n] for n in iqn_names])
    upd = adam_update(P, dict(zip(iqn_names, gl)), M, V, iqn_names, c.lr_aux, c, step + 1)
    for n in iqn_names:
        newS[n] = upd[0][n]
        out["_M"][n], out["_V"][n] = upd[1][n], upd[2][n]
    out["iqn_loss"] = L_iqn.detach()
    z_mean = Z.detach().mean(1)
    # 4. attention lane
    attn_names = names_of(c, "attn")
    r_hat = attn_reward(P, obs, g_t, c)
    L_attn = ((r_hat - r_t) ** 2).mean()
    gl = torch.autograd.grad(L_attn, [P[n] for n in attn_names])
    upd = adam_update(P, dict(zip(attn_names, gl)), M, V, attn_names, c.lr_aux, c, step + 1)
    for n in attn_names:
        newS[n] = upd[0][n]
        out["_M"][n], out["_V"][n] = upd[1][n], upd[2][n]
    out["attn_loss"] = L_attn.detach()
    # 5. CQL (Kumar et al. 2020), advantage-weighted, into U_b, e_b only
    if c.cql_alpha > 0:
        terms = []
        for b in range(NB):
            zc = gs[b].detach() @ P["q.U.%d" % b].T + P["q.e.%d" % b]
            qc = clamp_strict(zc, c.q_clip)
            terms.append(torch.logsumexp(qc, 1) - qc.gather(1, action[:, b:b + 1])[:, 0])
        L_cql = c.cql_alpha * (omega * torch.stack(terms, 1).sum(1)).sum() / (B * NB)
        cql_params = ["q.U.%d" % b for b in range(NB)] + ["q.e.%d" % b for b in range(NB)]
        for n, g in zip(cql_params, torch.autograd.grad(L_cql, [P[n] for n in cql_params])):
            grads[n] = grads[n] + g
        out["cql_loss"] = L_cql.detach()
    else:
        out["cql_loss"] = zero
    # 6. ensemble over {Qbar_sa, V_hi, V_lo, mean_n Z}, values before the IQL/IQN updates
    mu, var, out["ensemble_std"] = ensemble(qbar_sa, values["iql_hi"], values["iql_lo"], z_mean)
    out["ensemble_mean"], out["ensemble_var"] = mu, var
    # 7. confidence head (O'Donoghue et al. 2018): h2 detached, grads into w_u, b_u only
    L_conf, u_on = confidence_loss(c, h2b_n, newS["target.q.w_u"], newS["target.q.b_u"], var,
                                   d_t, h2, P["q.w_u"], P["q.b_u"])          # head after EMA
    gw, gb = torch.autograd.grad(L_conf, [P["q.w_u"], P["q.b_u"]])
    grads["q.w_u"] = grads["q.w_u"] + gw
    grads["q.b_u"] = grads["q.b_u"] + gb
    out["conf_loss"] = L_conf.detach()
    out["confidence"] = 1.0 / (1.0 + torch.sqrt(u_on.detach()))
    # 8. regime scale
    s, rho = regime_update(c, S["regime.s"], regime, delta)
    newS["regime.s"], newS["regime.scale"] = s, rho

    # ---- 5.6 adam of the Q net: global-norm clip, then Adam (lr_q)
    gn = torch.sqrt(sum((grads[n] ** 2).sum() for n in q_names))
    factor = clip_factor(c, gn)
    gq = {n: grads[n] * factor for n in q_names}
    upd = adam_update(P, gq, M, V, q_names, c.lr_q, c, step + 1)
    for n in q_names:
        newS[n] = upd[0][n]
        out["_M"][n], out["_V"][n] = upd[1][n], upd[2][n]
    out["grad_norm"] = gn.detach()
    out["_grads_q"] = {n: grads[n].detach() for n in q_names}  # unclipped, for diagnosis
    out["regime_scale"] = rho

    newM, newV = out.pop("_M"), out.pop("_V")
    S2 = dict(S)
    S2.update({k: v_.detach() for k, v_ in newS.items()})
    return S2, newM, newV, out


def act_tensors(c, S, obs, goal, epsilon, act_call):
    """SPEC §7: greedy / epsilon-greedy actions and clamped q [n, NB, A]; nothing is kept."""
    P = S
    x = torch.cat([obs, goal], 1) if c.goal_dim > 0 else obs
    W = {}
    for li, layer in enumerate(("W1", "W2")):
        if (c.sn_layers >> li) & 1:
            u2, v = power_iteration(S["q." + layer], S["sn.u." + layer])
            W[layer] = spectral_weight(S["q." + layer], u2, v)[0]
        else:
            W[layer] = S["q." + layer]
    with torch.no_grad():
        _, _, _, qs = q_forward(P, "q.", x, W["W1"], W["W2"], c)
    q = torch.stack(qs, 1)                                                     # [n, NB, A]
    greedy = first_argmax(q)
    n = obs.shape[0]
    rows = torch.arange(n, device=obs.device)[:, None]
    br = torch.arange(c.num_branches, device=obs.device)[None, :]
    call = torch.tensor(act_call, dtype=torch.int64, device=obs.device)
    u0 = torch_uniform(c.seed, rows, br, call, philox.PURPOSE_ACT, torch.float32, word=0)
    u1 = torch_uniform(c.seed, rows, br, call, philox.PURPOSE_ACT, torch.float32, word=1)
    explore = u0 < float(np.float32(epsilon))
    rand = torch.floor(u1 * c.actions_per_branch).to(torch.int64)
    return torch.where(explore, rand, greedy), q


# ------------------------------------------------------------------------------------------
# a stateful wrapper with numpy in and out


def round_f32(t):
    return t.to(torch.float32).to(t.dtype)


class Oracle:
    """The reference pipeline: Oracle(OracleConfig(...)) mirrors foxhunt.Pipeline's
    upload/step/read/write/metrics on numpy arrays."""

    def __init__(self, config, dtype=torch.float64, device="cpu", store_f32=True):
        self.c = config
        self.dtype, self.device, self.store_f32 = dtype, torch.device(device), store_f32
        self.S, self.M, self.V = initial_tensors(config, dtype, self.device)
        self.step_count = 0
        self.act_calls = 0
        self.batch = None
        self.last = None

    def names(self):
        return list(self.S)

    def read(self, name):
        if self.last is not None and name in ("d_states", "ensemble_mean", "ensemble_var",
                                              "confidence"):
            return self.last[name].detach().cpu().numpy()
        return self.S[name].detach().cpu().numpy()

    def write(self, name, array):
        a = np.asarray(array, dtype=np.float32).reshape(self.S[name].shape)
        self.S[name] = torch.as_tensor(a, dtype=self.dtype, device=self.device)

    def upload(self, obs, action, reward, done, next_obs, goal=None, next_achieved_goal=None,
               her_goal=None, regime=None):
        f = lambda a: torch.as_tensor(np.asarray(a, np.float32), dtype=self.dtype,  # noqa: E731
                                      device=self.device)
        B = self.c.batch_size
        self.batch = {
            "obs": f(obs), "next_obs": f(next_obs), "reward": f(reward),
            "done": f(np.asarray(done, np.float32)),
            "action": torch.as_tensor(np.asarray(action, np.int64), device=self.device),
            "regime": torch.as_tensor(np.zeros(B, np.int64) if regime is None
                                      else np.asarray(regime, np.int64), device=self.device),
        }
        if self.c.goal_dim > 0:
            self.batch.update(goal=f(goal), next_achieved_goal=f(next_achieved_goal),
                              her_goal=f(her_goal))

    def step(self):
        step = torch.tensor(self.step_count, dtype=torch.int64, device=self.device)
        S, M, V, out = step_tensors(self.c, self.S, self.M, self.V, self.batch, step)
        if self.store_f32:
            S = {k: round_f32(v) for k, v in S.items()}
            M = {k: round_f32(v) for k, v in M.items()}
            V = {k: round_f32(v) for k, v in V.items()}
        self.M.update(M)
        self.V.update(V)
        self.S = S
        self.step_count += 1
        self.last = out
        return self.metrics()

    def metrics(self):
        o = self.last
        f = lambda t: float(t)  # noqa: E731
        return {
            "step": self.step_count, "td_loss": f(o["td_loss"]), "q_mean": f(o["q_mean"]),
            "cql_loss": f(o["cql_loss"]), "iql_loss_hi": f(o["iql_loss_hi"]),
            "iql_loss_lo": f(o["iql_loss_lo"]), "iqn_loss": f(o["iqn_loss"]),
            "attn_loss": f(o["attn_loss"]), "conf_loss": f(o["conf_loss"]),
            "grad_norm": f(o["grad_norm"]),
            "sigma": tuple(f(s) for s in o["sigma"]),
            "sigma_target": tuple(f(s) for s in o["sigma_target"]),
            "ensemble_std": f(o["ensemble_std"]), "num_relabelled": int(o["num_relabelled"]),
            "num_regimes": self.c.num_regimes,
            "regime_scale": [f(r) for r in o["regime_scale"]],
        }

    def act(self, obs, goal=None, epsilon=0.0):
        t = lambda a: torch.as_tensor(np.asarray(a, np.float32), dtype=self.dtype,  # noqa: E731
                                      device=self.device)
        a, q = act_tensors(self.c, self.S, t(obs), None if goal is None else t(goal),
                           epsilon, self.act_calls)
        self.act_calls += 1
        return a.cpu().numpy().astype(np.int32), q.cpu().numpy()
