// fh_memory_plan and fh_pipeline_create on fuzzed configs: raw field bytes (mostly refused by
// validation) or small dimensions, sometimes a replay, with fuzzed hyperparameters. Promises
// checked: the plan and creation agree on every refusal (same status, no handle); a created
// pipeline steps and then holds exactly the plan's bytes (CPU), its replay included.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Bytes in{data, size};
    fh_config c;
    fh_config_init(&c);
    const uint8_t mode = in.u8();
    if (mode & 1) {  // raw bytes over every field after struct_size
        uint8_t *raw = reinterpret_cast<uint8_t *>(&c) + sizeof c.struct_size;
        for (size_t i = 0; i < sizeof c - sizeof c.struct_size; ++i) raw[i] = in.u8();
        if (mode & 2) c.backend = FH_BACKEND_CPU;
    } else {  // small dimensions, fuzzed scalars
        c.backend = FH_BACKEND_CPU;
        c.batch_size = 1 + in.u8() % 32;
        c.num_branches = 1 + in.u8() % 5;
        c.actions_per_branch = 1 + in.u8() % 6;
        c.trunk_hidden = 1 + in.u8() % 24;
        c.branch_hidden = 1 + in.u8() % 12;
        c.iql_hidden = 1 + in.u8() % 12;
        c.iqn_hidden = 1 + in.u8() % 12;
        c.iqn_cos = 1 + in.u8() % 8;
        c.iqn_n = 1 + in.u8() % 4;
        c.iqn_n_target = 1 + in.u8() % 4;
        c.attn_token_dim = 1 + in.u8() % 4;
        c.obs_dim = c.attn_token_dim * (1 + in.u8() % 6);
        c.goal_dim = in.u8() % 4;
        c.attn_heads = 1 + in.u8() % 3;
        c.attn_d_model = c.attn_heads * (1 + in.u8() % 4);
        c.attn_head_hidden = 1 + in.u8() % 8;
        c.num_regimes = 1 + in.u8() % 4;
        c.sn_layers = in.u8() % 4;
        c.her_reward = in.u8() & 1;
        float *scalars[] = {&c.q_clip, &c.gamma, &c.huber_kappa, &c.her_ratio, &c.her_epsilon,
                            &c.iql_tau_hi, &c.iql_tau_lo, &c.awr_beta, &c.awr_max, &c.cql_alpha,
                            &c.regime_beta, &c.regime_min, &c.regime_max, &c.ema_tau, &c.lr_q,
                            &c.lr_aux, &c.adam_beta1, &c.adam_beta2, &c.adam_eps, &c.clip_norm};
        for (float *f : scalars)
            if (in.u8() < 32) *f = in.f32();
        c.seed = in.u32();
        if (in.u8() & 1) {
            c.replay_capacity = 1 + in.u8() % 8;
            c.replay_envs = 1 + in.u8() % 3;
        }
    }
    if (mode & 4) c.struct_size = in.u32();

    fh_memory_report plan;
    plan.struct_size = sizeof plan;
    const fh_status sp = fh_memory_plan(&c, &plan);
    FUZZ_ASSERT(sp == FH_OK || sp == FH_ERR_STRUCT_SIZE || sp == FH_ERR_BAD_DIMENSION ||
                    sp == FH_ERR_INDIVISIBLE || sp == FH_ERR_BAD_VALUE || sp == FH_ERR_NO_CUDA,
                "plan returned %s: %s", fh_status_string(sp), fh_last_error_message());
    if (sp == FH_OK && plan.total > (64u << 20)) return 0;  // too large to create per input
    fh_pipeline *p = reinterpret_cast<fh_pipeline *>(&c);
    const fh_status s = fh_pipeline_create(&c, &p);
    if (sp != FH_OK) {
        FUZZ_ASSERT(s == sp, "plan refused with %s, create returned %s: %s",
                    fh_status_string(sp), fh_status_string(s), fh_last_error_message());
        FUZZ_ASSERT(p == nullptr, "a refused create left a handle");
        return 0;
    }
    FUZZ_ASSERT(s == FH_OK, "plan accepted, create returned %s: %s", fh_status_string(s),
                fh_last_error_message());
    fuzz::feed_valid(p, c, in.u8());
    FUZZ_ASSERT(fh_pipeline_step(p) == FH_OK, "step: %s", fh_last_error_message());
    fh_memory_report r;
    r.struct_size = sizeof r;
    FUZZ_ASSERT(fh_pipeline_memory(p, &r) == FH_OK, "memory");
    FUZZ_ASSERT(memcmp(&r, &plan, sizeof r) == 0, "memory %llu differs from the plan %llu",
                (unsigned long long)r.total, (unsigned long long)plan.total);
    fh_pipeline_destroy(p);
    return 0;
}
