// Errors inside the library are C++ exceptions of one type; api.cpp catches every exception at
// the C boundary and turns it into an fh_status plus the thread-local message.
#pragma once
#include <foxhunt.h>
#include <string>

namespace fh {

struct Error {
    fh_status status;
    std::string message;
};

// printf-style; throws fh::Error.
[[noreturn]] void fail(fh_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void set_last_error(fh_status status, const std::string &message);
void clear_last_error();

}  // namespace fh
