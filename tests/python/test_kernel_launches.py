"""The launch contract of cuda/launch.cuh, checked in the sources (no GPU needed).

Every kernel of cuda/ is launched with programmatic dependent launch (FH_LAUNCH or
launch_pdl), and so must begin with pdl_enter(): a kernel that touched global memory before
waiting for its predecessor would race with it, and nothing at run time would say so (the
results would differ only now and then). So: every __global__ function's first statement is
pdl_enter(), and no kernel is launched with <<<...>>> or cudaLaunchKernel (without PDL its
dependents' edges would be plain ones; harmless, but the rule would no longer be one rule),
except the one-thread capability probe of cuda/linear_silu.cu, launched once outside any
graph.
"""
import pathlib
import re

CUDA = pathlib.Path(__file__).resolve().parents[2] / "cuda"
PROBE = "k_linear_probe"


def sources():
    files = sorted(list(CUDA.glob("*.cu")) + list(CUDA.glob("*.cuh")))
    assert files, f"no CUDA sources under {CUDA}"
    return [(f, re.sub(r"//[^\n]*", "", f.read_text())) for f in files]


def kernels(text):
    """(name, first statement) of each __global__ function defined in text."""
    for m in re.finditer(r"__global__", text):
        brace, semi = text.find("{", m.end()), text.find(";", m.end())
        if semi != -1 and semi < brace:
            continue  # a declaration
        head = text[m.end():brace]
        name = re.findall(r"(\w+)\s*\(", head)
        name = [n for n in name if n != "__launch_bounds__"]
        body = text[brace + 1:]
        yield (name[0] if name else "?"), body.lstrip().split(";", 1)[0].strip()


def test_every_kernel_waits_first():
    seen, bad = 0, []
    for f, text in sources():
        for name, first in kernels(text):
            seen += 1
            if name != PROBE and first != "pdl_enter()":
                bad.append(f"{f.name}: {name} starts with '{first[:60]}'")
    assert seen >= 60, f"found only {seen} kernels: the scan is broken"
    assert not bad, "kernels that do not begin with pdl_enter():\n" + "\n".join(bad)


def test_no_launch_without_pdl():
    bad = []
    for f, text in sources():
        for m in re.finditer(r"(\w+)\s*<<<|cudaLaunchKernel\s*\(", text):
            if m.group(1) != PROBE:
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{f.name}:{line}: {m.group(0)}")
    assert not bad, "launches without PDL:\n" + "\n".join(bad)
