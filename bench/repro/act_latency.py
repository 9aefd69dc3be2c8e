#!/usr/bin/env python3
"""act() latency on the CUDA backend: default config, 1 and 64 rows, 500 calls after 50, on
two pipelines one after another.

    FOXHUNT_LIBRARY=build/libfoxhunt.so python3 bench/repro/act_latency.py

Written for the side-by-side run of cublasGemmEx and cublasLtMatmul in act()'s GEMMs (the trial
switch FOXHUNT_GEMM=gemmex|lt, since deleted). Result:
bench/results/h200-2026-12-03-gemm-lt-probes.txt.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
import foxhunt  # noqa: E402

for run in range(2):
    with foxhunt.Pipeline(backend="cuda", batch_size=1024) as p:
        rng = np.random.default_rng(0)
        for n in (1, 64):
            obs = rng.random((n, 124)).astype(np.float32)
            goal = rng.random((n, 4)).astype(np.float32)
            for _ in range(50):
                p.act(obs, goal=goal)
            t = time.perf_counter()
            for _ in range(500):
                p.act(obs, goal=goal)
            us = (time.perf_counter() - t) / 500 * 1e6
            print(f"pipeline {run} act n={n}: {us:.1f} us per call")
