#!/usr/bin/env python3
"""Where the PyTorch peer's GPU time goes: torch.profiler over a few steps of one of
bench_torch_peer.py's modes (not the captured ones: inside a CUDA graph the profiler sees one
launch), the kernels by total time. For a GPU; prints the table and writes it to --out.

    python3 tests/python/profile_torch_peer.py [--mode fast_compile] [--batch-size 16384]
"""
import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch_peer as bp  # noqa: E402
import oracle_torch as ot  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="fast_compile", choices=("eager", "compile", "fast_eager",
                                                               "fast_compile"))
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_torch_peer: CUDA is not available (skipped).")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cuda")
    c = ot.OracleConfig(batch_size=args.batch_size)
    fast = args.mode.startswith("fast_")
    comp = args.mode.endswith("compile")
    st = bp.FastStep(c, device, compile=comp) if fast else bp.Step(c, device)
    fn = bp.compiled(st) if comp and not fast else st
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    # torch >= 2.4 names the columns device_*; earlier releases cuda_*
    key = "device_time_total" if hasattr(events[0], "device_time_total") else "cuda_time_total"
    table = events.table(sort_by=key, row_limit=args.rows, max_name_column_width=90)
    total_us = sum(getattr(e, "self_" + key) for e in events) / args.steps
    head = "%s, B = %d, %d steps: %.3f ms of kernels per step" % (
        args.mode, args.batch_size, args.steps, total_us / 1e3)
    print(head)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(head + "\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
