#!/usr/bin/env python3
"""A probe for the next change, not a benchmark of foxhunt: how long cuBLAS (through PyTorch)
takes for the step's weight-gradient products dW[M, N] = Σ_k A[k, M] B[k, N] with the operands
stored as the step stores them today (rows of the batch outermost: both operands M- or N-major)
against stored transposed (A as [M, K], B as [N, K]: both K-major, the only layout that Hopper's
TF32 warpgroup instructions read). TF32; the time is the kernels' device time per call (the
profiler's, over --reps calls after a warm-up: the GEMM and its split-K reduction, not the host's
launch latency, which a per-call event timer would add to these 10 to 60 µs products). Prints a
table and writes JSON to --out.

    python3 bench/probe_wgrad_layout.py [--reps 50] [--out wgrad_layout.json]
"""
import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile

# (what, M, N, K) at the default config, B = 16384 (K = B, or B·N = 131072 for IQN)
SHAPES = [
    ("IQN dWm = dh^T m", 128, 128, 131072),
    ("IQN dWphi = dphi^T cos", 128, 64, 131072),
    ("branch dV = dpre^T h2", 128, 256, 16384),
    ("trunk dW2 = dpre2^T h1", 256, 256, 16384),
    ("trunk dW1 = dpre1^T x", 256, 128, 16384),
    ("IQL dW2 = dpre2^T h1", 128, 128, 16384),
]


def device_time(fn, reps):
    """(milliseconds of kernel time per call, the kernels' names) over `reps` calls after five."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    total_us = sum(e.self_device_time_total for e in events)
    return total_us / 1e3 / reps, [e.key[:90] for e in events]


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
    print("%-26s %5s %5s %7s  %13s %11s %13s  %12s" % (
        "product", "M", "N", "K", "rows-major ms", "K-major ms", "K-major/rows", "max rel diff"))
    for what, M, N, K in SHAPES:
        A = torch.randn(K, M, device=dev, generator=g)   # today's storage: [K, M], [K, N]
        B = torch.randn(K, N, device=dev, generator=g)
        At, Bt = A.t().contiguous(), B.t().contiguous()  # transposed storage: [M, K], [N, K]
        out1 = torch.empty(M, N, device=dev)
        out2 = torch.empty(M, N, device=dev)
        t_rows, k_rows = device_time(lambda: torch.matmul(A.t(), B, out=out1), args.reps)
        t_k, k_k = device_time(lambda: torch.matmul(At, Bt.t(), out=out2), args.reps)
        diff = float((out1 - out2).abs().max() / out1.abs().max())
        rows.append({"product": what, "M": M, "N": N, "K": K, "rows_major_ms": t_rows,
                     "k_major_ms": t_k, "max_rel_diff": diff, "rows_major_kernels": k_rows,
                     "k_major_kernels": k_k})
        print("%-26s %5d %5d %7d  %13.4f %11.4f %13.2f  %12.2e" % (what, M, N, K, t_rows, t_k,
                                                                   t_k / t_rows, diff))
        print("    rows-major: %s\n    K-major:    %s" % (" + ".join(k_rows), " + ".join(k_k)))
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tf32": True,
            "reps": args.reps, "time": "kernel device time per call (torch.profiler)",
            "rows": rows}
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
