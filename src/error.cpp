#include "error.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace fh {

static thread_local std::string t_last_error;

void fail(fh_status status, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw Error{status, buf};
}

void set_last_error(fh_status, const std::string &message) {
    // The status itself is the return value (fh_status_string names it); the message says
    // which argument, index and value were at fault.
    t_last_error = message;
}

void clear_last_error() { t_last_error.clear(); }

}  // namespace fh

extern "C" const char *fh_last_error_message(void) { return fh::t_last_error.c_str(); }

extern "C" const char *fh_status_string(fh_status status) {
    // Copied out as an int: a caller may pass any integer, and loading an out-of-range value
    // through the enum type is undefined behaviour (UBSan's -fsanitize=enum flags it).
    int s;
    memcpy(&s, &status, sizeof s);
    switch (s) {
    case FH_OK: return "FH_OK";
    case FH_ERR_NULL_POINTER: return "FH_ERR_NULL_POINTER";
    case FH_ERR_STRUCT_SIZE: return "FH_ERR_STRUCT_SIZE";
    case FH_ERR_BAD_DIMENSION: return "FH_ERR_BAD_DIMENSION";
    case FH_ERR_INDIVISIBLE: return "FH_ERR_INDIVISIBLE";
    case FH_ERR_BAD_VALUE: return "FH_ERR_BAD_VALUE";
    case FH_ERR_NON_FINITE: return "FH_ERR_NON_FINITE";
    case FH_ERR_OUT_OF_RANGE: return "FH_ERR_OUT_OF_RANGE";
    case FH_ERR_NO_BATCH: return "FH_ERR_NO_BATCH";
    case FH_ERR_UNKNOWN_NAME: return "FH_ERR_UNKNOWN_NAME";
    case FH_ERR_BUFFER_SIZE: return "FH_ERR_BUFFER_SIZE";
    case FH_ERR_IO: return "FH_ERR_IO";
    case FH_ERR_CHECKPOINT_TRUNCATED: return "FH_ERR_CHECKPOINT_TRUNCATED";
    case FH_ERR_CHECKPOINT_CORRUPT: return "FH_ERR_CHECKPOINT_CORRUPT";
    case FH_ERR_CHECKPOINT_CONFIG: return "FH_ERR_CHECKPOINT_CONFIG";
    case FH_ERR_NO_CUDA: return "FH_ERR_NO_CUDA";
    case FH_ERR_CUDA: return "FH_ERR_CUDA";
    case FH_ERR_OUT_OF_MEMORY: return "FH_ERR_OUT_OF_MEMORY";
    case FH_ERR_INTERNAL: return "FH_ERR_INTERNAL";
    case FH_ERR_UNSUPPORTED: return "FH_ERR_UNSUPPORTED";
    }
    return "FH_ERR_UNKNOWN_STATUS";
}
