"""pytest setup for the example tests: where the repository, the library and the built
examples are. Tests that need a missing piece skip, saying what to build."""
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
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


def png_description(path):
    """The JSON text of a PNG's "Description" chunk (what examples/plot.py stores there)."""
    import json
    import struct
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            if key == b"Description":
                return json.loads(text.decode("latin-1"))
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            if key == b"Description":
                compressed, rest = rest[0], rest[2:]
                rest = rest.split(b"\0", 2)[2]  # language tag, translated keyword
                return json.loads((zlib.decompress(rest) if compressed else rest).decode())
    raise AssertionError("%s has no Description chunk" % path)
