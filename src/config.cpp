#include "config.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>

#include "error.hpp"
#include "memory_plan.hpp"

namespace fh {

// Large enough for any real use, small enough that sizes fit comfortably in 32-bit indices.
static constexpr uint32_t kMaxBatch = 1u << 20;
static constexpr uint32_t kMaxWidth = 1u << 14;

static void check_dim(const char *name, uint32_t v, uint32_t lo, uint32_t hi) {
    if (v < lo || v > hi)
        fail(FH_ERR_BAD_DIMENSION, "config.%s = %u is outside [%u, %u]", name, v, lo, hi);
}

static void check_range(const char *name, float v, float lo, float hi, bool lo_open,
                        bool hi_open) {
    bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok)
        fail(FH_ERR_BAD_VALUE, "config.%s = %.9g is outside %c%.9g, %.9g%c", name, (double)v,
             lo_open ? '(' : '[', (double)lo, (double)hi, hi_open ? ')' : ']');
}

fh_config read_config(const fh_config &in) {
    constexpr size_t kSize01 = offsetof(fh_config, replay_capacity);
    if (in.struct_size != sizeof(fh_config) && in.struct_size != kSize01)
        fail(FH_ERR_STRUCT_SIZE, "config.struct_size = %zu, expected %zu (use fh_config_init)",
             in.struct_size, sizeof(fh_config));
    fh_config c{};
    memcpy(&c, &in, in.struct_size);
    c.struct_size = sizeof(fh_config);
    return c;
}

