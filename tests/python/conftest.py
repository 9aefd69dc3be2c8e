"""pytest setup for the oracle tests: import paths, and where libfoxhunt.so is.

FOXHUNT_LIBRARY wins when set; otherwise the first of <repo>/build-py, <repo>/build that holds
libfoxhunt.so is used. Tests that need the library skip with a clear message without one."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
for p in (HERE, os.path.join(REPO, "bindings", "python")):
    if p not in sys.path:
        sys.path.insert(0, p)


def _locate_library():
    env = os.environ.get("FOXHUNT_LIBRARY")
    if env:
        return env if os.path.exists(env) else None
    for build in ("build-py", "build"):
        p = os.path.join(REPO, build, "libfoxhunt.so")
        if os.path.exists(p):
            os.environ["FOXHUNT_LIBRARY"] = p
            return p
    return None


LIBRARY = _locate_library()


@pytest.fixture(scope="session")
def foxhunt_lib():
    """The foxhunt module with its library loaded, or a skip."""
    if LIBRARY is None:
        pytest.skip("libfoxhunt.so not found: build it (cmake -S . -B build-py "
                    "-DFOXHUNT_CUDA=OFF && cmake --build build-py) or set FOXHUNT_LIBRARY")
    import foxhunt
    foxhunt.load_library()
    return foxhunt


def pytest_terminal_summary(terminalreporter):
    """Print the largest relative error reached per tensor family (lib vs oracle)."""
    try:
        import lockstep
    except ImportError:
        return
    if not lockstep.MEASURED:
        return
    tr = terminalreporter
    tr.section("foxhunt (%s backend) vs oracle: largest relative error per tensor family "
               % lockstep.BACKEND +
               "([xfail]: in tests marked xfail)")
    for (kind, fam), err in sorted(lockstep.MEASURED.items()):
        tr.write_line("%-16s %-24s %.2e" % (kind, fam, err))
