"""pytest setup for the binding tests: import path, and where libfoxhunt.so is.

Finding the library is fh_library.py's (bindings/python/tests); tests that need it skip with a
clear message without one."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.abspath(os.path.join(HERE, ".."))
for _p in (PKG, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from fh_testdata import SMALL  # noqa: E402

from fh_library import load_foxhunt, locate_library  # noqa: E402

LIBRARY = locate_library()


@pytest.fixture(scope="session")
def fh():
    """The foxhunt module with its library loaded, or a skip."""
    return load_foxhunt(LIBRARY)


@pytest.fixture
def pipe(fh):
    with fh.Pipeline(**SMALL) as p:
        yield p