void validate_config(const fh_config &c) {
    if (c.backend < FH_BACKEND_AUTO || c.backend > FH_BACKEND_CUDA)
        fail(FH_ERR_BAD_VALUE, "config.backend = %d is not an fh_backend", c.backend);
    if (c.exec_mode < 0 || c.exec_mode > FH_EXEC_SINGLE_STREAM)
        fail(FH_ERR_BAD_VALUE, "config.exec_mode = %d is not an fh_exec_mode", c.exec_mode);
    if (c.math_mode < 0 || c.math_mode > FH_MATH_BF16)
        fail(FH_ERR_BAD_VALUE, "config.math_mode = %d is not an fh_math_mode", c.math_mode);
    if (c.iql_gemm < 0 || c.iql_gemm > FH_IQL_GEMM_SEQUENTIAL)
        fail(FH_ERR_BAD_VALUE, "config.iql_gemm = %d is not an fh_iql_gemm", c.iql_gemm);
    if (c.device < 0) fail(FH_ERR_BAD_VALUE, "config.device = %d is negative", c.device);
    check_dim("workspace_mib", c.workspace_mib, 1, 4096);

    check_dim("batch_size", c.batch_size, 1, kMaxBatch);
    check_dim("obs_dim", c.obs_dim, 1, kMaxWidth);
    check_dim("goal_dim", c.goal_dim, 0, kMaxWidth);
    check_dim("num_branches", c.num_branches, 1, 64);
    check_dim("actions_per_branch", c.actions_per_branch, 1, 1024);
    check_dim("trunk_hidden", c.trunk_hidden, 1, kMaxWidth);
    check_dim("branch_hidden", c.branch_hidden, 1, kMaxWidth);
    check_dim("iql_hidden", c.iql_hidden, 1, kMaxWidth);
    check_dim("iqn_hidden", c.iqn_hidden, 1, kMaxWidth);
    check_dim("iqn_cos", c.iqn_cos, 1, kMaxWidth);
    check_dim("iqn_n", c.iqn_n, 1, 256);
    check_dim("iqn_n_target", c.iqn_n_target, 1, 256);
    check_dim("attn_token_dim", c.attn_token_dim, 1, kMaxWidth);
    check_dim("attn_d_model", c.attn_d_model, 1, 4096);
    check_dim("attn_heads", c.attn_heads, 1, 256);
    check_dim("attn_head_hidden", c.attn_head_hidden, 1, kMaxWidth);
    check_dim("num_regimes", c.num_regimes, 1, FH_MAX_REGIMES);
    if (c.obs_dim % c.attn_token_dim != 0)
        fail(FH_ERR_INDIVISIBLE, "config.obs_dim = %u is not a multiple of attn_token_dim = %u",
             c.obs_dim, c.attn_token_dim);
    if (c.attn_d_model % c.attn_heads != 0)
        fail(FH_ERR_INDIVISIBLE, "config.attn_d_model = %u is not a multiple of attn_heads = %u",
             c.attn_d_model, c.attn_heads);
    uint64_t tokens = c.obs_dim / c.attn_token_dim + (c.goal_dim > 0);
    if (tokens > 1024)
        fail(FH_ERR_BAD_DIMENSION, "config: %llu attention tokens (obs_dim / attn_token_dim "
             "= %u / %u%s) exceed 1024", (unsigned long long)tokens, c.obs_dim, c.attn_token_dim,
             c.goal_dim > 0 ? ", plus one for the goal" : "");
    // SPEC §2.1: K·E <= 2^32, so that the sample index j = (w0·N·E) >> 32 of §5.0 reaches
    // every transition and its product fits 64 bits.
    if ((c.replay_capacity == 0) != (c.replay_envs == 0))
        fail(FH_ERR_BAD_DIMENSION, "config.replay_capacity = %u and config.replay_envs = %u: "
             "both are 0 (no replay) or neither is", c.replay_capacity, c.replay_envs);
    if ((uint64_t)c.replay_capacity * c.replay_envs > (1ull << 32))
        fail(FH_ERR_BAD_DIMENSION, "config.replay_capacity * replay_envs = %u * %u exceeds 2^32 "
             "(SPEC §2.1)", c.replay_capacity, c.replay_envs);
    if (c.sn_layers & ~(FH_SN_W1 | FH_SN_W2))
        fail(FH_ERR_BAD_VALUE, "config.sn_layers = 0x%x has bits other than FH_SN_W1|FH_SN_W2",
             c.sn_layers);

    check_range("q_clip", c.q_clip, 0, INFINITY, true, true);
    check_range("gamma", c.gamma, 0, 1, false, false);
    check_range("huber_kappa", c.huber_kappa, 0, INFINITY, true, true);
    check_range("her_ratio", c.her_ratio, 0, 1, false, false);
    check_range("her_epsilon", c.her_epsilon, 0, INFINITY, false, true);
    if (c.her_reward != FH_HER_REWARD_SPARSE && c.her_reward != FH_HER_REWARD_DENSE)
        fail(FH_ERR_BAD_VALUE, "config.her_reward = %d is not an fh_her_reward", c.her_reward);
    if (c.her_terminal_on_success != 0 && c.her_terminal_on_success != 1)
        fail(FH_ERR_BAD_VALUE, "config.her_terminal_on_success = %d is not 0 or 1",
             c.her_terminal_on_success);
    check_range("iql_tau_hi", c.iql_tau_hi, 0, 1, true, true);
    check_range("iql_tau_lo", c.iql_tau_lo, 0, 1, true, true);
    check_range("awr_beta", c.awr_beta, 0, INFINITY, false, true);
    check_range("awr_max", c.awr_max, 0, INFINITY, true, true);
    check_range("cql_alpha", c.cql_alpha, 0, INFINITY, false, true);
    check_range("regime_beta", c.regime_beta, 0, 1, false, true);
    check_range("regime_min", c.regime_min, 0, INFINITY, true, true);
    if (std::isfinite(c.regime_max) && !(c.regime_max > c.regime_min))
        fail(FH_ERR_BAD_VALUE, "config.regime_max = %.9g must be greater than config.regime_min = "
             "%.9g", (double)c.regime_max, (double)c.regime_min);
    check_range("regime_max", c.regime_max, c.regime_min, INFINITY, false, true);
    check_range("ema_tau", c.ema_tau, 0, 1, false, false);
    check_range("lr_q", c.lr_q, 0, INFINITY, false, true);
    check_range("lr_aux", c.lr_aux, 0, INFINITY, false, true);
    check_range("adam_beta1", c.adam_beta1, 0, 1, false, true);
    check_range("adam_beta2", c.adam_beta2, 0, 1, false, true);
    check_range("adam_eps", c.adam_eps, 0, INFINITY, true, true);
    check_range("clip_norm", c.clip_norm, 0, INFINITY, true, true);

    const char *what = nullptr;
    const uint64_t n = largest_array(make_dims(c), &what);
    if (n > (uint64_t)INT32_MAX)
        fail(FH_ERR_BAD_DIMENSION, "config: %s would hold %llu elements, more than 2^31 - 1 "
             "(each dimension is within its limit, their product is not)", what,
             (unsigned long long)n);
}

