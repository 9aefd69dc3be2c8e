#!/usr/bin/env python3
"""The foxhunt training step (SPEC §5) as a PyTorch peer on a GPU, in two forms: the oracle's
step_tensors (written for clarity) and peer_fast.py's (the same step written for speed: flat
parameter buffers, stacked branches, one backward, attention pooled before v; modes prefixed
fast_). Each is timed in eager mode, replayed as a CUDA graph, under torch.compile, and compiled
then replayed as a CUDA graph (compile_graph: how the brief's PyTorch reference figure was
taken). Prints a table and writes JSON, for comparison with libfoxhunt's CUDA-graph executor
(examples/ benchmark).

    python3 tests/python/bench_torch_peer.py [--batch-size 16384] [--iters 50] [--json out.json]

Without CUDA it says so and exits 0 (--allow-cpu runs the eager modes on the CPU, for smoke
tests). Both forms compute the same step: test_peer_fast.py holds them equal in float64, and in
float32 they agree to rounding; the first step's td_loss of every mode is printed beside its
time as a check. It exits 1 when no mode ran (each mode's error is in the table), 2 on bad
arguments.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import oracle_torch as ot  # noqa: E402
import peer_fast  # noqa: E402


def make_batch(c, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    B, O, G, NB = c.batch_size, c.obs_dim, c.goal_dim, c.num_branches
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    b = {"obs": r(B, O), "next_obs": r(B, O), "reward": r(B),
         "done": (torch.rand(B, generator=g) < 0.1).float(),
         "action": torch.randint(0, c.actions_per_branch, (B, NB), generator=g),
         "regime": torch.randint(0, c.num_regimes, (B,), generator=g)}
    if G:
        b.update(goal=r(B, G), next_achieved_goal=r(B, G), her_goal=r(B, G))
    return {k: v.to(device) for k, v in b.items()}


class Step:
    """One training step that updates static state tensors in place (graph-capturable)."""

    def __init__(self, c, device):
        self.c = c
        self.S, self.M, self.V = ot.initial_tensors(c, torch.float32, device)
        self.batch = make_batch(c, device)
        self.step = torch.zeros((), dtype=torch.int64, device=device)

    def __call__(self):
        S2, M2, V2, out = ot.step_tensors(self.c, self.S, self.M, self.V, self.batch, self.step)
        with torch.no_grad():
            for k, v in S2.items():
                if v is not self.S[k]:
                    self.S[k].copy_(v)
            for k in M2:
                self.M[k].copy_(M2[k])
                self.V[k].copy_(V2[k])
            self.step.add_(1)
        return out["td_loss"]


_FAST_STEPS = {}


class FastStep:
    """peer_fast's step on the same initial state and batch as Step, updated in place;
    compile: its pieces under torch.compile (compiled once per process: fast_compile and
    fast_compile_graph share the code, as the oracle's compile modes share dynamo's cache)."""

    def __init__(self, c, device, compile=False):
        S, M, V = ot.initial_tensors(c, torch.float32, device)
        key = (repr(c), str(device), compile, compile_mode)
        if key not in _FAST_STEPS:
            _FAST_STEPS[key] = peer_fast.make_step(c, device, torch.float32,
                                                   compile=compile and compiled)
        self.fn = _FAST_STEPS[key]
        self.st = peer_fast.state_from_oracle(self.fn.layout, S, M, V)
        self.batch = make_batch(c, device)
        self.step = torch.zeros((), dtype=torch.int64, device=device)

    def __call__(self):
        return self.fn(self.st, self.batch, self.step)["td_loss"]


MODES = ("eager", "cuda_graph", "compile", "compile_graph")
ALL_MODES = MODES + tuple("fast_" + m for m in MODES)
CPU_MODES = ("eager", "fast_eager")


def time_it(fn, iters, device):
    """Per-iteration milliseconds (CUDA events on a GPU, a wall clock on the CPU)."""
    ms = []
    for _ in range(iters):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
    return ms


# torch.compile's mode for every compiled mode (--compile-mode): "default", or
# "max-autotune-no-cudagraphs" (Triton GEMM templates autotuned against cuBLAS; minutes to
# compile). The modes that capture a CUDA graph capture it themselves.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
compile_mode = "default"


def compiled(fn):
    if not hasattr(torch, "compile"):
        raise RuntimeError("torch %s has no torch.compile" % torch.__version__)
    return torch.compile(fn, mode=compile_mode)


def run_mode(mode, c, device, iters, warmup):
    """One mode: MODES, for the oracle's step, or fast_ + one of them, for peer_fast's."""
    fast = mode.startswith("fast_")
    base = mode[len("fast_"):] if fast else mode
    if base not in MODES:
        raise ValueError(mode)
    if fast:
        st = FastStep(c, device, compile=base.startswith("compile"))
        res = {"mode": mode, "peer": "fast"}
    else:
        st = Step(c, device)
        res = {"mode": mode, "peer": "oracle"}
    if base == "eager":
        first = float(st())
        for _ in range(warmup):
            st()
        ms = time_it(st, iters, device)
    elif base in ("cuda_graph", "compile_graph"):
        # The whole step captured once and replayed; compile_graph captures the torch.compile'd
        # step (Triton kernels) instead of the eager one.
        fn = compiled(st) if base == "compile_graph" and not fast else st
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (compile, autograd, cuBLAS) off the main stream
            t0 = time.perf_counter()
            first = float(fn())
            if base == "compile_graph":
                res["compile_s"] = time.perf_counter() - t0
            for _ in range(max(warmup, 3)):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loss = fn()
        ms = time_it(graph.replay, iters, device)
        res["replayed_td_loss"] = float(loss)
    else:  # compile
        fn = st if fast else compiled(st)
        t0 = time.perf_counter()
        first = float(fn())
        res["compile_s"] = time.perf_counter() - t0
        for _ in range(warmup):
            fn()
        ms = time_it(fn, iters, device)
    res.update(first_step_td_loss=first, iters=iters, ms_median=statistics.median(ms),
               ms_mean=statistics.fmean(ms), ms_min=min(ms), ms_max=max(ms))
    return res


def parse_foxhunt(text):
    """MODE:GRAPH_MS:WALL_MS[,...] -> [{"mode", "graph_ms", "wall_ms"}]; ValueError names the
    malformed item."""
    out = []
    for item in filter(None, text.split(",")):
        parts = item.split(":")
        try:
            mode, graph_ms, wall_ms = parts[0], float(parts[1]), float(parts[2])
            if len(parts) != 3 or not mode or not graph_ms > 0 or not wall_ms > 0:
                raise ValueError
        except (IndexError, ValueError):
            raise ValueError("%r is not MODE:GRAPH_MS:WALL_MS with times > 0" % item) from None
        out.append({"mode": mode, "graph_ms": graph_ms, "wall_ms": wall_ms})
    return out


def print_ratios(ours, results):
    """Each peer mode's median time over each of libfoxhunt's (back-to-back wall time per
    step: what a trainer sees), measured on the same GPU in the same run."""
    timed = [r for r in results if "error" not in r]
    print("\nside by side: peer median ms / libfoxhunt wall ms per step (> 1: foxhunt faster)")
    width = [max(11, len(r["mode"])) for r in timed]
    print("%-14s %9s" % ("libfoxhunt", "wall ms")
          + "".join(" %*s" % (w, r["mode"]) for w, r in zip(width, timed)))
    for o in ours:
        o["peer_over_foxhunt"] = {r["mode"]: r["ms_median"] / o["wall_ms"] for r in timed}
        print("%-14s %9.3f" % (o["mode"], o["wall_ms"])
              + "".join(" %*.2fx" % (w - 1, o["peer_over_foxhunt"][r["mode"]])
                        for w, r in zip(width, timed)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default=",".join(ALL_MODES),
                    help="comma-separated: %s, each also prefixed fast_ (peer_fast's step)"
                    % ", ".join(MODES))
    ap.add_argument("--tf32", choices=("on", "off"), default="on",
                    help="TF32 matmuls (libfoxhunt's default FH_MATH_TF32 is 'on')")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "bench_torch_peer.json"))
    ap.add_argument("--compile-mode", default="default", choices=COMPILE_MODES,
                    help="torch.compile's mode in the compile modes of both peers")
    ap.add_argument("--allow-cpu", action="store_true", help="run the eager modes on the CPU")
    ap.add_argument("--foxhunt", default="",
                    help="libfoxhunt's own times at this batch, MODE:GRAPH_MS:WALL_MS[,...] "
                         "(foxhunt-bench passes them): printed with each peer mode's ratio")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ALL_MODES:
            ap.error("--modes: unknown mode %r (known: %s)" % (m, ", ".join(ALL_MODES)))
    if not modes:
        ap.error("--modes: no mode given")
    for name, value, least in (("--batch-size", args.batch_size, 1), ("--iters", args.iters, 1),
                               ("--warmup", args.warmup, 0)):
        if value < least:
            ap.error("%s: %d is below %d" % (name, value, least))
    try:
        ours = parse_foxhunt(args.foxhunt)
    except ValueError as e:
        ap.error("--foxhunt: %s" % e)

    if torch.cuda.is_available():
        device = torch.device("cuda")
    elif args.allow_cpu:
        device = torch.device("cpu")
    else:
        print("bench_torch_peer: CUDA is not available; nothing to time (skipped).")
        return 0
    global compile_mode
    compile_mode = args.compile_mode
    torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
    torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    c = ot.OracleConfig(batch_size=args.batch_size)  # SPEC §1 defaults otherwise
    if device.type == "cpu":
        dropped = [m for m in modes if m not in CPU_MODES]
        modes = [m for m in modes if m in CPU_MODES]
        if dropped:
            print("bench_torch_peer: on the CPU only the eager modes run; not run: %s"
                  % ", ".join(dropped))
        if not modes:
            ap.error("--allow-cpu: none of --modes runs on the CPU (%s do)"
                     % ", ".join(CPU_MODES))

    results = []
    for mode in modes:
        try:
            r = run_mode(mode, c, device, args.iters, args.warmup)
        except Exception as e:  # report and carry on with the other modes
            r = {"mode": mode, "error": "%s: %s" % (type(e).__name__, e)}
        results.append(r)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    dev_name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor()
    print("\nfoxhunt step, PyTorch %s peer on %s, B=%d, float32, TF32 %s"
          % (torch.__version__, dev_name, c.batch_size, args.tf32))
    w = max([len(r["mode"]) for r in results] + [11])
    print("%-*s %10s %10s %10s %14s  %s" % (w, "mode", "median ms", "mean ms", "min ms",
                                            "step-1 td_loss", "note"))
    for r in results:
        if "error" in r:
            print("%-*s %10s %10s %10s %14s  %s" % (w, r["mode"], "-", "-", "-", "-", r["error"]))
            continue
        note = ""
        if "compile_s" in r:  # under a second: dynamo reused the code compiled by an earlier mode
            note = ("compile %.1f s" % r["compile_s"] if r["compile_s"] >= 1.0
                    else "compiled code reused")
        print("%-*s %10.3f %10.3f %10.3f %14.7g  %s"
              % (w, r["mode"], r["ms_median"], r["ms_mean"], r["ms_min"],
                 r["first_step_td_loss"], note))
    if ours:
        print_ratios(ours, results)
    report = {"device": dev_name, "torch": torch.__version__, "tf32": args.tf32,
              "compile_mode": args.compile_mode,
              "config": ot.dataclasses.asdict(c), "results": results, "foxhunt": ours}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print("wrote", args.json)
    if all("error" in r for r in results):
        print("bench_torch_peer: no mode ran", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
