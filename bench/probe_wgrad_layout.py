#!/usr/bin/env python3
"""A probe for the next change, not a benchmark of foxhunt: how long cuBLAS (through PyTorch)
takes for the step's weight-gradient products dW[M, N] = Σ_k A[k, M] B[k, N] with the operands
stored as the step stores them today (rows of the batch outermost: both operands M- or N-major)
against stored transposed (A as [M, K], B as [N, K]: both K-major, the only layout that Hopper's
TF32 warpgroup instructions read). TF32, CUDA events, median of --reps calls after a warm-up.
Prints a table and writes JSON to --out.

    python3 bench/probe_wgrad_layout.py [--reps 50] [--out wgrad_layout.json]
"""
import argparse
import json
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import bench_torch_peer  # noqa: E402

# (what, M, N, K) at the default config, B = 16384 (K = B, or B·N = 131072 for IQN)
SHAPES = [
    ("IQN dWm = dh^T m", 128, 128, 131072),
    ("IQN dWphi = dphi^T cos", 128, 64, 131072),
    ("branch dV = dpre^T h2", 128, 256, 16384),
    ("trunk dW2 = dpre2^T h1", 256, 256, 16384),
    ("trunk dW1 = dpre1^T x", 256, 128, 16384),
    ("IQL dW2 = dpre2^T h1", 128, 128, 16384),
]


def time_ms(fn, reps):
    """Median milliseconds of `reps` calls after five (bench_torch_peer's CUDA-event timer)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return statistics.median(bench_torch_peer.time_it(fn, reps, torch.device("cuda")))


def kernels(fn):
    """The names of the kernels one call launches (cuBLAS's choice), shortened."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.key[:90] for e in prof.key_averages() if e.device_type.name == "CUDA"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default="wgrad_layout.json")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_wgrad_layout: CUDA is not available (skipped).")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    print("%-26s %5s %5s %7s  %12s %12s %7s  %9s" % ("product", "M", "N", "K", "rows-major ms",
                                                    "K-major ms", "ratio", "max diff"))
    for what, M, N, K in SHAPES:
        A = torch.randn(K, M, device=dev, generator=g)   # today's storage: [K, M], [K, N]
        B = torch.randn(K, N, device=dev, generator=g)
        At, Bt = A.t().contiguous(), B.t().contiguous()  # transposed storage: [M, K], [N, K]
        out1 = torch.empty(M, N, device=dev)
        out2 = torch.empty(M, N, device=dev)
        t_rows = time_ms(lambda: torch.matmul(A.t(), B, out=out1), args.reps)
        t_k = time_ms(lambda: torch.matmul(At, Bt.t(), out=out2), args.reps)
        diff = float((out1 - out2).abs().max() / out1.abs().max())
        names = (kernels(lambda: torch.matmul(A.t(), B, out=out1)),
                 kernels(lambda: torch.matmul(At, Bt.t(), out=out2)))
        rows.append({"product": what, "M": M, "N": N, "K": K, "rows_major_ms": t_rows,
                     "k_major_ms": t_k, "max_rel_diff": diff, "rows_major_kernels": names[0],
                     "k_major_kernels": names[1]})
        print("%-26s %5d %5d %7d  %12.4f %12.4f %7.2f  %9.2e" % (what, M, N, K, t_rows, t_k,
                                                                t_rows / t_k, diff))
        print("    rows-major: %s\n    K-major:    %s" % (" + ".join(names[0]),
                                                      " + ".join(names[1])))
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tf32": True,
            "reps": args.reps, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
