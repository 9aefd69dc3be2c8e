"""The fast PyTorch peer (peer_fast.py) against the oracle (oracle_torch.step_tensors): in
float64 on the CPU, every state tensor, Adam moment, metric and step output after each of three
steps, on every lockstep config; in float32 at SPEC §1's sizes, on the CPU and (with a GPU)
eager, compiled and captured as a CUDA graph, as bench_torch_peer times it. The peer's timings
are only worth quoting if it computes the oracle's step; the two are written differently (flat
buffers, stacked branches, one backward, pooled attention), so they agree to rounding, not
bitwise."""
import numpy as np
import pytest
import torch

import lockstep as ls
import oracle_torch as ot
import peer_fast
from batches import make_batch

RTOL = 1e-10  # per tensor, ||fast - oracle|| / ||oracle|| (reached: ~1e-15)
# ... or an RMS difference below ATOL in gradient units (gradients, Adam's first moment, the
# square root of its second), for tensors whose exact gradient is 0
ATOL = 1e-14
# Attention's b_k has gradient 0 exactly (softmax ignores a shift shared by all keys): both
# steps hold rounding noise (~1e-16) there, which Adam's update scales by lr / eps, so its value
# is not compared, only its gradient (ATOL) and that Adam kept it within its step bound.
ZERO_GRADIENT = {"attn.bk"}
STEPS = 3


def rel_err(a, b):
    """lockstep.rel_err of two tensors (on any device)."""
    return ls.rel_err(a.detach().cpu().double(), b.detach().cpu().double())


def close(a, b):
    rms = float(torch.linalg.vector_norm((a - b).double().reshape(-1))) / max(1, b.numel()) ** 0.5
    return rel_err(a, b) <= RTOL or rms <= ATOL


def torch_batch(c, seed):
    f = lambda a: torch.as_tensor(np.asarray(a, np.float64))  # noqa: E731
    b = make_batch(c, np.random.default_rng(seed))
    out = {k: f(v) for k, v in b.items() if k not in ("action", "regime")}
    out["done"] = f(b["done"].astype(np.float64))
    out["action"] = torch.as_tensor(b["action"].astype(np.int64))
    out["regime"] = torch.as_tensor(b["regime"].astype(np.int64))
    return out


OUTPUTS = ("td_loss", "q_mean", "cql_loss", "iql_loss_hi", "iql_loss_lo", "iqn_loss",
           "attn_loss", "conf_loss", "grad_norm", "ensemble_mean", "ensemble_var",
           "ensemble_std", "confidence", "d_states", "regime_scale", "num_relabelled")


@pytest.mark.parametrize("name", list(ls.CONFIGS))
def test_fast_peer_is_the_oracle_step(name):
    c = ls.config(name)
    S, M, V = ot.initial_tensors(c)
    step_fn = peer_fast.make_step(c, torch.device("cpu"), torch.float64)
    L = step_fn.layout
    st = peer_fast.state_from_oracle(L, S, M, V)
    counter = torch.zeros((), dtype=torch.int64)
    worst = 0.0
    for k in range(STEPS):
        batch = torch_batch(c, 100 + k)
        S, M, V, ref = ot.step_tensors(c, S, M, V, batch, torch.tensor(k))
        out = step_fn(st, batch, counter)
        assert int(counter) == k + 1
        S2, M2, V2 = peer_fast.state_to_oracle(L, st)
        assert set(S2) == set(S)
        for key in S:
            if key in ZERO_GRADIENT:
                # |Adam's step| <= lr (1 - b1) / sqrt(1 - b2) (3.2 lr); b_k starts at 0
                assert float(S2[key].abs().max()) <= (k + 1) * 3.2 * c.lr_aux, (k, key)
                continue
            if float(S[key].abs().max()) > 1e-12:  # not the noise-only tensors (ATOL)
                worst = max(worst, rel_err(S2[key], S[key]))
            assert close(S2[key], S[key]), (k, key, rel_err(S2[key], S[key]))
        for key in M:
            assert close(M2[key], M[key]), (k, "M", key)
            assert close(V2[key].sqrt(), V[key].sqrt()), (k, "V", key)  # gradient units
        for key in OUTPUTS:
            assert rel_err(out[key], ref[key]) <= RTOL, (k, key)
        for i in range(2):
            assert rel_err(out["sigma"][i], ref["sigma"][i]) <= RTOL, (k, "sigma", i)
            assert rel_err(out["sigma_target"][i], ref["sigma_target"][i]) <= RTOL
        grads = L.unpack(out["_grads_q"], ot.names_of(c, "q"))
        for key, g in ref["_grads_q"].items():
            assert close(grads[key], g), (k, "grad", key)
        # the step did something: the TD loss and the parameters moved
        assert float(ref["td_loss"]) > 0
    S0 = ot.initial_tensors(c)[0]
    assert rel_err(S["q.W1"], S0["q.W1"]) > 1e-6
    print("%s: largest relative error %.2e" % (name, worst))


