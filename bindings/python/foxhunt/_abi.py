"""ctypes mirror of include/foxhunt.h: the structs (field for field, in order) and the
function prototypes. Nothing here has logic beyond declaring what the header declares."""
import ctypes
from ctypes import (POINTER, Structure, c_char_p, c_float, c_int32, c_size_t, c_uint8,
                    c_uint32, c_uint64, c_void_p)

#: The version these bindings were written for (FOXHUNT_VERSION_MAJOR / _MINOR).
VERSION_MAJOR = 0
VERSION_MINOR = 2

FH_MAX_REGIMES = 64
FH_SN_W1 = 1
FH_SN_W2 = 2
FH_SAVE_REPLAY = 1

# enum fh_backend, fh_exec_mode, fh_math_mode, fh_iql_gemm, fh_her_reward, fh_group
BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}
EXEC_MODES = {"multi_stream": 0, "single_stream": 1}
MATH_MODES = {"tf32": 0, "strict": 1, "bf16": 2}
IQL_GEMMS = {"auto": 0, "grouped": 1, "batched": 2, "sequential": 3}
HER_REWARDS = {"sparse": 0, "dense": 1}
MEMORY_KINDS = {"host": 0, "device": 1}
GROUPS = {0: "q", 1: "iql_hi", 2: "iql_lo", 3: "iqn", 4: "attn", 5: "q_target",
          6: "iqn_target", 7: "state", 8: "output"}
GROUP_OUTPUT = 8
GROUP_STATE = 7


class fh_config(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("backend", c_int32),
        ("device", c_int32),
        ("exec_mode", c_int32),
        ("math_mode", c_int32),
        ("iql_gemm", c_int32),
        ("workspace_mib", c_uint32),
        ("batch_size", c_uint32),
        ("obs_dim", c_uint32),
        ("goal_dim", c_uint32),
        ("num_branches", c_uint32),
        ("actions_per_branch", c_uint32),
        ("trunk_hidden", c_uint32),
        ("branch_hidden", c_uint32),
        ("q_clip", c_float),
        ("gamma", c_float),
        ("huber_kappa", c_float),
        ("her_ratio", c_float),
        ("her_epsilon", c_float),
        ("her_reward", c_int32),
        ("her_terminal_on_success", c_int32),
        ("sn_layers", c_uint32),
        ("iql_hidden", c_uint32),
        ("iql_tau_hi", c_float),
        ("iql_tau_lo", c_float),
        ("awr_beta", c_float),
        ("awr_max", c_float),
        ("iqn_hidden", c_uint32),
        ("iqn_cos", c_uint32),
        ("iqn_n", c_uint32),
        ("iqn_n_target", c_uint32),
        ("attn_token_dim", c_uint32),
        ("attn_d_model", c_uint32),
        ("attn_heads", c_uint32),
        ("attn_head_hidden", c_uint32),
        ("cql_alpha", c_float),
        ("num_regimes", c_uint32),
        ("regime_beta", c_float),
        ("regime_min", c_float),
        ("regime_max", c_float),
        ("ema_tau", c_float),
        ("lr_q", c_float),
        ("lr_aux", c_float),
        ("adam_beta1", c_float),
        ("adam_beta2", c_float),
        ("adam_eps", c_float),
        ("clip_norm", c_float),
        ("seed", c_uint64),
        ("replay_capacity", c_uint32),
        ("replay_envs", c_uint32),
        ("nccl_comm", c_void_p),
    ]


class fh_batch(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch_size", c_uint32),
        ("obs", POINTER(c_float)),
        ("goal", POINTER(c_float)),
        ("action", POINTER(c_int32)),
        ("reward", POINTER(c_float)),
        ("done", POINTER(c_uint8)),
        ("next_obs", POINTER(c_float)),
        ("next_achieved_goal", POINTER(c_float)),
        ("her_goal", POINTER(c_float)),
        ("regime", POINTER(c_int32)),
        ("memory", c_int32),
    ]


class fh_replay_rows(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_rows", c_uint32),
        ("num_envs", c_uint32),
        ("memory", c_int32),
        ("obs", POINTER(c_float)),
        ("goal", POINTER(c_float)),
        ("action", POINTER(c_int32)),
        ("reward", POINTER(c_float)),
        ("done", POINTER(c_uint8)),
        ("next_obs", POINTER(c_float)),
        ("next_achieved_goal", POINTER(c_float)),
        ("regime", POINTER(c_int32)),
        ("episode_end", POINTER(c_uint8)),
    ]


