#!/usr/bin/env python3
"""Per-child step times at B = 16384 (TF32) for several cuBLAS workspace sizes
(fh_config.workspace_mib), multi- and single-stream: whether a lane's GEMMs pick other, slower
kernels on a smaller workspace. The lanes that run only branch layers and CQL get half of
workspace_mib (src/schedule.cpp, lane_workspace_bytes); the others the full size.

    python3 bench/repro/workspace_sweep.py LIBRARY

Medians of 30 steps after 8 on one uploaded batch (fh_pipeline_timings), and the bytes of
workspace held (fh_pipeline_memory). Result: bench/results/h200-2026-12-01-workspace-sweep.txt.
"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

import numpy as np  # noqa: E402
import foxhunt  # noqa: E402
import oracle_torch as ot  # noqa: E402
from batches import make_batch  # noqa: E402

SHOWN = ("ddqn_ms", "forward_ms", "aux_ms", "total_ms", "aux_iql_ms", "aux_iqn_ms", "aux_attn_ms")


def main(lib):
    batch = make_batch(ot.OracleConfig(batch_size=16384), np.random.default_rng(1))
    for mode in ("multi_stream", "single_stream"):
        for mib in (16, 24, 32, 48, 64):
            with foxhunt.Pipeline(library=lib, backend="cuda", batch_size=16384,
                                  workspace_mib=mib, exec_mode=mode) as p:
                p.upload(**batch)
                for _ in range(8):
                    p.step()
                ts = []
                for _ in range(30):
                    p.step()
                    ts.append(p.timings())
                med = {k: statistics.median(t[k] for t in ts) for k in SHOWN}
                ws = p.memory()["workspaces"] / 2**20
                print(f"{mode:13s} W={mib:3d}  " + "  ".join(f"{k}={v:.3f}" for k, v in med.items())
                      + f"  ws={ws:.0f}MiB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
