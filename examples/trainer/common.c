/* Shared by the trainer's files: failure handling and a clock. */
#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* Failure handling: a trainer has nothing to salvage after an error, so it reports and exits. */

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("foxhunt-trainer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(EXIT_FAILURE);
}

void check(fh_status status, const char *what)
{
    if (status != FH_OK)
        die("%s failed: %s (%s)", what, fh_status_string(status), fh_last_error_message());
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
