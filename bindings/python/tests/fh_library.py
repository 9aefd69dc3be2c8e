"""Where the tests find libfoxhunt.so, shared by the binding tests and the oracle tests.

FOXHUNT_LIBRARY wins when set (a relative path is taken from the current directory); otherwise
the first of <repo>/build-py, <repo>/build that holds libfoxhunt.so is used. Either way the full
path is returned and exported as FOXHUNT_LIBRARY, for the loader and for the programs the tests
start in other directories."""
import os

import pytest

from fh_testdata import REPO


def locate_library():
    env = os.environ.get("FOXHUNT_LIBRARY")
    if env:
        if not os.path.isfile(env):
            return None
        path = os.path.abspath(env)
        os.environ["FOXHUNT_LIBRARY"] = path
        return path
    for build in ("build-py", "build"):
        p = os.path.join(REPO, build, "libfoxhunt.so")
        if os.path.exists(p):
            os.environ["FOXHUNT_LIBRARY"] = p
            return p
    return None


def load_foxhunt(library):
    """The foxhunt module with its library loaded, or a pytest skip."""
    if library is None:
        pytest.skip("libfoxhunt.so not found: build it (cmake -S . -B build-py "
                    "-DFOXHUNT_CUDA=OFF && cmake --build build-py) or set FOXHUNT_LIBRARY")
    import foxhunt
    foxhunt.load_library()
    return foxhunt