def test_layout_covers_every_parameter_once():
    c = ls.config("wide")
    L = peer_fast.Layout(c)
    specs = ot.param_specs(c)
    assert sorted(L.names) == sorted(n for n, _, _, _ in specs)
    assert L.size == sum(int(np.prod(s)) for _, s, _, _ in specs)
    flat = torch.arange(L.size, dtype=torch.float64)
    seen = torch.cat([L.view(flat, n).reshape(-1) for n in L.names])
    assert torch.equal(seen, flat)  # contiguous, in order, no overlap
    assert L.n_q == sum(int(np.prod(s)) for _, s, _, g in specs if g == "q")
    with pytest.raises(AssertionError):
        L.stacked(flat, ["q.V.0", "q.V.2"])  # not consecutive


CUDA = torch.cuda.is_available()


def run_fast(c, step_fn, batches, device, capture_after=None):
    """step_fn (peer_fast.make_step's, float32 on `device`) over `batches` from the initial
    state, eagerly; with capture_after = k, the first k steps eager and the rest as replays of
    one captured CUDA graph of the step (the batch copied into the captured inputs before each
    replay). Returns (state, outputs of the last step)."""
    f32 = lambda t: t.to(device=device, dtype=torch.float32 if t.is_floating_point()  # noqa: E731
                         else t.dtype)
    S, M, V = ot.initial_tensors(c)
    st = {k: f32(v) for k, v in peer_fast.state_from_oracle(step_fn.layout, S, M, V).items()}
    counter = torch.zeros((), dtype=torch.int64, device=device)
    static = {k: f32(v) for k, v in batches[0].items()}
    out, graph = None, None
    for k, b in enumerate(batches):
        for key, v in b.items():
            static[key].copy_(f32(v))
        if capture_after is None or k < capture_after:
            out = step_fn(st, static, counter)
            continue
        if graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = step_fn(st, static, counter)  # recorded, not run
        graph.replay()
    return st, out


def check_fast_float32(c, st, out, S, ref):
    """The fast peer's float32 state after the steps against the oracle's float64."""
    S_fast = peer_fast.state_to_oracle(peer_fast.Layout(c), st)[0]
    for key in S:
        if key not in ZERO_GRADIENT:
            assert rel_err(S_fast[key].cpu(), S[key]) <= 1e-4, key
    assert rel_err(out["td_loss"].cpu(), ref["td_loss"]) <= 1e-5
    assert int(out["num_relabelled"]) == int(ref["num_relabelled"])


def oracle_run(c, batches):
    S, M, V = ot.initial_tensors(c)
    for k, b in enumerate(batches):
        S, M, V, ref = ot.step_tensors(c, S, M, V, b, torch.tensor(k))
    return S, ref


# SPEC §1's sizes at B = 64, Adam's eps large enough that its update is linear in the gradient
# (lockstep.LINEAR_ADAM): float32 and float64 then differ by the gradients' rounding only
GPU_CONFIG = dict(adam_eps=1e-2)


def test_fast_peer_in_float32_on_the_cpu():
    """The comparison the CUDA test below makes, on the CPU: float32 against float64."""
    c = ls.config("spec_defaults", **GPU_CONFIG)
    batches = [torch_batch(c, 300 + k) for k in range(4)]
    S, ref = oracle_run(c, batches)
    step_fn = peer_fast.make_step(c, torch.device("cpu"), torch.float32)
    st, out = run_fast(c, step_fn, batches, torch.device("cpu"))
    check_fast_float32(c, st, out, S, ref)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.skipif(
    not hasattr(torch, "compile"), reason="torch %s has no torch.compile" % torch.__version__))])
def test_fast_peer_on_cuda_compiled_and_captured(compile):
    """What bench_torch_peer times: the fast peer in float32 on the GPU (TF32 off), eager or
    torch.compile'd, then captured as a CUDA graph, against the oracle in float64 over 4 steps;
    the captured replays against the same steps run eagerly."""
    c = ls.config("spec_defaults", **GPU_CONFIG)
    batches = [torch_batch(c, 300 + k) for k in range(4)]
    S, ref = oracle_run(c, batches)
    dev = torch.device("cuda")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        step_fn = peer_fast.make_step(c, dev, torch.float32, compile=compile)
        st_e, out_e = run_fast(c, step_fn, batches, dev)
        st_g, out_g = run_fast(c, step_fn, batches, dev, capture_after=2)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    check_fast_float32(c, st_e, out_e, S, ref)
    check_fast_float32(c, st_g, out_g, S, ref)
    for key in st_e:  # the graph's replays are the eager steps
        assert rel_err(st_g[key], st_e[key]) <= 1e-6, key
