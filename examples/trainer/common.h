/* Shared by the trainer's files: failure handling and a clock. */
#ifndef FOXHUNT_TRAINER_COMMON_H
#define FOXHUNT_TRAINER_COMMON_H

#include <foxhunt.h>
#include <stddef.h>

/* A trainer has nothing to salvage after an error: these report on stderr and exit(1). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void check(fh_status status, const char *what);  /* dies with the library's message */
void *xcalloc(size_t n, size_t size);
double now_seconds(void);                         /* monotonic clock */

#endif
