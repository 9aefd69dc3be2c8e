#!/usr/bin/env python3
"""Make a cudaGraphDebugDotPrint dump readable and name the children.

usage: render_graph.py IN.dot OUT.dot [CHILDREN]   (then: dot -Tsvg OUT.dot -o OUT.svg)

Kernel names are demangled with c++filt and shortened to the kernel's own name (cuBLAS
kernels to their first 48 characters); the parent's child-graph clusters are labelled with the
schedule's child names in order of appearance: CHILDREN, comma-separated, default
her,spectral,ddqn,forward,aux,adam (with a replay, give sample first).
"""
import re
import subprocess
import sys

src, dst = sys.argv[1], sys.argv[2]
text = open(src).read()
mangled = sorted(set(re.findall(r"_Z[0-9A-Za-z_]+", text)), key=len, reverse=True)
if mangled:
    out = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout
    for m, d in zip(mangled, out.splitlines()):
        name = d.replace("(anonymous namespace)::", "").split("(")[0]
        name = name.split("::")[-1] or d[:48]
        text = text.replace(m, name)
# long library kernel names (cuBLAS/CUTLASS)
text = re.sub(r'label="(\d+)\n([^"\n]{48})[^"\n]*\n', r'label="\1\n\2...\n', text)
children = (sys.argv[3] if len(sys.argv) > 3 else "her,spectral,ddqn,forward,aux,adam").split(",")
# The parent is the first cluster; its child-graph nodes name the children's clusters in order.
parent = re.search(r'subgraph (cluster_\d+) \{\s*label="(graph_\d+)"', text)
if parent:
    text = text.replace('label="%s"' % parent.group(2), 'label="step (parent graph)"', 1)
order = re.findall(r'label="\d+\n(graph_\d+)\n"', text)
for name, g in zip(children, order):
    text = text.replace('label="%s"' % g, 'label="%s child"' % name)
    text = re.sub(r'(label="\d+\n)%s(\n")' % g, r"\1%s\2" % name, text)
open(dst, "w").write(text)
