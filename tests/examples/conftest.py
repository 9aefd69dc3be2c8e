"""pytest setup for the example tests: where the library and the built examples are. Tests that
need a missing piece skip, saying what to build. What the test modules import lives in
example_util.py: a module named conftest is ambiguous when pytest collects these tests together
with bindings/python/tests, which has its own."""
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from example_util import REPO  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "bindings", "python", "tests"))

from fh_library import locate_library  # noqa: E402

LIBRARY = locate_library()


@pytest.fixture(scope="session")
def library():
    """Full path of libfoxhunt.so (FOXHUNT_LIBRARY, else build/), or a skip."""
    if LIBRARY is None:
        pytest.skip("libfoxhunt.so not found: run scripts/setup.sh or set FOXHUNT_LIBRARY")
    return LIBRARY


@pytest.fixture(scope="session")
def build_dir(library):
    """The build directory that holds the library and the examples."""
    return os.path.dirname(library)


@pytest.fixture(scope="session")
def trainer(build_dir):
    path = os.path.join(build_dir, "examples", "foxhunt-trainer")
    if not os.access(path, os.X_OK):
        pytest.skip("%s not built" % path)
    return path


@pytest.fixture(scope="session")
def cargo():
    path = shutil.which("cargo")
    if path is None:
        pytest.skip("cargo not installed (scripts/setup.sh installs Debian's)")
    return path


@pytest.fixture(scope="session")
def python_with_matplotlib():
    """An interpreter that can run examples/plot.py, or a skip."""
    import subprocess
    for exe in ("/usr/bin/python3", sys.executable):
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import matplotlib"],
                                                  capture_output=True).returncode == 0:
            return exe
    pytest.skip("no python3 with matplotlib (apt-get install python3-matplotlib)")
