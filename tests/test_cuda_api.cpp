/* The CUDA backend through the C API: act (against the CPU's, more rows than one act chunk,
 * greedy and ε-greedy, no state change), tensor writes, timings, the memory report (and what
 * multi-stream costs over single-stream), graph dumps (the call and FOXHUNT_DUMP_GRAPH),
 * backend selection and a bad device, refused batches.
 * Skipped without a CUDA device. */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "test_cuda_util.h"

using namespace fhtest;

namespace {

const char *kChild[6] = {"her", "spectral", "ddqn", "forward", "aux", "adam"};

void test_act_matches_cpu(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config cc = fh_test_small_config();
    cc.sn_layers = FH_SN_W1 | FH_SN_W2;
    Batches bt(cc, 900, 3);
    fh_pipeline *g = make(cuda_config(cc, FH_MATH_STRICT));
    for (int k = 0; k < 3; ++k) step(g, bt.b[(size_t)k]);
    const std::string path = fh_test_tmp_path("cuda_act.ckpt");
    assert_int_equal(fh_pipeline_save(g, path.c_str()), FH_OK);
    fh_pipeline *c = make(cc);
    assert_int_equal(fh_pipeline_load(c, path.c_str()), FH_OK);

    const uint32_t n = 5000;  /* more than one act chunk (4096 rows) */
    const size_t O = cc.obs_dim, G = cc.goal_dim, NB = cc.num_branches, A = cc.actions_per_branch;
    std::vector<float> obs(n * O), goal(n * G);
    uint64_t s = 12345;
    for (float &x : obs) x = (float)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.0f * 4 - 2;
    for (float &x : goal) x = (float)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.0f * 4 - 2;
    std::vector<float> u0 = read(g, "sn.u.W2", cc.trunk_hidden);
    for (float eps : {0.0f, 0.3f}) {
        std::vector<int32_t> ag(n * NB), ac(n * NB);
        std::vector<float> qg(n * NB * A), qc(n * NB * A);
        assert_int_equal(fh_pipeline_act(g, obs.data(), goal.data(), n, eps, ag.data(), qg.data()), FH_OK);
        assert_int_equal(fh_pipeline_act(c, obs.data(), goal.data(), n, eps, ac.data(), qc.data()), FH_OK);
        size_t same = 0;
        for (size_t i = 0; i < ag.size(); ++i) same += ag[i] == ac[i];
        const double e = fh_test_rel_err(qg.data(), qc.data(), qg.size());
        printf("[ACT] eps=%.1f: %zu/%zu actions equal to the CPU's, q rel. error %.3e\n", eps,
               same, ag.size(), e);
        assert_true(e <= 1e-5);
        assert_true(same >= ag.size() - ag.size() / 1000);
        /* Without q_values too. */
        assert_int_equal(fh_pipeline_act(g, obs.data(), goal.data(), 7, eps, ag.data(), NULL), FH_OK);
        assert_int_equal(fh_pipeline_act(c, obs.data(), goal.data(), 7, eps, ac.data(), NULL), FH_OK);
    }
    /* Acting changes no training state. */
    std::vector<float> u1 = read(g, "sn.u.W2", cc.trunk_hidden);
    assert_memory_equal(u0.data(), u1.data(), u0.size() * 4);
    fh_pipeline_destroy(g);
    fh_pipeline_destroy(c);
}

void test_write_timings_memory_dump(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config cc = default_config(16384);
    fh_pipeline *g = make(cuda_config(cc, FH_MATH_TF32));
    int32_t backend = 0;
    fh_pipeline_backend(g, &backend);
    assert_int_equal(backend, FH_BACKEND_CUDA);

    /* write then read back */
    std::vector<float> w = read(g, "q.b1", cc.trunk_hidden);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.001f * (float)i;
    assert_int_equal(fh_pipeline_write_tensor(g, "q.b1", w.data(), w.size()), FH_OK);
    std::vector<float> w2 = read(g, "q.b1", cc.trunk_hidden);
    assert_memory_equal(w.data(), w2.data(), w.size() * 4);

    Batches bt(cc, 3, 1);
    for (int k = 0; k < 3; ++k) step(g, bt.b[0]);
    fh_timings t;
    t.struct_size = sizeof t;
    assert_int_equal(fh_pipeline_timings(g, &t), FH_OK);
    const float child[6] = {t.her_ms, t.spectral_ms, t.ddqn_ms, t.forward_ms, t.aux_ms, t.adam_ms};
    for (int k = 0; k < 6; ++k) assert_true(child[k] > 0);
    // Multi-stream, the her and spectral children run side by side (schedule.cpp): together
    // they take at least the longer one.
    const float sum = fmaxf(t.her_ms, t.spectral_ms) + t.ddqn_ms + t.forward_ms + t.aux_ms +
                      t.adam_ms;
    printf("[TIMINGS] B=16384 tf32: her %.3f spectral %.3f ddqn %.3f forward %.3f aux %.3f "
           "(ema %.3f iql %.3f iqn %.3f attn %.3f tail %.3f) adam %.3f total %.3f ms\n",
           t.her_ms, t.spectral_ms, t.ddqn_ms, t.forward_ms, t.aux_ms, t.aux_ema_ms, t.aux_iql_ms,
           t.aux_iqn_ms, t.aux_attn_ms, t.aux_tail_ms, t.adam_ms, t.total_ms);
    assert_true(t.total_ms >= 0.99f * sum);
    assert_true(t.aux_tail_ms > 0 && t.aux_ema_ms > 0);

    fh_memory_report r;
    r.struct_size = sizeof r;
    assert_int_equal(fh_pipeline_memory(g, &r), FH_OK);
    printf("[MEMORY] B=16384 multi-stream: parameters %.2f MiB, activations %.2f MiB, "
           "workspaces %.2f MiB, batch staging %.2f MiB, total %.2f MiB\n",
           r.parameters / 1048576.0, r.activations / 1048576.0, r.workspaces / 1048576.0,
           r.batch_staging / 1048576.0, r.total / 1048576.0);
    assert_true(r.parameters > 0 && r.activations > 0 && r.workspaces > 0 && r.batch_staging > 0);
    assert_int_equal(r.total, r.parameters + r.activations + r.workspaces + r.batch_staging);
    if (fh_cuda_debug_child_nodes) {
        printf("[GRAPH] nodes per child:");
        for (int k = 0; k < 6; ++k) printf(" %s %ld", kChild[k], fh_cuda_debug_child_nodes(k));
        printf("\n");
    }

    const std::string dot = fh_test_tmp_path("cuda_graph.dot");
    remove(dot.c_str());
    assert_int_equal(fh_pipeline_dump_graph(g, dot.c_str()), FH_OK);
    FILE *f = fopen(dot.c_str(), "r");
    assert_non_null(f);
    char head[64] = {0};
    size_t got = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    assert_true(got > 0 && strstr(head, "digraph") != NULL);
    assert_int_equal(fh_pipeline_dump_graph(g, "/nonexistent-dir/x.dot"), FH_ERR_IO);
    fh_pipeline_destroy(g);

    /* FOXHUNT_DUMP_GRAPH at creation, single-stream this time. */
    const std::string dot2 = fh_test_tmp_path("cuda_graph_env.dot");
    remove(dot2.c_str());
    setenv("FOXHUNT_DUMP_GRAPH", dot2.c_str(), 1);
    fh_config sc = cuda_config(fh_test_small_config(), FH_MATH_TF32, FH_EXEC_SINGLE_STREAM);
    fh_pipeline *s = make(sc);
    unsetenv("FOXHUNT_DUMP_GRAPH");
    f = fopen(dot2.c_str(), "r");
    assert_non_null(f);
    fclose(f);
    fh_pipeline_destroy(s);
}

/* Lanes that never run at the same time share a cuBLAS workspace, and the lanes that run only
 * branch layers (3 and 4 at the defaults) get half a one (cuda/lanes.cpp). Default config:
 * multi-stream holds lanes {0, 1, act} 32 + lane 2 32 + lanes 3, 4 16 each = 96 MiB,
 * single-stream one 32 MiB buffer; everything else is the same in both modes. */
void test_memory_multi_vs_single(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config cc = default_config(16384);
    fh_memory_report r[2];
    const int modes[2] = {FH_EXEC_MULTI_STREAM, FH_EXEC_SINGLE_STREAM};
    for (int k = 0; k < 2; ++k) {
        fh_pipeline *p = make(cuda_config(cc, FH_MATH_TF32, modes[k]));
        r[k].struct_size = sizeof r[k];
        assert_int_equal(fh_pipeline_memory(p, &r[k]), FH_OK);
        fh_pipeline_destroy(p);
    }
    const uint64_t MiB = 1u << 20;
    printf("[MEMORY] B=16384: workspaces %.0f MiB multi-stream, %.0f MiB single-stream; "
           "total %.2f vs %.2f MiB (+%.2f MiB)\n",
           r[0].workspaces / 1048576.0, r[1].workspaces / 1048576.0, r[0].total / 1048576.0,
           r[1].total / 1048576.0, (r[0].total - r[1].total) / 1048576.0);
    assert_int_equal(r[0].workspaces, 96 * MiB);
    assert_int_equal(r[1].workspaces, 32 * MiB);
    assert_int_equal(r[0].parameters, r[1].parameters);
    assert_int_equal(r[0].activations, r[1].activations);
    assert_int_equal(r[0].batch_staging, r[1].batch_staging);
    assert_int_equal(r[0].total - r[1].total, 64 * MiB);
}

void test_backend_selection(void **) {
    if (!fh_test_have_cuda()) skip();
    fh_config c = fh_test_small_config();
    c.backend = FH_BACKEND_AUTO;
    fh_pipeline *p = make(c);
    int32_t backend = 0;
    fh_pipeline_backend(p, &backend);
    assert_int_equal(backend, FH_BACKEND_CUDA);
    fh_pipeline_destroy(p);
    c.backend = FH_BACKEND_CUDA;
    c.device = 99;
    fh_pipeline *q = NULL;
    assert_int_equal(fh_pipeline_create(&c, &q), FH_ERR_NO_CUDA);
    assert_null(q);
    /* Stepping before an upload is refused, as on the CPU. */
    c.device = 0;
    fh_pipeline *r = make(c);
    assert_int_equal(fh_pipeline_step(r), FH_ERR_NO_BATCH);
    fh_pipeline_destroy(r);
}

/* upload() checks and copies in one pass into the free pinned slot: a batch refused half-way
 * (after its obs were copied) leaves the GPU on the previous batch, and the slot's next user
 * overwrites all of it. */
void test_refused_batch_changes_nothing(void **) {
    if (!fh_test_have_cuda()) skip();
    const fh_config c = cuda_config(fh_test_small_config(), FH_MATH_STRICT);
    Batches bt(c, 300, 3);
    fh_test_batch &bad = bt.b[1];
    const size_t B = c.batch_size, O = c.obs_dim, NB = c.num_branches;
    fh_pipeline *p = make(c), *q = make(c);
    step(p, bt.b[0]);
    step(q, bt.b[0]);
    bad.next_obs[(B - 1) * O + 2] = NAN;
    assert_int_equal(fh_pipeline_upload(p, &bad.batch), FH_ERR_NON_FINITE);
    assert_non_null(strstr(fh_last_error_message(), "batch.next_obs["));
    bad.next_obs[(B - 1) * O + 2] = 0.5f;
    bad.action[(B - 1) * NB] = -3;
    assert_int_equal(fh_pipeline_upload(p, &bad.batch), FH_ERR_OUT_OF_RANGE);
    assert_int_equal(fh_pipeline_step(p), FH_OK);  /* on bt.b[0] again */
    assert_int_equal(fh_pipeline_step(q), FH_OK);
    Diff d = compare(p, q);
    assert_true(d.bitwise);
    /* The refusals above wrote into slot 1; the next good batch goes through slot 1, a refusal
     * into slot 0, and a good batch through slot 0: p still in step with q. */
    step(p, bt.b[2]);
    step(q, bt.b[2]);
    bad.batch.regime = nullptr;  /* all regime 0: valid; the action still is not */
    assert_int_equal(fh_pipeline_upload(p, &bad.batch), FH_ERR_OUT_OF_RANGE);
    step(p, bt.b[0]);
    step(q, bt.b[0]);
    d = compare(p, q);
    assert_true(d.bitwise);
    printf("[UPLOAD] refused batches left the previous one in place: bitwise equal after 4 steps\n");
    fh_pipeline_destroy(p);
    fh_pipeline_destroy(q);
}

}  // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_act_matches_cpu),
        cmocka_unit_test(test_write_timings_memory_dump),
        cmocka_unit_test(test_memory_multi_vs_single),
        cmocka_unit_test(test_backend_selection),
        cmocka_unit_test(test_refused_batch_changes_nothing),
    };
    return fh_test_gpu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