class fh_metrics(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("step", c_uint64),
        ("td_loss", c_float),
        ("q_mean", c_float),
        ("cql_loss", c_float),
        ("iql_loss_hi", c_float),
        ("iql_loss_lo", c_float),
        ("iqn_loss", c_float),
        ("attn_loss", c_float),
        ("conf_loss", c_float),
        ("grad_norm", c_float),
        ("sigma", c_float * 2),
        ("sigma_target", c_float * 2),
        ("ensemble_std", c_float),
        ("num_relabelled", c_uint32),
        ("num_regimes", c_uint32),
        ("regime_scale", c_float * FH_MAX_REGIMES),
        ("steps_skipped", c_uint64),
        ("last_step_skipped", c_uint32),
    ]


class fh_timings(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("her_ms", c_float),
        ("spectral_ms", c_float),
        ("ddqn_ms", c_float),
        ("forward_ms", c_float),
        ("aux_ms", c_float),
        ("adam_ms", c_float),
        ("total_ms", c_float),
        ("aux_ema_ms", c_float),
        ("aux_iql_ms", c_float),
        ("aux_iqn_ms", c_float),
        ("aux_attn_ms", c_float),
        ("aux_tail_ms", c_float),
        ("sample_ms", c_float),
    ]


class fh_tensor_info(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("rows", c_uint32),
        ("cols", c_uint32),
        ("group", c_int32),
        ("writable", c_int32),
    ]


class fh_memory_report(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("parameters", c_uint64),
        ("activations", c_uint64),
        ("workspaces", c_uint64),
        ("batch_staging", c_uint64),
        ("total", c_uint64),
        ("replay", c_uint64),
    ]


STRUCTS = (fh_config, fh_batch, fh_replay_rows, fh_metrics, fh_timings, fh_tensor_info,
           fh_memory_report)

_P = c_void_p  # fh_pipeline* (opaque)
_F = POINTER(c_float)

# name: (restype, argtypes)
PROTOTYPES = {
    "fh_status_string": (c_char_p, [c_int32]),
    "fh_last_error_message": (c_char_p, []),
    "fh_version": (c_uint32, []),
    "fh_config_init": (c_int32, [POINTER(fh_config)]),
    "fh_pipeline_create": (c_int32, [POINTER(fh_config), POINTER(c_void_p)]),
    "fh_pipeline_destroy": (None, [_P]),
    "fh_pipeline_backend": (c_int32, [_P, POINTER(c_int32)]),
    "fh_pipeline_config": (c_int32, [_P, POINTER(fh_config)]),
    "fh_pipeline_upload": (c_int32, [_P, POINTER(fh_batch)]),
    "fh_pipeline_step": (c_int32, [_P]),
    "fh_pipeline_train": (c_int32, [_P, c_uint32]),
    "fh_pipeline_insert": (c_int32, [_P, POINTER(fh_replay_rows)]),
    "fh_pipeline_sync": (c_int32, [_P]),
    "fh_pipeline_act": (c_int32, [_P, _F, _F, c_uint32, c_float, POINTER(c_int32), _F]),
    "fh_pipeline_metrics": (c_int32, [_P, POINTER(fh_metrics)]),
    "fh_pipeline_timings": (c_int32, [_P, POINTER(fh_timings)]),
    "fh_pipeline_num_tensors": (c_int32, [_P, POINTER(c_uint32)]),
    "fh_pipeline_tensor_info": (c_int32, [_P, c_uint32, POINTER(fh_tensor_info)]),
    "fh_pipeline_find_tensor": (c_int32, [_P, c_char_p, POINTER(fh_tensor_info)]),
    "fh_pipeline_read_tensor": (c_int32, [_P, c_char_p, _F, c_size_t]),
    "fh_pipeline_write_tensor": (c_int32, [_P, c_char_p, _F, c_size_t]),
    "fh_pipeline_save": (c_int32, [_P, c_char_p]),
    "fh_pipeline_save_ex": (c_int32, [_P, c_char_p, c_uint32]),
    "fh_pipeline_load": (c_int32, [_P, c_char_p]),
    "fh_pipeline_memory": (c_int32, [_P, POINTER(fh_memory_report)]),
    "fh_pipeline_dump_graph": (c_int32, [_P, c_char_p]),
    "fh_pipeline_check": (c_int32, [_P]),
    "fh_memory_plan": (c_int32, [POINTER(fh_config), POINTER(fh_memory_report)]),
}


def declare(lib):
    """Attach restype/argtypes to every function of @p lib (a ctypes.CDLL); returns lib."""
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def new(struct):
    """An instance of a versioned struct with struct_size set, the rest zero."""
    s = struct()
    s.struct_size = ctypes.sizeof(struct)
    return s
