//! Raw mirror of `include/foxhunt.h`: `#[repr(C)]` structs field for field, and the function
//! pointer types. Nothing here is safe to use directly; see the crate root for the safe API.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_void};

pub const FOXHUNT_VERSION_MAJOR: u32 = 0;
pub const FOXHUNT_VERSION_MINOR: u32 = 2;
pub const FH_MAX_REGIMES: usize = 64;
pub const FH_SN_W1: u32 = 1;
pub const FH_SN_W2: u32 = 2;
/// `enum fh_backend`
pub const FH_BACKEND_AUTO: i32 = 0;
pub const FH_BACKEND_CPU: i32 = 1;
pub const FH_BACKEND_CUDA: i32 = 2;
pub const FH_SAVE_REPLAY: u32 = 1;
pub const FH_MEMORY_HOST: i32 = 0;
pub const FH_MEMORY_DEVICE: i32 = 1;

pub type fh_status = i32;
/// Opaque `fh_pipeline`.
pub type fh_pipeline = c_void;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct fh_config {
    pub struct_size: usize,
    pub backend: i32,
    pub device: i32,
    pub exec_mode: i32,
    pub math_mode: i32,
    pub iql_gemm: i32,
    pub workspace_mib: u32,
    pub batch_size: u32,
    pub obs_dim: u32,
    pub goal_dim: u32,
    pub num_branches: u32,
    pub actions_per_branch: u32,
    pub trunk_hidden: u32,
    pub branch_hidden: u32,
    pub q_clip: f32,
    pub gamma: f32,
    pub huber_kappa: f32,
    pub her_ratio: f32,
    pub her_epsilon: f32,
    pub her_reward: i32,
    pub her_terminal_on_success: i32,
    pub sn_layers: u32,
    pub iql_hidden: u32,
    pub iql_tau_hi: f32,
    pub iql_tau_lo: f32,
    pub awr_beta: f32,
    pub awr_max: f32,
    pub iqn_hidden: u32,
    pub iqn_cos: u32,
    pub iqn_n: u32,
    pub iqn_n_target: u32,
    pub attn_token_dim: u32,
    pub attn_d_model: u32,
    pub attn_heads: u32,
    pub attn_head_hidden: u32,
    pub cql_alpha: f32,
    pub num_regimes: u32,
    pub regime_beta: f32,
    pub regime_min: f32,
    pub regime_max: f32,
    pub ema_tau: f32,
    pub lr_q: f32,
    pub lr_aux: f32,
    pub adam_beta1: f32,
    pub adam_beta2: f32,
    pub adam_eps: f32,
    pub clip_norm: f32,
    pub seed: u64,
    pub replay_capacity: u32,
    pub replay_envs: u32,
    /// `ncclComm_t` of a data-parallel pipeline (SPEC §9), or null.
    pub nccl_comm: *mut c_void,
}

