"""The foxhunt training step (SPEC §5) written for speed in PyTorch: the peer that
bench_torch_peer.py times in its fast_* modes, as a PyTorch user would write the step for a GPU.

It computes the oracle's step (oracle_torch.step_tensors; test_peer_fast.py checks the two equal
in float64 on every lockstep config) and changes only its form:
- Every trained parameter lives in one flat buffer ordered [Q net | IQN | IQL | attention], and
  so do the target nets ([Q net | IQN]) and Adam's moments: the EMA is one pass, Adam two (lr_q
  with the global-norm clip, then lr_aux), and one autograd call returns one flat gradient.
- The branches' V_b, c_b, U_b, e_b are stored stacked, so a branch layer is one GEMM over
  [NB·HB, H] and the heads one batched product; the two IQL nets are stacked the same way and run
  as batched products.
- ddqn's target-net passes on x̃ and x̃' are one pass over [x̃; x̃'].
- One backward for the sum of the losses: their parameters are disjoint, except CQL's and the
  confidence head's gradients into the Q net, which SPEC §5.6 adds to the TD gradient anyway.
- Composite projections: the tokens' q, k, v from the raw tokens by W_qkv W_t and a bias per
  position, and mean_t e from the tokens' sum, so the token embeddings e are never formed.
- The pool taken before W_o and before v: the mean over tokens commutes with the linear maps, so
  SPEC §4's mean_t(e + o W_oᵀ + b_o) = mean_t e + (mean_t o) W_oᵀ + b_o, and
  mean_t o_t = (mean_t att[t, :]) v (pooled_attention). This form replaced
  F.scaled_dot_product_attention (fused, but over all T query rows): 9.35 → 5.55 ms per compiled
  step at B = 16384 on an H100 (bench/results/h100-2026-12-05-peer-forms-*.json).

Three pieces are compiled apart when asked (make_step(compile=True)): HER, the losses (forward;
AOTAutograd makes their backward) and the update. The step never synchronises with the host, so
it can be captured as one CUDA graph.
"""
import math

import torch

import oracle_torch as ot
import philox_ref as philox

GROUPS = ("q", "iqn", "iql_hi", "iql_lo", "attn")
IQL_KINDS = ("W1", "b1", "W2", "b2", "w3", "b3")


def param_order(c):
    """The flat buffer's order of SPEC §3's parameter names: the Q net with each branch tensor
    kind stacked, IQN, the two IQL nets interleaved per tensor kind, attention."""
    by_group = {g: ot.names_of(c, g) for g in GROUPS}
    q = ["q.W1", "q.b1", "q.W2", "q.b2"]
    for kind in ("V", "c", "U", "e"):
        q += ["q.%s.%d" % (kind, b) for b in range(c.num_branches)]
    q += ["q.w_u", "q.b_u"]
    iql = [net + "." + k for k in IQL_KINDS for net in ("iql_hi", "iql_lo")]
    assert sorted(q) == sorted(by_group["q"])
    assert sorted(iql) == sorted(by_group["iql_hi"] + by_group["iql_lo"])
    return q + by_group["iqn"] + iql + by_group["attn"]


class Layout:
    """Offsets of every parameter in the flat buffers. The Q net's parameters are the first
    n_q floats, the target nets' (Q net, then IQN) the first n_target."""

    def __init__(self, c):
        shapes = {n: s for n, s, _, _ in ot.param_specs(c)}
        self.names = param_order(c)
        self.shape, self.offset = {}, {}
        o = 0
        for n in self.names:
            self.shape[n], self.offset[n] = shapes[n], o
            o += math.prod(shapes[n])
        self.size = o
        self.n_q = self.offset[ot.names_of(c, "iqn")[0]]
        self.n_target = self.offset["iql_hi.W1"]
        self.target_names = [n for n in self.names if self.offset[n] < self.n_target]

    def view(self, flat, name):
        o, shape = self.offset[name], self.shape[name]
        return flat[o:o + math.prod(shape)].view(shape)

    def stacked(self, flat, names):
        """names (consecutive in the buffer, one shape) as one tensor [len(names), *shape]."""
        shape, o = self.shape[names[0]], self.offset[names[0]]
        n = math.prod(shape)
        for k, name in enumerate(names):
            assert self.shape[name] == shape and self.offset[name] == o + k * n, name
        return flat[o:o + len(names) * n].view((len(names),) + tuple(shape))

    def pack(self, tensors, names, prefix=""):
        return torch.cat([tensors[prefix + n].reshape(-1) for n in names])

    def unpack(self, flat, names, prefix=""):
        return {prefix + n: self.view(flat, n) for n in names}


