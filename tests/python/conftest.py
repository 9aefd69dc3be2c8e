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


def pytest_terminal_summary(terminalreporter, config):
    """The largest relative error reached per tensor family (lib vs oracle): one line on the
    terminal, the whole table in a file (FOXHUNT_ORACLE_REPORT, default
    build/oracle_errors.txt), or on the terminal with -v."""
    try:
        import lockstep
    except ImportError:
        return
    if not lockstep.MEASURED:
        return
    title = ("foxhunt (%s backend) vs oracle: largest relative error per tensor family"
             % lockstep.BACKEND)
    lines = ["%-16s %-24s %.2e" % (kind, fam, err)
             for (kind, fam), err in sorted(lockstep.MEASURED.items())]
    tr = terminalreporter
    if config.getoption("verbose") > 0:
        tr.section(title)
        for line in lines:
            tr.write_line(line)
        return
    path = os.environ.get("FOXHUNT_ORACLE_REPORT") or os.path.join(REPO, "build",
                                                                   "oracle_errors.txt")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(title + "\n" + "\n".join(lines) + "\n")
        where = "table of %d families in %s" % (len(lines), path)
    except OSError as e:
        where = "table not written: %s" % e
    (kind, fam), worst = max(lockstep.MEASURED.items(), key=lambda kv: kv[1])
    tr.write_line("%s backend vs oracle: largest relative error %.2e (%s %s); %s"
                  % (lockstep.BACKEND, worst, kind, fam, where))
