"""Status codes of the C ABI (``fh_status``) and the exception that carries them."""
import enum


class Status(enum.IntEnum):
    """Mirror of ``enum fh_status`` in foxhunt.h; the values are stable across versions."""

    OK = 0
    ERR_NULL_POINTER = 1
    ERR_STRUCT_SIZE = 2
    ERR_BAD_DIMENSION = 3
    ERR_INDIVISIBLE = 4
    ERR_BAD_VALUE = 5
    ERR_NON_FINITE = 6
    ERR_OUT_OF_RANGE = 7
    ERR_NO_BATCH = 8
    ERR_UNKNOWN_NAME = 9
    ERR_BUFFER_SIZE = 10
    ERR_IO = 11
    ERR_CHECKPOINT_TRUNCATED = 12
    ERR_CHECKPOINT_CORRUPT = 13
    ERR_CHECKPOINT_CONFIG = 14
    ERR_NO_CUDA = 15
    ERR_CUDA = 16
    ERR_OUT_OF_MEMORY = 17
    ERR_INTERNAL = 18
    ERR_UNSUPPORTED = 19

    @property
    def c_name(self):
        """The C enumerator, e.g. ``FH_ERR_NON_FINITE``."""
        return "FH_" + self.name


def status_name(status):
    """C name of a status code; unknown codes (from a newer library) read ``FH_STATUS_<n>``."""
    try:
        return Status(status).c_name
    except ValueError:
        return "FH_STATUS_%d" % status


class FoxhuntError(RuntimeError):
    """A foxhunt call returned a status other than FH_OK.

    Attributes: ``status`` (int, a :class:`Status` where known), ``name`` (``"FH_ERR_..."``)
    and ``message`` (the library's thread-local ``fh_last_error_message()``).
    """

    def __init__(self, status, name, message):
        super().__init__(status, name, message)
        try:
            self.status = Status(status)
        except ValueError:
            self.status = int(status)
        self.name = name
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.name, self.message) if self.message else self.name


class LibraryVersionError(ImportError):
    """The loaded libfoxhunt has a version these bindings were not written for."""
