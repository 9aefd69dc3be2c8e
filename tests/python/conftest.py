"""pytest setup for the oracle tests: import paths, and where libfoxhunt.so is.

Finding the library is fh_library.py's (bindings/python/tests); tests that need it skip with a
clear message without one."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
for p in (HERE, os.path.join(REPO, "bindings", "python"),
          os.path.join(REPO, "bindings", "python", "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from fh_library import load_foxhunt, locate_library  # noqa: E402

LIBRARY = locate_library()


@pytest.fixture(scope="session")
def foxhunt_lib():
    """The foxhunt module with its library loaded, or a skip."""
    return load_foxhunt(LIBRARY)


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
               % lockstep.BACKEND)
    for (kind, fam), err in sorted(lockstep.MEASURED.items()):
        tr.write_line("%-16s %-24s %.2e" % (kind, fam, err))
