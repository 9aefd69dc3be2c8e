/* Helpers shared by the tests: small configs, random valid batches, GPU detection. */
#ifndef FOXHUNT_TESTUTIL_H
#define FOXHUNT_TESTUTIL_H
#include <foxhunt.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A batch whose arrays the struct owns. */
typedef struct fh_test_batch {
    fh_batch batch;
    float *obs, *goal, *reward, *next_obs, *next_achieved_goal, *her_goal;
    int32_t *action, *regime;
    uint8_t *done;
} fh_test_batch;

/* SPEC §1 defaults shrunk to sizes a 2-core CPU steps in milliseconds; CPU backend. */
fh_config fh_test_small_config(void);

/* Fill a valid random batch for @p cfg from @p seed (normal-ish floats, random actions and
 * regimes, ~10% done, her_goal sometimes near next_achieved_goal so sparse HER rewards vary). */
void fh_test_batch_make(fh_test_batch *tb, const fh_config *cfg, uint64_t seed);
void fh_test_batch_free(fh_test_batch *tb);
/* Rows first .. first + c->batch_size - 1 of @p tb as a batch of config @p c (views into tb's
 * arrays): a rank's share of a bigger batch (SPEC §9). */
fh_batch fh_test_batch_rows(const fh_test_batch *tb, const fh_config *c, uint32_t first);

/* 1 if this build has CUDA and a device answers. */
int fh_test_have_cuda(void);

/* Exit status of a GPU test program: the failure count, or 77 (CTest's SKIP_RETURN_CODE) when
 * there is no GPU and every case was skipped, so CTest lists the test as skipped, not passed. */
#define FH_TEST_SKIPPED 77
int fh_test_gpu_exit(int failures);

/* A path for a scratch file named @p name under the test build folder (one of 8 static
 * buffers, reused in turn). */
const char *fh_test_tmp_path(const char *name);

/* Rewrite the checksum of a checkpoint file's @p n bytes at @p file (its last 8 bytes: FNV-1a of
 * the bytes before them, src/checkpoint.cpp), so that a test can forge a file that passes it. */
void fh_test_reseal(void *file, size_t n);

/* max_i |a_i - b_i| / max(1e-30, max_i |b_i|)-style relative error: ||a - b||_2 / ||b||_2. */
double fh_test_rel_err(const float *a, const float *b, size_t n);

#ifdef __cplusplus
}
#endif
#endif
