/* Shared by the trainer's files: failure handling and a deterministic RNG. */
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

/* ------------------------------------------------------------------------------------------ */
/* Deterministic RNG (splitmix64): replay sampling and env start days must not depend on libc. */

uint64_t rng_next(rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) by multiply-shift: no modulo bias worth mentioning for n << 2^32. */
uint32_t rng_below(rng *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

