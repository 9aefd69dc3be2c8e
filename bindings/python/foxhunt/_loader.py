"""Finding, loading and version-checking libfoxhunt.so.

Search order: the environment variable FOXHUNT_LIBRARY (a full path; if set, nothing else is
tried), then the install prefixes (``<prefix>/lib`` and ``<prefix>/lib64`` for sys.prefix and
/usr/local), then the system loader (``ctypes.util.find_library('foxhunt')``, then plain
``libfoxhunt.so`` so that LD_LIBRARY_PATH and ld.so.cache apply).
"""
import ctypes
import ctypes.util
import os
import sys
import threading

from . import _abi
from .errors import LibraryVersionError

ENV_VAR = "FOXHUNT_LIBRARY"
_SONAMES = ("libfoxhunt.so", "libfoxhunt.so.0")

_lock = threading.Lock()
_lib = None
_lib_path = None


def candidates():
    """The paths/names that load_library() tries, in order, as (how, path-or-name)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return [("env", env)]
    out = []
    seen = set()
    for prefix in (sys.prefix, "/usr/local"):
        for libdir in ("lib", "lib64"):
            for so in _SONAMES:
                p = os.path.join(prefix, libdir, so)
                if p not in seen:
                    seen.add(p)
                    out.append(("prefix", p))
    found = ctypes.util.find_library("foxhunt")
    if found:
        out.append(("loader", found))
    for so in _SONAMES:
        out.append(("loader", so))
    return out


def check_version(lib):
    """Raise LibraryVersionError unless the library's major.minor is what we were written for
    (for 0.x releases the minor must match; from 1.0 on a newer minor is accepted)."""
    try:
        v = int(lib.fh_version())
    except AttributeError:
        raise LibraryVersionError("%r has no fh_version(): not libfoxhunt" % (lib,)) from None
    major, minor, patch = v // 10000, (v // 100) % 100, v % 100
    ok = major == _abi.VERSION_MAJOR and (
        minor == _abi.VERSION_MINOR if major == 0 else minor >= _abi.VERSION_MINOR)
    if not ok:
        raise LibraryVersionError(
            "libfoxhunt %d.%d.%d is loaded, but these bindings were written for %d.%d"
            % (major, minor, patch, _abi.VERSION_MAJOR, _abi.VERSION_MINOR))
    return major, minor, patch


def load_library(path=None):
    """Load (once) and return the ctypes handle of libfoxhunt. @p path overrides the search."""
    global _lib, _lib_path
    with _lock:
        if path is None and _lib is not None:
            return _lib
        tries = [("argument", os.fspath(path))] if path is not None else candidates()
        errors = []
        for how, p in tries:
            if how == "prefix" and not os.path.exists(p):
                continue
            try:
                lib = ctypes.CDLL(p)
            except OSError as e:
                errors.append("%s (%s): %s" % (p, how, e))
                if how in ("env", "argument"):
                    break
                continue
            # The version before the declarations: a library of another version may lack some
            # of this version's functions, which is a version mismatch, not an AttributeError.
            check_version(lib)
            _abi.declare(lib)
            if path is None:
                _lib, _lib_path = lib, p
            return lib
        raise OSError("libfoxhunt.so could not be loaded (not found, or not a loadable library); "
                      "set %s to its full path. Tried:\n  %s"
                      % (ENV_VAR, "\n  ".join(errors) or "(nothing)"))


def library_path():
    """Path or name the cached library was loaded from (None before the first load)."""
    return _lib_path
