"""foxhunt: ctypes bindings of libfoxhunt (one training step of a branching double-DQN agent
with HER, spectral normalisation and auxiliary learners). See include/foxhunt.h."""
from ._abi import VERSION_MAJOR, VERSION_MINOR
from ._loader import ENV_VAR, library_path, load_library
from .errors import FoxhuntError, LibraryVersionError, Status
from .pipeline import CONFIG_FIELDS, Pipeline, memory_plan

__version__ = "%d.%d" % (VERSION_MAJOR, VERSION_MINOR)


def version():
    """(major, minor, patch) of the loaded library."""
    v = int(load_library().fh_version())
    return v // 10000, (v // 100) % 100, v % 100


def status_string(status):
    """The library's static text for a status code."""
    return load_library().fh_status_string(int(status)).decode()


def default_config():
    """SPEC §1 defaults as filled by fh_config_init(), as a dict of the header's field names
    (enum fields by name, as Pipeline.config gives them)."""
    import ctypes
    from . import _abi
    lib = load_library()
    cfg = _abi.new(_abi.fh_config)
    status = lib.fh_config_init(ctypes.byref(cfg))
    if status != 0:
        from .pipeline import _check
        _check(lib, status)
    from .pipeline import _config_dict
    return _config_dict(cfg)


__all__ = ["Pipeline", "FoxhuntError", "LibraryVersionError", "Status", "load_library",
           "library_path", "version", "status_string", "default_config", "CONFIG_FIELDS",
           "ENV_VAR", "memory_plan"]
