/* Shared by the trainer's files: failure handling and a deterministic RNG. */
#ifndef FOXHUNT_TRAINER_COMMON_H
#define FOXHUNT_TRAINER_COMMON_H

#include <foxhunt.h>
#include <stddef.h>
#include <stdint.h>

/* A trainer has nothing to salvage after an error: these report on stderr and exit(1). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void check(fh_status status, const char *what);  /* dies with the library's message */
void *xcalloc(size_t n, size_t size);
double now_seconds(void);                         /* monotonic clock */

/* splitmix64: replay sampling and env start days must not depend on libc. */
typedef struct rng {
    uint64_t state;
} rng;
uint64_t rng_next(rng *r);
uint32_t rng_below(rng *r, uint32_t n);           /* uniform in [0, n) */

#endif
