"""Where the tests find libfoxhunt.so, shared by the binding tests and the oracle tests.

FOXHUNT_LIBRARY wins when set (a relative path is taken from the current directory; a path to no
file is an error, not a skip); otherwise the first of <repo>/build-py, <repo>/build that holds
libfoxhunt.so is used. Either way the full path is returned and exported as FOXHUNT_LIBRARY, for
the loader and for the programs the tests start in other directories."""
import os

import pytest

from fh_testdata import REPO


def locate_library():
    """The library's full path, or None where none is built. A FOXHUNT_LIBRARY that names no
    file raises FileNotFoundError: the tests that need the library would otherwise all skip,
    and a mistyped path would pass for a run without a library."""
    env = os.environ.get("FOXHUNT_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError("FOXHUNT_LIBRARY=%s: no such file (unset it to use "
                                    "<repo>/build-py or <repo>/build)" % env)
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
