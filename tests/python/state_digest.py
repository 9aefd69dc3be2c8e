#!/usr/bin/env python3
"""SHA-256 of everything a pipeline holds after a few steps: for checking that a refactor left
the results bit for bit as they were (run it against the library before and after; same machine).

    python3 tests/python/state_digest.py LIBRARY [--backend cuda] [--steps 5] [--batch 2048]

For each of math_mode strict/tf32/bf16 and exec_mode multi/single (the CPU backend has one mode), it
creates a pipeline with SPEC §1's defaults at --batch, trains --steps steps on fixed random
batches (one new batch per step, as a trainer uploads), and prints one line per mode: the digest
of every named tensor (in registry order) and every metric after each step. Two builds agree
bitwise when their lines are equal.
"""
import argparse
import hashlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))
sys.path.insert(0, HERE)

import foxhunt  # noqa: E402
from batches import make_batch  # noqa: E402
import oracle_torch as ot  # noqa: E402


def digest(library, backend, math_mode, exec_mode, steps, batch):
    kw = dict(backend=backend, batch_size=batch)
    if backend == "cuda":
        kw.update(math_mode=math_mode, exec_mode=exec_mode + "_stream")
    c = ot.OracleConfig(batch_size=batch)
    h = hashlib.sha256()
    with foxhunt.Pipeline(library=library, **kw) as p:
        for s in range(steps):
            p.upload(**make_batch(c, np.random.default_rng(1000 + s)))
            p.step()
            for k, v in sorted(p.metrics().items()):
                h.update(k.encode() + np.float64(v).tobytes())
        for name, _, _ in p.tensors():
            h.update(name.encode() + np.ascontiguousarray(p.read(name)).tobytes())
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("library")
    ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2048)
    a = ap.parse_args(argv)
    modes = ([(m, e) for m in ("strict", "tf32", "bf16") for e in ("multi", "single")]
             if a.backend == "cuda" else [("-", "-")])
    for math_mode, exec_mode in modes:
        d = digest(os.path.abspath(a.library), a.backend, math_mode, exec_mode, a.steps, a.batch)
        print("%-4s %-6s %-6s B=%d steps=%d %s" % (a.backend, math_mode, exec_mode, a.batch,
                                                   a.steps, d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
