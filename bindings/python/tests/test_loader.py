"""How the binding finds libfoxhunt and checks its version."""
import ctypes
import os
import sys

import pytest

import foxhunt
from foxhunt import _loader


def test_env_var_is_the_only_candidate_when_set(monkeypatch):
    monkeypatch.setenv("FOXHUNT_LIBRARY", "/x/libfoxhunt.so")
    assert _loader.candidates() == [("env", "/x/libfoxhunt.so")]


def test_search_order_without_env(monkeypatch):
    monkeypatch.delenv("FOXHUNT_LIBRARY", raising=False)
    c = _loader.candidates()
    hows = [h for h, _ in c]
    assert hows == sorted(hows, key=["prefix", "loader"].index)
    paths = [p for h, p in c if h == "prefix"]
    assert paths[0] == os.path.join(sys.prefix, "lib", "libfoxhunt.so")
    assert os.path.join("/usr/local", "lib", "libfoxhunt.so") in paths
    assert c[-2:] == [("loader", "libfoxhunt.so"), ("loader", "libfoxhunt.so.0")]


def test_bad_explicit_path_is_oserror():
    with pytest.raises(OSError, match="FOXHUNT_LIBRARY"):
        foxhunt.load_library("/nonexistent/libfoxhunt.so")


class _FakeLib:
    def __init__(self, v):
        self.v = v

    def fh_version(self):
        return self.v


@pytest.mark.parametrize("v,ok", [(200, True), (205, True), (100, False), (300, False),
                                  (10200, False), (0, False)])
def test_version_check(v, ok):
    if ok:
        assert _loader.check_version(_FakeLib(v)) == (0, 2, v % 100)
    else:
        with pytest.raises(foxhunt.LibraryVersionError):
            _loader.check_version(_FakeLib(v))


def test_an_older_library_is_a_version_error(tmp_path):
    """A library of another version may lack this version's functions: the version is checked
    first. A stub with only fh_version, returning 0.1.0 (the 0.1 library had no
    fh_pipeline_train), stands for it; skipped without a C compiler."""
    import shutil
    import subprocess
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src, lib = tmp_path / "stub.c", tmp_path / "libstub.so"
    src.write_text("unsigned fh_version(void) { return 100; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(foxhunt.LibraryVersionError, match="libfoxhunt 0.1.0 is loaded"):
        foxhunt.load_library(str(lib))


def test_loaded_library_version(fh):
    assert fh.version()[:2] == (fh.VERSION_MAJOR, fh.VERSION_MINOR)
    assert os.path.exists(fh.library_path())
    lib = fh.load_library()
    assert isinstance(lib, ctypes.CDLL)
    assert lib.fh_last_error_message() is not None


def test_tests_export_the_library_as_a_full_path(monkeypatch, tmp_path):
    """The tests' locator (fh_library.py) turns a relative FOXHUNT_LIBRARY into the full path it
    exports, since the example tests run programs in other directories."""
    from fh_library import locate_library
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libfoxhunt.so").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOXHUNT_LIBRARY", os.path.join("lib", "libfoxhunt.so"))
    full = str(tmp_path / "lib" / "libfoxhunt.so")
    assert locate_library() == full
    assert os.environ["FOXHUNT_LIBRARY"] == full
    monkeypatch.setenv("FOXHUNT_LIBRARY", "missing/libfoxhunt.so")
    with pytest.raises(FileNotFoundError, match="missing/libfoxhunt.so: no such file"):
        locate_library()