// The communicator pointer is the caller's and opaque here: moving or sharing a config copies
// the pointer's value and nothing reads through it. The library dereferences it when a pipeline
// is created (and in every step's all-reduce after that) or planned, which only the unsafe
// Pipeline::with_communicator and Library::memory_plan_with_communicator let a config with one
// reach; the safe constructors refuse it.
unsafe impl Send for fh_config {}
unsafe impl Sync for fh_config {}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fh_batch {
    pub struct_size: usize,
    pub batch_size: u32,
    pub obs: *const f32,
    pub goal: *const f32,
    pub action: *const i32,
    pub reward: *const f32,
    pub done: *const u8,
    pub next_obs: *const f32,
    pub next_achieved_goal: *const f32,
    pub her_goal: *const f32,
    pub regime: *const i32,
    pub memory: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fh_replay_rows {
    pub struct_size: usize,
    pub num_rows: u32,
    pub num_envs: u32,
    pub memory: i32,
    pub obs: *const f32,
    pub goal: *const f32,
    pub action: *const i32,
    pub reward: *const f32,
    pub done: *const u8,
    pub next_obs: *const f32,
    pub next_achieved_goal: *const f32,
    pub regime: *const i32,
    pub episode_end: *const u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fh_metrics {
    pub struct_size: usize,
    pub step: u64,
    pub td_loss: f32,
    pub q_mean: f32,
    pub cql_loss: f32,
    pub iql_loss_hi: f32,
    pub iql_loss_lo: f32,
    pub iqn_loss: f32,
    pub attn_loss: f32,
    pub conf_loss: f32,
    pub grad_norm: f32,
    pub sigma: [f32; 2],
    pub sigma_target: [f32; 2],
    pub ensemble_std: f32,
    pub num_relabelled: u32,
    pub num_regimes: u32,
    pub regime_scale: [f32; FH_MAX_REGIMES],
    pub steps_skipped: u64,
    pub last_step_skipped: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct fh_timings {
    pub struct_size: usize,
    pub her_ms: f32,
    pub spectral_ms: f32,
    pub ddqn_ms: f32,
    pub forward_ms: f32,
    pub aux_ms: f32,
    pub adam_ms: f32,
    pub total_ms: f32,
    pub aux_ema_ms: f32,
    pub aux_iql_ms: f32,
    pub aux_iqn_ms: f32,
    pub aux_attn_ms: f32,
    pub aux_tail_ms: f32,
    pub sample_ms: f32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fh_tensor_info {
    pub struct_size: usize,
    pub name: *const c_char,
    pub rows: u32,
    pub cols: u32,
    pub group: i32,
    pub writable: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct fh_memory_report {
    pub struct_size: usize,
    pub parameters: u64,
    pub activations: u64,
    pub workspaces: u64,
    pub batch_staging: u64,
    pub total: u64,
    pub replay: u64,
}

macro_rules! zeroed_with_size {
    ($($t:ty),*) => {$(
        impl $t {
            /// All fields zero (null pointers), `struct_size` set to `size_of::<Self>()`.
            pub fn zeroed() -> Self {
                // SAFETY: every field is an integer, float, array of those or a raw pointer,
                // for all of which all-zero bytes are a valid value.
                let mut s: Self = unsafe { std::mem::zeroed() };
                s.struct_size = std::mem::size_of::<Self>();
                s
            }
        }
    )*};
}
zeroed_with_size!(
    fh_config,
    fh_batch,
    fh_replay_rows,
    fh_metrics,
    fh_timings,
    fh_tensor_info,
    fh_memory_report
);

pub type FnStatusString = unsafe extern "C" fn(fh_status) -> *const c_char;
pub type FnLastError = unsafe extern "C" fn() -> *const c_char;
pub type FnVersion = unsafe extern "C" fn() -> u32;
pub type FnConfigInit = unsafe extern "C" fn(*mut fh_config) -> fh_status;
pub type FnCreate = unsafe extern "C" fn(*const fh_config, *mut *mut fh_pipeline) -> fh_status;
pub type FnDestroy = unsafe extern "C" fn(*mut fh_pipeline);
pub type FnBackend = unsafe extern "C" fn(*const fh_pipeline, *mut i32) -> fh_status;
pub type FnConfig = unsafe extern "C" fn(*const fh_pipeline, *mut fh_config) -> fh_status;
pub type FnUpload = unsafe extern "C" fn(*mut fh_pipeline, *const fh_batch) -> fh_status;
pub type FnStep = unsafe extern "C" fn(*mut fh_pipeline) -> fh_status;
pub type FnTrain = unsafe extern "C" fn(*mut fh_pipeline, u32) -> fh_status;
pub type FnInsert = unsafe extern "C" fn(*mut fh_pipeline, *const fh_replay_rows) -> fh_status;
pub type FnSaveEx = unsafe extern "C" fn(*mut fh_pipeline, *const c_char, u32) -> fh_status;
pub type FnAct = unsafe extern "C" fn(
    *mut fh_pipeline,
    *const f32,
    *const f32,
    u32,
    f32,
    *mut i32,
    *mut f32,
) -> fh_status;
pub type FnMetrics = unsafe extern "C" fn(*mut fh_pipeline, *mut fh_metrics) -> fh_status;
pub type FnTimings = unsafe extern "C" fn(*mut fh_pipeline, *mut fh_timings) -> fh_status;
pub type FnNumTensors = unsafe extern "C" fn(*const fh_pipeline, *mut u32) -> fh_status;
pub type FnTensorInfo =
    unsafe extern "C" fn(*const fh_pipeline, u32, *mut fh_tensor_info) -> fh_status;
pub type FnFindTensor =
    unsafe extern "C" fn(*const fh_pipeline, *const c_char, *mut fh_tensor_info) -> fh_status;
pub type FnReadTensor =
    unsafe extern "C" fn(*mut fh_pipeline, *const c_char, *mut f32, usize) -> fh_status;
pub type FnWriteTensor =
    unsafe extern "C" fn(*mut fh_pipeline, *const c_char, *const f32, usize) -> fh_status;
pub type FnPath = unsafe extern "C" fn(*mut fh_pipeline, *const c_char) -> fh_status;
pub type FnMemory = unsafe extern "C" fn(*const fh_pipeline, *mut fh_memory_report) -> fh_status;
pub type FnCheck = unsafe extern "C" fn(*mut fh_pipeline) -> fh_status;
pub type FnMemoryPlan = unsafe extern "C" fn(*const fh_config, *mut fh_memory_report) -> fh_status;

/// Every entry point of the C API, resolved once from the loaded library.
#[derive(Clone, Copy)]
pub struct Api {
    pub status_string: FnStatusString,
    pub last_error_message: FnLastError,
    pub version: FnVersion,
    pub config_init: FnConfigInit,
    pub pipeline_create: FnCreate,
    pub pipeline_destroy: FnDestroy,
    pub pipeline_backend: FnBackend,
    pub pipeline_config: FnConfig,
    pub pipeline_upload: FnUpload,
    pub pipeline_step: FnStep,
    pub pipeline_train: FnTrain,
    pub pipeline_insert: FnInsert,
    pub pipeline_sync: FnStep,
    pub pipeline_act: FnAct,
    pub pipeline_metrics: FnMetrics,
    pub pipeline_timings: FnTimings,
    pub pipeline_num_tensors: FnNumTensors,
    pub pipeline_tensor_info: FnTensorInfo,
    pub pipeline_find_tensor: FnFindTensor,
    pub pipeline_read_tensor: FnReadTensor,
    pub pipeline_write_tensor: FnWriteTensor,
    pub pipeline_save: FnPath,
    pub pipeline_save_ex: FnSaveEx,
    pub pipeline_load: FnPath,
    pub pipeline_memory: FnMemory,
    pub pipeline_dump_graph: FnPath,
    pub pipeline_check: FnCheck,
    pub memory_plan: FnMemoryPlan,
}

impl Api {
    /// Resolve every symbol.
    ///
    /// # Safety
    /// The library must be libfoxhunt (the symbols must have the header's signatures), and
    /// the returned pointers must not outlive `lib`.
    pub unsafe fn resolve(lib: &libloading::Library) -> Result<Api, libloading::Error> {
        macro_rules! sym {
            ($name:literal) => {
                *lib.get(concat!($name, "\0").as_bytes())?
            };
        }
        Ok(Api {
            status_string: sym!("fh_status_string"),
            last_error_message: sym!("fh_last_error_message"),
            version: sym!("fh_version"),
            config_init: sym!("fh_config_init"),
            pipeline_create: sym!("fh_pipeline_create"),
            pipeline_destroy: sym!("fh_pipeline_destroy"),
            pipeline_backend: sym!("fh_pipeline_backend"),
            pipeline_config: sym!("fh_pipeline_config"),
            pipeline_upload: sym!("fh_pipeline_upload"),
            pipeline_step: sym!("fh_pipeline_step"),
            pipeline_train: sym!("fh_pipeline_train"),
            pipeline_insert: sym!("fh_pipeline_insert"),
            pipeline_sync: sym!("fh_pipeline_sync"),
            pipeline_act: sym!("fh_pipeline_act"),
            pipeline_metrics: sym!("fh_pipeline_metrics"),
            pipeline_timings: sym!("fh_pipeline_timings"),
            pipeline_num_tensors: sym!("fh_pipeline_num_tensors"),
            pipeline_tensor_info: sym!("fh_pipeline_tensor_info"),
            pipeline_find_tensor: sym!("fh_pipeline_find_tensor"),
            pipeline_read_tensor: sym!("fh_pipeline_read_tensor"),
            pipeline_write_tensor: sym!("fh_pipeline_write_tensor"),
            pipeline_save: sym!("fh_pipeline_save"),
            pipeline_save_ex: sym!("fh_pipeline_save_ex"),
            pipeline_load: sym!("fh_pipeline_load"),
            pipeline_memory: sym!("fh_pipeline_memory"),
            pipeline_dump_graph: sym!("fh_pipeline_dump_graph"),
            pipeline_check: sym!("fh_pipeline_check"),
            memory_plan: sym!("fh_memory_plan"),
        })
    }
}