Dims make_dims(const fh_config &c, uint32_t rank, uint32_t world) {
    if ((uint64_t)world * c.batch_size > (1ull << 32))
        fail(FH_ERR_BAD_DIMENSION, "config.batch_size = %u on each of %u ranks: %llu rows "
             "exceed 2^32 (SPEC §9: a row's Philox counter r·B + i is 32 bits)", c.batch_size,
             world, (unsigned long long)world * c.batch_size);
    Dims d{};
    d.B = c.batch_size;
    d.O = c.obs_dim;
    d.G = c.goal_dim;
    d.D = c.obs_dim + c.goal_dim;
    d.NB = c.num_branches;
    d.A = c.actions_per_branch;
    d.H = c.trunk_hidden;
    d.HB = c.branch_hidden;
    d.Hi = c.iql_hidden;
    d.Hq = c.iqn_hidden;
    d.C = c.iqn_cos;
    d.N = c.iqn_n;
    d.Nt = c.iqn_n_target;
    d.td = c.attn_token_dim;
    d.To = c.obs_dim / c.attn_token_dim;
    d.T = d.To + (c.goal_dim > 0 ? 1 : 0);
    d.d = c.attn_d_model;
    d.heads = c.attn_heads;
    d.dh = c.attn_d_model / c.attn_heads;
    d.hh = c.attn_head_hidden;
    d.R = c.num_regimes;
    d.sn1 = (c.sn_layers & FH_SN_W1) != 0;
    d.sn2 = (c.sn_layers & FH_SN_W2) != 0;
    d.K = c.replay_capacity;
    d.E = c.replay_envs;
    d.world = world;
    d.rank = rank;
    d.row0 = rank * c.batch_size;
    d.Bg = (uint64_t)world * c.batch_size;
    return d;
}

}  // namespace fh

extern "C" fh_status fh_config_init(fh_config *c) {
    if (!c) {
        fh::set_last_error(FH_ERR_NULL_POINTER, "argument 'config' is NULL");
        return FH_ERR_NULL_POINTER;
    }
    *c = fh_config{};
    c->struct_size = sizeof(fh_config);
    c->backend = FH_BACKEND_AUTO;
    c->device = 0;
    c->exec_mode = FH_EXEC_MULTI_STREAM;
    c->math_mode = FH_MATH_TF32;
    c->iql_gemm = FH_IQL_GEMM_AUTO;
    c->workspace_mib = 32;
    c->batch_size = 16384;
    c->obs_dim = 124;
    c->goal_dim = 4;
    c->num_branches = 4;
    c->actions_per_branch = 8;
    c->trunk_hidden = 256;
    c->branch_hidden = 128;
    c->q_clip = 100.0f;
    c->gamma = 0.99f;
    c->huber_kappa = 1.0f;
    c->her_ratio = 0.8f;
    c->her_epsilon = 0.05f;
    c->her_reward = FH_HER_REWARD_SPARSE;
    c->her_terminal_on_success = 1;
    c->sn_layers = FH_SN_W2;
    c->iql_hidden = 128;
    c->iql_tau_hi = 0.9f;
    c->iql_tau_lo = 0.1f;
    c->awr_beta = 3.0f;
    c->awr_max = 100.0f;
    c->iqn_hidden = 128;
    c->iqn_cos = 64;
    c->iqn_n = 8;
    c->iqn_n_target = 8;
    c->attn_token_dim = 4;
    c->attn_d_model = 64;
    c->attn_heads = 4;
    c->attn_head_hidden = 64;
    c->cql_alpha = 0.1f;
    c->num_regimes = 4;
    c->regime_beta = 0.99f;
    c->regime_min = 0.25f;
    c->regime_max = 4.0f;
    c->ema_tau = 0.005f;
    c->lr_q = 3e-4f;
    c->lr_aux = 3e-4f;
    c->adam_beta1 = 0.9f;
    c->adam_beta2 = 0.999f;
    c->adam_eps = 1e-8f;
    c->clip_norm = 10.0f;
    c->seed = 0;
    fh::clear_last_error();
    return FH_OK;
}