def state_from_oracle(L, S, M, V):
    """The fast step's state from the oracle's tensors (state_to_oracle is its inverse)."""
    st = {"P": L.pack(S, L.names), "T": L.pack(S, L.target_names, "target."),
          "M": L.pack(M, L.names), "V": L.pack(V, L.names)}
    for k in ("sn.u.W1", "sn.u.W2", "regime.s", "regime.scale"):
        if k in S:
            st[k] = S[k].clone()
    return st


def state_to_oracle(L, st):
    """The oracle's (S, M, V) dicts as views of the fast step's state."""
    S = L.unpack(st["P"], L.names)
    S.update(L.unpack(st["T"], L.target_names, "target."))
    for k in ("sn.u.W1", "sn.u.W2", "regime.s", "regime.scale"):
        if k in st:
            S[k] = st[k]
    return S, L.unpack(st["M"], L.names), L.unpack(st["V"], L.names)


def pooled_attention(q, k, v):
    """mean over queries t of softmax(q kᵀ / sqrt(d_head)) v, over [B, H, T, d_head] ->
    [B, H, d_head], the mean taken over the attention weights first (mean_t att[t, :] v), so
    that the product with v and its backward run on one row per head instead of T."""
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return (att.mean(2, keepdim=True) @ v).squeeze(2)


