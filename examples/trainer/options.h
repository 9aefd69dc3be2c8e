/* The trainer's command line, and the options file that --resume reads back. */
#ifndef FOXHUNT_TRAINER_OPTIONS_H
#define FOXHUNT_TRAINER_OPTIONS_H

#include <stdint.h>

typedef struct options {
    long steps;        /* per seed; 0 = the backend's default */
    long batch;        /* 0 = the backend's default */
    long eval_every;   /* 0 = steps / 25 */
    long patience;     /* checks without improvement before a seed stops; 0 = never */
    uint64_t seed;     /* the first seed */
    int seeds;
    int backend;       /* fh_backend */
    int math;          /* fh_math_mode (the CUDA backend's GEMM operands) */
    float gamma;
    const char *data;
    const char *out;
    int quiet, resume;
    char data_buf[4096]; /* holds data when it was read back from an options file */
} options;

/* Parses argv; prints usage or the version and exits for --help and --version; dies on a bad
 * argument, naming it. With --resume the training options come from DIR/options.txt. */
void parse_options(options *o, int argc, char **argv);

/* DIR/options.txt: the options after the backend's defaults were applied, one "key value" a
 * line, so that a resumed run trains exactly as the interrupted one would have. */
void options_save(const options *o, const char *path);
void options_load(options *o, const char *path);

/* "cpu" or "cuda" (or "auto") */
const char *backend_name(int backend);

/* "tf32", "strict" or "bf16" */
const char *math_name(int math);

#endif
