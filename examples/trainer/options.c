/* The trainer's command line (usage text: usage.txt, compiled in as usage.inc) and the
 * options file of a run. */
#define _POSIX_C_SOURCE 200809L

#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <foxhunt.h>

#include "common.h"

#ifndef FOXHUNT_DATA_DIR
#define FOXHUNT_DATA_DIR "examples/data"
#endif

static const char USAGE[] =
#include "usage.inc"
    ;

/* Where a value comes from when it is not the command line: "<path>:<line>: " while
 * options_load() reads a run's options.txt, so that a bad value there names its line. */
static char value_origin[4300] = "";

static long parse_long(const char *flag, const char *text, long min, long max)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < min || v > max)
        die("%s%s wants an integer in [%ld, %ld], got '%s'", value_origin, flag, min, max, text);
    return v;
}

static uint64_t parse_u64(const char *flag, const char *text)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end != '\0' || text[0] == '-')
        die("%s%s wants a non-negative integer, got '%s'", value_origin, flag, text);
    return (uint64_t)v;
}

static float parse_gamma(const char *flag, const char *text)
{
    char *end = NULL;
    double g = strtod(text, &end);
    if (end == text || *end != '\0' || !(g >= 0.0 && g <= 1.0))
        die("%s%s wants a number in [0, 1], got '%s'", value_origin, flag, text);
    return (float)g;
}

static int parse_backend(const char *flag, const char *text)
{
    /* Any case, as the Python binding takes them. */
    if (!strcasecmp(text, "cpu"))
        return FH_BACKEND_CPU;
    if (!strcasecmp(text, "cuda"))
        return FH_BACKEND_CUDA;
    if (!strcasecmp(text, "auto"))
        return FH_BACKEND_AUTO;
    die("%s%s wants cpu, cuda or auto, got '%s'", value_origin, flag, text);
}

static int parse_math(const char *flag, const char *text)
{
    static const int modes[] = {FH_MATH_TF32, FH_MATH_STRICT, FH_MATH_BF16};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; ++i)
        if (!strcasecmp(text, math_name(modes[i])))
            return modes[i];
    die("%s%s wants tf32, strict or bf16, got '%s'", value_origin, flag, text);
}

const char *math_name(int math)
{
    return math == FH_MATH_STRICT ? "strict" : math == FH_MATH_BF16 ? "bf16" : "tf32";
}

const char *backend_name(int backend)
{
    return backend == FH_BACKEND_CUDA ? "cuda" : backend == FH_BACKEND_CPU ? "cpu" : "auto";
}

static void print_version(void)
{
    uint32_t v = fh_version();
    printf("foxhunt-trainer %d.%d.%d (built against foxhunt.h %d.%d.%d), libfoxhunt %u.%u.%u "
           "loaded\n", FOXHUNT_VERSION_MAJOR, FOXHUNT_VERSION_MINOR, FOXHUNT_VERSION_PATCH,
           FOXHUNT_VERSION_MAJOR, FOXHUNT_VERSION_MINOR, FOXHUNT_VERSION_PATCH, v / 10000,
           v / 100 % 100, v % 100);
}

/* One training option and its value: returns 1 and sets it if `a` is one of them, else 0. */
static int training_option(options *o, const char *a, const char *v)
{
    if (!strcmp(a, "--steps"))
        o->steps = parse_long(a, v, 1, 100000000L);
    else if (!strcmp(a, "--batch"))
        o->batch = parse_long(a, v, 1, 1L << 24);
    else if (!strcmp(a, "--seeds"))
        o->seeds = (int)parse_long(a, v, 1, 1000);
    else if (!strcmp(a, "--seed"))
        o->seed = parse_u64(a, v);
    else if (!strcmp(a, "--eval-every"))
        o->eval_every = parse_long(a, v, 1, 100000000L);
    else if (!strcmp(a, "--patience"))
        o->patience = parse_long(a, v, 0, 100000000L);
    else if (!strcmp(a, "--gamma"))
        o->gamma = parse_gamma(a, v);
    else if (!strcmp(a, "--data"))
        o->data = v;
    else if (!strcmp(a, "--math"))
        o->math = parse_math(a, v);
    else
        return 0;
    return 1;
}

static int takes_value(const char *a)
{
    static const char *const names[] = {"--out", "--backend", "--steps", "--batch", "--seeds",
                                        "--seed", "--eval-every", "--patience", "--gamma",
                                        "--data", "--math"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (!strcmp(a, names[i]))
            return 1;
    return 0;
}

void parse_options(options *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->seeds = 5;
    o->patience = 10;
    o->gamma = 0.9f;
    o->backend = FH_BACKEND_AUTO;
    o->math = FH_MATH_TF32;
    o->data = FOXHUNT_DATA_DIR "/eustockmarkets.csv";
    o->out = "foxhunt-run";
    const char *first_training_option = NULL;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            exit(EXIT_SUCCESS);
        } else if (!strcmp(a, "--version")) {
            print_version();
            exit(EXIT_SUCCESS);
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--resume")) {
            o->resume = 1;
        } else if (!takes_value(a)) {
            die("unknown %s '%s' (see --help)", strncmp(a, "--", 2) ? "argument" : "option", a);
        } else if (i + 1 >= argc) {
            die("%s needs a value (see --help)", a);
        } else if (!strcmp(a, "--out")) {
            o->out = argv[++i];
        } else if (!strcmp(a, "--backend")) {
            o->backend = parse_backend(a, argv[++i]);
        } else {
            training_option(o, a, argv[++i]);
            if (!first_training_option)
                first_training_option = a;
        }
    }
    if (o->resume && first_training_option)
        die("--resume continues with the options in %s/options.txt; %s cannot change them",
            o->out, first_training_option);
}

void options_save(const options *o, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "steps %ld\nbatch %ld\neval-every %ld\npatience %ld\nseed %llu\nseeds %d\n"
               "gamma %.9g\nmath %s\nbackend %s\ndata %s\n",
            o->steps, o->batch, o->eval_every, o->patience, (unsigned long long)o->seed,
            o->seeds, (double)o->gamma, math_name(o->math), backend_name(o->backend), o->data);
    if (fclose(f) != 0)
        die("cannot write %s: %s", path, strerror(errno));
}

void options_load(options *o, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("--resume: cannot open %s: %s (is --out the directory of an earlier run?)", path,
            strerror(errno));
    char line[4200];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        ++lineno;
        line[strcspn(line, "\r\n")] = '\0';
        char *value = strchr(line, ' ');
        if (!value)
            die("%s:%d: expected 'key value'", path, lineno);
        *value++ = '\0';
        char flag[64];
        snprintf(flag, sizeof flag, "--%.48s", line);
        snprintf(value_origin, sizeof value_origin, "%s:%d: ", path, lineno);
        if (!strcmp(line, "backend")) {
            if (o->backend == FH_BACKEND_AUTO) /* --backend on the command line wins */
                o->backend = parse_backend(flag, value);
        } else if (!strcmp(line, "data")) {
            snprintf(o->data_buf, sizeof o->data_buf, "%s", value);
            o->data = o->data_buf;
        } else if (!training_option(o, flag, value)) {
            die("%s:%d: unknown key '%s'", path, lineno, line);
        }
    }
    value_origin[0] = '\0';
    fclose(f);
}