def make_step(c, device, dtype=torch.float32, compile=False):
    """The step as step(st, batch, step_counter) -> outputs: it updates the state dict st and
    the 0-dim int64 step counter in place. compile: True to torch.compile its three pieces, or a
    function that compiles one (bench_torch_peer's, with its mode)."""
    L = Layout(c)
    B, NB, HB = c.batch_size, c.num_branches, c.branch_hidden
    rows = torch.arange(B, device=device, dtype=torch.int64)
    tau_iql = torch.tensor([c.iql_tau_hi, c.iql_tau_lo], dtype=dtype, device=device)[:, None]
    n_range = torch.arange(c.iqn_n, device=device)[None, :]
    nt_range = torch.arange(c.iqn_n_target, device=device)[None, :]
    stack = {kind: ["q.%s.%d" % (kind, b) for b in range(NB)] for kind in ("V", "c", "U", "e")}

    def q_net(flat, x, W1, W2):
        """SPEC §4's Q net, branches stacked: h2 [R, H], g [R, NB, HB], z [R, NB, A]."""
        h1 = ot.silu(x @ W1.T + L.view(flat, "q.b1"))
        h2 = ot.silu(h1 @ W2.T + L.view(flat, "q.b2"))
        Vs = L.stacked(flat, stack["V"]).reshape(NB * HB, -1)
        g = ot.silu(h2 @ Vs.T + L.stacked(flat, stack["c"]).reshape(-1)).view(-1, NB, HB)
        return h2, g, heads(flat, g)

    def heads(flat, g):
        U, e = L.stacked(flat, stack["U"]), L.stacked(flat, stack["e"])          # [NB, A, HB]
        return torch.bmm(g.transpose(0, 1), U.transpose(1, 2)).transpose(0, 1) + e

    def at(q, idx):
        return q.gather(2, idx.unsqueeze(2)).squeeze(2)

    def spectral(Pl, T, st):
        W, Wt, sig, sig_t, u_new = {}, {}, [], [], {}
        zero = torch.zeros((), dtype=dtype, device=device)
        for li, layer in enumerate(("W1", "W2")):
            Wo, Wb = L.view(Pl, "q." + layer), L.view(T, "q." + layer)
            if (c.sn_layers >> li) & 1:
                u2, v = ot.power_iteration(Wo.detach(), st["sn.u." + layer])
                W[layer], s = ot.spectral_weight(Wo, u2, v)
                Wt[layer], s_t = ot.spectral_weight(Wb, u2, v)
                u_new[layer] = u2
                sig.append(s.detach())
                sig_t.append(s_t.detach())
            else:
                W[layer], Wt[layer] = Wo, Wb
                sig.append(zero)
                sig_t.append(zero)
        return W, Wt, sig, sig_t, u_new

    def attn_reward(Pl, obs, g_t):
        """SPEC §4's reward model with composite projections: the tokens' q, k, v straight from
        the raw tokens by (W_qkv W_t) and a per-position bias, and the pooled embedding from the
        tokens' sum, so the embeddings e [B, T, d] are never formed."""
        p = lambda n: L.view(Pl, "attn." + n)  # noqa: E731
        d, H, To = c.attn_d_model, c.attn_heads, c.T_obs
        Wqkv = L.stacked(Pl, ["attn.Wq", "attn.Wk", "attn.Wv"]).reshape(3 * d, d)
        bqkv = L.stacked(Pl, ["attn.bq", "attn.bk", "attn.bv"]).reshape(3 * d)
        tok = obs.view(B, To, c.attn_token_dim)
        # e_t = tok_t W_tᵀ + b_t + P_t, so e_t W_qkvᵀ + b_qkv = tok_t (W_qkv W_t)ᵀ + bias_t
        qkv = tok @ (Wqkv @ p("Wt")).T + ((p("bt") + p("P")[:To]) @ Wqkv.T + bqkv)
        e_sum = tok.sum(1) @ p("Wt").T + (To * p("bt") + p("P")[:To].sum(0))      # Σ_t e_t
        if c.goal_dim > 0:
            eg = g_t @ p("Wg").T + p("bg") + p("P")[To]
            qkv = torch.cat([qkv, (eg @ Wqkv.T + bqkv).unsqueeze(1)], 1)
            e_sum = e_sum + eg
        qkv = qkv.view(B, c.T, 3, H, d // H).permute(2, 0, 3, 1, 4)
        o = pooled_attention(qkv[0], qkv[1], qkv[2])                            # [B, H, dh]
        pool = e_sum / c.T + o.reshape(B, d) @ p("Wo").T + p("bo")
        return ot.silu(pool @ p("Wr1").T + p("br1")) @ p("w_r2") + p("b_r2")

    def losses(Pl, xg, st, batch, her_out, step):
        """The summed loss whose gradient in Pl is SPEC §5's gradient of every learner, and in
        xg the TD loss's input gradient; with the step's outputs and the no-grad results."""
        T = st["T"]
        g_t, r_t, d_t, x, xn, n_rel = her_out
        action, regime = batch["action"], batch["regime"]
        out = {"num_relabelled": n_rel}
        W, Wt, out["sigma"], out["sigma_target"], u_new = spectral(Pl, T, st)
        # 5.3 ddqn
        with torch.no_grad():
            _, _, z_next = q_net(Pl.detach(), xn, W["W1"].detach(), W["W2"].detach())
            a_star = ot.first_argmax(ot.clamp_strict(z_next, c.q_clip))
            h2b, _, zb = q_net(T, torch.cat([x, xn]), Wt["W1"], Wt["W2"])
            qb = ot.clamp_strict(zb, c.q_clip)
            y = r_t.unsqueeze(1) + c.gamma * (1.0 - d_t).unsqueeze(1) * at(qb[B:], a_star)
            qbar_sa = at(qb[:B], action).mean(1)
        # 5.4 forward and TD loss
        h2, g, z = q_net(Pl, xg, W["W1"], W["W2"])
        q_sa = at(ot.clamp_strict(z, c.q_clip), action)
        delta = q_sa - y
        w_reg = st["regime.scale"][regime] if c.num_regimes > 1 else torch.ones_like(r_t)
        L_td = (w_reg.unsqueeze(1) * ot.huber(delta, c.huber_kappa)).sum() / (B * NB)
        out["td_loss"], out["q_mean"] = L_td.detach(), q_sa.detach().mean()
        delta = delta.detach()
        # 5.5.1 EMA of the Q net and IQN from the parameters before Adam
        with torch.no_grad():
            T_new = c.ema_tau * Pl.detach()[: L.n_target] + (1.0 - c.ema_tau) * T
        # 5.5.2 IQL, both nets as batched products
        xd = xg.detach()
        iq = lambda k: L.stacked(Pl, ["iql_hi." + k, "iql_lo." + k])  # noqa: E731
        h = (xd @ iq("W1").reshape(2 * c.iql_hidden, -1).T).view(B, 2, -1).transpose(0, 1)
        h = ot.silu(h + iq("b1").unsqueeze(1))                                    # [2, B, Hi]
        h = ot.silu(torch.bmm(h, iq("W2").transpose(1, 2)) + iq("b2").unsqueeze(1))
        Vx = torch.bmm(h, iq("w3").unsqueeze(2)).squeeze(2) + iq("b3")           # [2, B]
        diff = qbar_sa.unsqueeze(0) - Vx
        L_iql = (torch.abs(tau_iql - (diff < 0).to(dtype)) * diff * diff).mean(1)
        out["iql_loss_hi"], out["iql_loss_lo"] = L_iql[0].detach(), L_iql[1].detach()
        v_hi, v_lo = Vx[0].detach(), Vx[1].detach()
        omega = torch.clamp(torch.exp(c.awr_beta * (qbar_sa - v_hi)), max=c.awr_max)
        # 5.5.3 IQN: the target net after the EMA
        tau_in = ot.torch_uniform(c.seed, rows[:, None], n_range, step,
                                  philox.PURPOSE_IQN_ONLINE, dtype)
        tau_t = ot.torch_uniform(c.seed, rows[:, None], nt_range, step,
                                 philox.PURPOSE_IQN_TARGET, dtype)
        iqn_names = ot.names_of(c, "iqn")
        with torch.no_grad():
            Zt = ot.iqn_value(L.unpack(T_new, iqn_names), "iqn.", xn, tau_t, c)
            T_im = r_t.unsqueeze(1) + c.gamma * (1.0 - d_t).unsqueeze(1) * Zt
        Z = ot.iqn_value(L.unpack(Pl, iqn_names), "iqn.", xd, tau_in, c)
        L_iqn = ot.iqn_loss(c, Z, T_im, tau_in)
        out["iqn_loss"] = L_iqn.detach()
        z_mean = Z.detach().mean(1)
        # 5.5.4 attention
        L_attn = ((attn_reward(Pl, batch["obs"], g_t) - r_t) ** 2).mean()
        out["attn_loss"] = L_attn.detach()
        # 5.5.5 CQL into U_b, e_b only
        total = L_td + L_iql.sum() + L_iqn + L_attn
        if c.cql_alpha > 0:
            qc = ot.clamp_strict(heads(Pl, g.detach()), c.q_clip)
            terms = torch.logsumexp(qc, 2) - at(qc, action)
            L_cql = c.cql_alpha * (omega * terms.sum(1)).sum() / (B * NB)
            out["cql_loss"] = L_cql.detach()
            total = total + L_cql
        else:
            out["cql_loss"] = torch.zeros((), dtype=dtype, device=device)
        # 5.5.6 ensemble
        mu, var, out["ensemble_std"] = ot.ensemble(qbar_sa, v_hi, v_lo, z_mean)
        out["ensemble_mean"], out["ensemble_var"] = mu, var
        # 5.5.7 confidence head, the target's after the EMA
        L_conf, u_on = ot.confidence_loss(c, h2b[B:], L.view(T_new, "q.w_u"),
                                          L.view(T_new, "q.b_u"), var, d_t, h2,
                                          L.view(Pl, "q.w_u"), L.view(Pl, "q.b_u"))
        out["conf_loss"] = L_conf.detach()
        out["confidence"] = 1.0 / (1.0 + torch.sqrt(u_on.detach()))
        total = total + L_conf
        # 5.5.8 regime scale
        s, rho = ot.regime_update(c, st["regime.s"], regime, delta)
        out["regime_scale"] = rho
        return total, out, (T_new, u_new, s, rho)

    def update(st, gP, keep, step):
        """SPEC §5.6 on the flat buffers, in place: the global-norm clip and Adam (lr_q) on the
        Q net, Adam (lr_aux) on the rest; then the EMA'd targets, spectral u, regime state and
        the step counter."""
        T_new, u_new, s, rho = keep
        gq = gP[: L.n_q]
        gn = torch.sqrt((gq * gq).sum())
        P, M, V = st["P"], st["M"], st["V"]
        for sl, g, lr in ((slice(0, L.n_q), gq * ot.clip_factor(c, gn), c.lr_q),
                          (slice(L.n_q, L.size), gP[L.n_q:], c.lr_aux)):
            # ot.adam_update over the slice, as one tensor named "flat"
            p, m, v = ot.adam_update({"flat": P[sl]}, {"flat": g}, {"flat": M[sl]},
                                     {"flat": V[sl]}, ["flat"], lr, c, step + 1)
            P[sl].copy_(p["flat"])
            M[sl].copy_(m["flat"])
            V[sl].copy_(v["flat"])
        st["T"].copy_(T_new)
        for layer, u2 in u_new.items():
            st["sn.u." + layer].copy_(u2)
        st["regime.s"].copy_(s)
        st["regime.scale"].copy_(rho)
        step.add_(1)
        return gn

    def her(batch, step):
        return ot.her(c, batch, step, rows)

    if compile:
        if not hasattr(torch, "compile"):
            raise RuntimeError("torch %s has no torch.compile" % torch.__version__)
        wrap = compile if callable(compile) else torch.compile
        her, losses, update = (wrap(f) for f in (her, losses, update))

    def step_fn(st, batch, step):
        her_out = her(batch, step)
        xg = her_out[3].detach().requires_grad_(True)
        Pl = st["P"].detach().requires_grad_(True)
        total, out, keep = losses(Pl, xg, st, batch, her_out, step)
        gP, gx = torch.autograd.grad(total, [Pl, xg])
        with torch.no_grad():
            out["grad_norm"] = update(st, gP, keep, step)
        out["d_states"] = gx
        out["_grads_q"] = gP[: L.n_q]
        return out

    step_fn.layout = L
    return step_fn
