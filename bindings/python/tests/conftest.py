"""pytest setup for the binding tests: import path, and where libfoxhunt.so is.

FOXHUNT_LIBRARY wins when set; otherwise the first of <repo>/build-py, <repo>/build that holds
libfoxhunt.so is used. Tests that need the library skip with a clear message without one."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.abspath(os.path.join(HERE, ".."))
REPO = os.path.abspath(os.path.join(PKG, "..", ".."))
for _p in (PKG, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from fh_testdata import SMALL  # noqa: E402


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
def fh():
    """The foxhunt module with its library loaded, or a skip."""
    if LIBRARY is None:
        pytest.skip("libfoxhunt.so not found: build it (cmake -S . -B build-py "
                    "-DFOXHUNT_CUDA=OFF && cmake --build build-py) or set FOXHUNT_LIBRARY")
    import foxhunt
    foxhunt.load_library()
    return foxhunt


@pytest.fixture
def pipe(fh):
    with fh.Pipeline(**SMALL) as p:
        yield p
