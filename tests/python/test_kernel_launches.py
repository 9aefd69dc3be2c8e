"""The launch contract of cuda/launch.cuh, checked in the sources (no GPU needed).

Every kernel of cuda/ is launched with programmatic dependent launch (FH_LAUNCH or
launch_pdl), and so must begin with pdl_enter(): a kernel that touched global memory before
waiting for its predecessor would race with it, and nothing at run time would say so (the
results would differ only now and then). So: every __global__ function's first statement is
pdl_enter(), and no kernel is launched with <<<...>>> or cudaLaunchKernel (without PDL its
dependents' edges would be plain ones; harmless, but the rule would no longer be one rule),
except the one-thread capability probe of cuda/wgmma.cuh, launched by common.cpp's run_probe
outside any graph at creation.
"""
import pathlib
import re

CUDA = pathlib.Path(__file__).resolve().parents[2] / "cuda"
PROBE = "wgmma_probe_kernel"


def sources():
    files = sorted(f for ext in ("cu", "cuh", "hpp", "cpp") for f in CUDA.glob("*." + ext))
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


def launched_kernel(text, at):
    """The kernel expression before the <<< at @p at, template arguments included."""
    j, depth = at, 0
    while j > 0 and text[j - 1].isspace():
        j -= 1
    end = j
    while j > 0:
        c = text[j - 1]
        if c == ">":
            depth += 1
        elif c == "<":
            depth -= 1
        elif depth == 0 and not (c.isalnum() or c in "_:"):
            break
        j -= 1
    return " ".join(text[j:end].split())


def in_run_probe(f, text, at):
    """Whether the launch at @p at is inside common.cpp's run_probe (the probe's one launch)."""
    start = text.rfind("int run_probe(const void *probe) {", 0, at)
    return f.name == "common.cpp" and start != -1 and "\n}\n" not in text[start:at]


def test_no_launch_without_pdl():
    bad = []
    for f, text in sources():
        for m in re.finditer(r"<<<|\bcudaLaunchKernel\s*\(", text):
            kernel = launched_kernel(text, m.start()) if m.group(0) == "<<<" else ""
            if not in_run_probe(f, text, m.start()):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{f.name}:{line}: {kernel or m.group(0)}")
    assert not bad, "launches without PDL:\n" + "\n".join(bad)
