//! Safe Rust bindings of libfoxhunt, loaded at run time with `libloading`.
//!
//! ```no_run
//! let lib = foxhunt::Library::load()?;           // $FOXHUNT_LIBRARY, else libfoxhunt.so
//! let mut cfg = lib.default_config();             // SPEC §1 defaults (fh_config_init)
//! cfg.batch_size = 64;
//! let mut p = foxhunt::Pipeline::new(&lib, &cfg)?;
//! # let (obs, action, reward, done, next_obs) = (vec![], vec![], vec![], vec![], vec![]);
//! # let (goal, ag, her) = (vec![], vec![], vec![]);
//! p.upload(&foxhunt::Batch {
//!     obs: &obs, action: &action, reward: &reward, done: &done, next_obs: &next_obs,
//!     goal: Some(&goal), next_achieved_goal: Some(&ag), her_goal: Some(&her), regime: None,
//! })?;
//! p.step()?;
//! println!("td_loss {}", p.metrics()?.td_loss);
//! # Ok::<(), foxhunt::Error>(())
//! ```
//! Slices are checked against the config before every call; values (finite floats, ranges)
//! are checked by the library, whose refusals come back as [`Error::Foxhunt`] with the status
//! and the library's message.

pub mod error;
pub mod ffi;

use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

pub use error::{Error, Result, Status};
/// The pipeline configuration: `fh_config`, field for field (start from
/// [`Library::default_config`]).
pub type Config = ffi::fh_config;
/// Milliseconds per child graph and aux learner of the last step (`fh_timings`).
pub type Timings = ffi::fh_timings;
/// Bytes held by a pipeline, by category (`fh_memory_report`).
pub type MemoryReport = ffi::fh_memory_report;

/// Environment variable naming the library's full path.
pub const ENV_VAR: &str = "FOXHUNT_LIBRARY";
const DEFAULT_NAME: &str = "libfoxhunt.so";

/// A loaded libfoxhunt. Pipelines keep it alive (through an `Arc`).
pub struct Library {
    api: ffi::Api,
    path: String,
    _lib: libloading::Library, // dropped last: `api` points into it
}

impl Library {
    /// Load from `$FOXHUNT_LIBRARY` if set, else `libfoxhunt.so` through the system loader
    /// (`LD_LIBRARY_PATH`, the ld.so cache). A load error says which was tried.
    pub fn load() -> Result<Arc<Library>> {
        match std::env::var_os(ENV_VAR) {
            Some(p) if !p.is_empty() => Library::open(&p).map_err(|e| match e {
                Error::Load(m) => Error::Load(format!("{} (from ${})", m, ENV_VAR)),
                e => e,
            }),
            _ => Library::open(DEFAULT_NAME).map_err(|e| match e {
                Error::Load(m) => Error::Load(format!(
                    "{}; set {} to the library's full path (e.g. build/libfoxhunt.so)",
                    m, ENV_VAR
                )),
                e => e,
            }),
        }
    }

    /// Load from an explicit path (or a bare name for the system loader) and check the
    /// version and the size of `fh_config`.
    pub fn open<P: AsRef<std::ffi::OsStr>>(path: P) -> Result<Arc<Library>> {
        let shown = path.as_ref().to_string_lossy().into_owned();
        // SAFETY: loading runs the library's initialisers; libfoxhunt's are plain C++ statics.
        let lib = unsafe { libloading::Library::new(path.as_ref()) }
            .map_err(|e| Error::Load(format!("{}: {}", shown, e)))?;
        // The version before the other symbols: a library of another version may lack some of
        // them, and that is a version mismatch, not a failure to load.
        // SAFETY: fh_version is `unsigned fh_version(void)` in every version of foxhunt.h.
        let found = unsafe {
            let version: libloading::Symbol<ffi::FnVersion> = lib
                .get(b"fh_version\0")
                .map_err(|e| Error::Load(format!("{}: {}", shown, e)))?;
            split_version(version())
        };
        let expected = (ffi::FOXHUNT_VERSION_MAJOR, ffi::FOXHUNT_VERSION_MINOR);
        let ok = found.0 == expected.0
            && if found.0 == 0 {
                found.1 == expected.1
            } else {
                found.1 >= expected.1
            };
        if !ok {
            return Err(Error::Version { found, expected });
        }
        // SAFETY: the symbols are those of foxhunt.h; `api` is stored next to `lib`.
        let api = unsafe { ffi::Api::resolve(&lib) }
            .map_err(|e| Error::Load(format!("{}: {}", shown, e)))?;
        let library = Library {
            api,
            path: shown,
            _lib: lib,
        };
        let cfg = library.default_config();
        if cfg.struct_size != std::mem::size_of::<Config>() {
            return Err(Error::Load(format!(
                "the library's fh_config has {} bytes, this crate's {}",
                cfg.struct_size,
                std::mem::size_of::<Config>()
            )));
        }
        Ok(Arc::new(library))
    }

    /// (major, minor, patch) of the loaded library.
    pub fn version(&self) -> (u32, u32, u32) {
        // SAFETY: no arguments.
        split_version(unsafe { (self.api.version)() })
    }

    /// Where the library was loaded from (as given).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Bytes a pipeline of `config` would hold once it has stepped, by category, computed
    /// without creating it (`fh_memory_plan`). A config with `nccl_comm` set is refused
    /// (`Error::Argument`): see [`Library::memory_plan_with_communicator`].
    pub fn memory_plan(&self, config: &Config) -> Result<MemoryReport> {
        refuse_communicator(config, "Library::memory_plan_with_communicator")?;
        // SAFETY: no communicator.
        unsafe { self.memory_plan_with_communicator(config) }
    }

    /// As [`Library::memory_plan`] for a data-parallel config (its rank's share of the batch).
    ///
    /// # Safety
    /// `config.nccl_comm` is null or a valid `ncclComm_t`: the library asks it for the rank
    /// and the number of ranks.
    pub unsafe fn memory_plan_with_communicator(&self, config: &Config) -> Result<MemoryReport> {
        let mut cfg = *config;
        cfg.struct_size = std::mem::size_of::<Config>();
        let mut r = MemoryReport::zeroed();
        // SAFETY: valid config, writable report of the right size.
        self.check(unsafe { (self.api.memory_plan)(&cfg, &mut r) })?;
        Ok(r)
    }

    /// SPEC §1 defaults, as filled by `fh_config_init`.
    pub fn default_config(&self) -> Config {
        let mut c = Config::zeroed();
        // SAFETY: `c` is a valid, writable fh_config.
        unsafe { (self.api.config_init)(&mut c) };
        c
    }

    /// The library's static text of a status.
    pub fn status_string(&self, status: Status) -> String {
        // SAFETY: returns a static, never-NULL string.
        unsafe { cstr((self.api.status_string)(status.code())) }
    }

    /// The raw entry points, for what the safe API does not cover.
    pub fn raw(&self) -> &ffi::Api {
        &self.api
    }

    fn check(&self, status: ffi::fh_status) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: thread-local, never NULL, valid until the next call on this thread.
        let message = unsafe { cstr((self.api.last_error_message)()) };
        Err(Error::Foxhunt {
            status: Status::from_code(status),
            message,
        })
    }
}

unsafe fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Which executor runs the step (`fh_backend`). The discriminants are the C values, so
/// `config.backend = Backend::Cuda as i32` asks for CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Backend {
    /// CUDA when the library was built with it and a device exists, else the CPU (the
    /// default); [`Pipeline::backend`] says which was chosen.
    Auto = ffi::FH_BACKEND_AUTO,
    /// The CPU reference (OpenBLAS GEMMs).
    Cpu = ffi::FH_BACKEND_CPU,
    /// CUDA graphs; creating a pipeline fails with [`Status::NoCuda`] where unavailable.
    Cuda = ffi::FH_BACKEND_CUDA,
}

/// Parameter group of a named tensor (`fh_group`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Q,
    IqlHi,
    IqlLo,
    Iqn,
    Attn,
    QTarget,
    IqnTarget,
    State,
    Output,
    Other(i32),
}

impl Group {
    fn from_code(c: i32) -> Group {
        match c {
            0 => Group::Q,
            1 => Group::IqlHi,
            2 => Group::IqlLo,
            3 => Group::Iqn,
            4 => Group::Attn,
            5 => Group::QTarget,
            6 => Group::IqnTarget,
            7 => Group::State,
            8 => Group::Output,
            c => Group::Other(c),
        }
    }
}

/// Description of one named tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// 1 for vectors.
    pub rows: u32,
    pub cols: u32,
    pub group: Group,
    pub writable: bool,
}

impl TensorInfo {
    pub fn len(&self) -> usize {
        self.rows as usize * self.cols as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Metrics of the last completed step (SPEC §6).
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
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
    /// rho_k after the step's update, `num_regimes` entries.
    pub regime_scale: Vec<f32>,
    /// Steps the divergence guard skipped since the pipeline was created.
    pub steps_skipped: u64,
    /// The step these metrics describe applied no update.
    pub last_step_skipped: bool,
}

/// One step's input (SPEC §2), borrowed: row-major slices of batch_size rows.
/// `goal`, `next_achieved_goal` and `her_goal` are required when goal_dim > 0 and must be
/// `None` (or empty) otherwise; `regime: None` means every transition is regime 0.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub obs: &'a [f32],
    pub goal: Option<&'a [f32]>,
    pub action: &'a [i32],
    pub reward: &'a [f32],
    pub done: &'a [u8],
    pub next_obs: &'a [f32],
    pub next_achieved_goal: Option<&'a [f32]>,
    pub her_goal: Option<&'a [f32]>,
    pub regime: Option<&'a [i32]>,
}

/// Rows to append to the replay (SPEC §2.1), borrowed: R rows of `replay_envs` (E)
/// transitions, row-major [R, E, ...] (obs [R, E, O], reward [R, E], ...), oldest row first;
/// R = obs.len() / (E * obs_dim). `episode_end` marks each environment's last transition of
/// an episode; `done` = 1 requires `episode_end` = 1. Goals as in [`Batch`]; `regime: None`
/// means 0.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    pub obs: &'a [f32],
    pub goal: Option<&'a [f32]>,
    pub action: &'a [i32],
    pub reward: &'a [f32],
    pub done: &'a [u8],
    pub next_obs: &'a [f32],
    pub next_achieved_goal: Option<&'a [f32]>,
    pub regime: Option<&'a [i32]>,
    pub episode_end: &'a [u8],
}

/// One foxhunt pipeline; dropping it destroys the handle.
pub struct Pipeline {
    lib: Arc<Library>,
    handle: NonNull<ffi::fh_pipeline>,
    config: Config,
}

// A pipeline may move to another thread, but is not thread-safe (not Sync), as the header says.
unsafe impl Send for Pipeline {}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::Argument(format!(
            "{} has {} elements, expected {}",
            what, got, want
        )))
    }
}

/// The pointer of a goal tensor of `n` rows: required (n * goal_dim elements) when goal_dim > 0,
/// absent (or empty) otherwise.
fn goal_ptr(goal_dim: usize, what: &str, s: Option<&[f32]>, n: usize) -> Result<*const f32> {
    match (goal_dim, s) {
        (0, None) => Ok(ptr::null()),
        (0, Some([])) => Ok(ptr::null()),
        (0, Some(_)) => Err(Error::Argument(format!("{}: goal_dim is 0", what))),
        (_, None) => Err(Error::Argument(format!(
            "{} is required (goal_dim > 0)",
            what
        ))),
        (_, Some(s)) => check_len(what, s.len(), n * goal_dim).map(|_| s.as_ptr()),
    }
}

/// fh_version()'s number as (major, minor, patch).
fn split_version(v: u32) -> (u32, u32, u32) {
    (v / 10000, (v / 100) % 100, v % 100)
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::Argument(format!("tensor name {:?} holds a NUL", name)))
}

fn c_path(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Argument(format!("path {:?} holds a NUL", path)))
}

/// A communicator is a raw pointer the library dereferences (at creation and in every step's
/// all-reduce), so only the unsafe constructors take a config that sets one.
fn refuse_communicator(config: &Config, unsafe_fn: &str) -> Result<()> {
    if config.nccl_comm.is_null() {
        return Ok(());
    }
    Err(Error::Argument(format!(
        "config.nccl_comm is set: a data-parallel pipeline (SPEC §9) needs the unsafe {}, whose \
         caller vouches for the communicator",
        unsafe_fn
    )))
}

impl Pipeline {
    /// Validate `config`, allocate, initialise from the seed (SPEC §3). A config with
    /// `nccl_comm` set is refused (`Error::Argument`): see [`Pipeline::with_communicator`].
    pub fn new(lib: &Arc<Library>, config: &Config) -> Result<Pipeline> {
        refuse_communicator(config, "Pipeline::with_communicator")?;
        // SAFETY: no communicator.
        unsafe { Self::with_communicator(lib, config) }
    }

    /// As [`Pipeline::new`], for a data-parallel pipeline (SPEC §9): `config.nccl_comm` may be
    /// set. Creation is collective: every rank creates its pipeline at the same time.
    ///
    /// # Safety
    /// `config.nccl_comm` is null or a valid `ncclComm_t` whose device is `config.device`,
    /// and it outlives the pipeline: the library reads it while creating the pipeline and in
    /// every step's all-reduce.
    pub unsafe fn with_communicator(lib: &Arc<Library>, config: &Config) -> Result<Pipeline> {
        let mut cfg = *config;
        cfg.struct_size = std::mem::size_of::<Config>();
        let mut handle: *mut ffi::fh_pipeline = ptr::null_mut();
        // SAFETY: valid config and out pointer.
        lib.check(unsafe { (lib.api.pipeline_create)(&cfg, &mut handle) })?;
        let handle = NonNull::new(handle)
            .ok_or_else(|| Error::Load("fh_pipeline_create returned NULL".into()))?;
        let mut p = Pipeline {
            lib: lib.clone(),
            handle,
            config: cfg,
        };
        let mut resolved = Config::zeroed();
        // SAFETY: live handle, writable config.
        p.lib
            .check(unsafe { (p.lib.api.pipeline_config)(p.handle.as_ptr(), &mut resolved) })?;
        p.config = resolved;
        Ok(p)
    }

    /// The pipeline's config, backend resolved.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }

    fn h(&self) -> *mut ffi::fh_pipeline {
        self.handle.as_ptr()
    }

    pub fn backend(&self) -> Result<Backend> {
        let mut b = 0i32;
        // SAFETY: live handle.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_backend)(self.h(), &mut b) })?;
        Ok(if b == ffi::FH_BACKEND_CUDA {
            Backend::Cuda
        } else {
            Backend::Cpu
        })
    }

    /// Validate and copy one batch; the next steps train on it.
    pub fn upload(&mut self, b: &Batch<'_>) -> Result<()> {
        let c = &self.config;
        let (bs, o, g, nb) = (
            c.batch_size as usize,
            c.obs_dim as usize,
            c.goal_dim as usize,
            c.num_branches as usize,
        );
        check_len("obs", b.obs.len(), bs * o)?;
        check_len("next_obs", b.next_obs.len(), bs * o)?;
        check_len("action", b.action.len(), bs * nb)?;
        check_len("reward", b.reward.len(), bs)?;
        check_len("done", b.done.len(), bs)?;
        if let Some(r) = b.regime {
            check_len("regime", r.len(), bs)?;
        }
        let mut raw = ffi::fh_batch::zeroed();
        raw.batch_size = c.batch_size;
        raw.obs = b.obs.as_ptr();
        raw.next_obs = b.next_obs.as_ptr();
        raw.action = b.action.as_ptr();
        raw.reward = b.reward.as_ptr();
        raw.done = b.done.as_ptr();
        raw.goal = goal_ptr(g, "goal", b.goal, bs)?;
        raw.next_achieved_goal = goal_ptr(g, "next_achieved_goal", b.next_achieved_goal, bs)?;
        raw.her_goal = goal_ptr(g, "her_goal", b.her_goal, bs)?;
        raw.regime = b.regime.map_or(ptr::null(), |r| r.as_ptr());
        // SAFETY: every pointer is valid for the lengths checked above for this call.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_upload)(self.h(), &raw) })
    }

    /// One training step (SPEC §5), on a batch drawn from the replay when the pipeline has
    /// one (SPEC §5.0).
    pub fn step(&mut self) -> Result<()> {
        // SAFETY: live handle.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_step)(self.h()) })
    }

    /// `k` steps back to back with no host round trip between them (`fh_pipeline_train`).
    pub fn train(&mut self, k: u32) -> Result<()> {
        // SAFETY: live handle.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_train)(self.h(), k) })
    }

    /// Append rows to the replay (SPEC §2.1); a refused insert changes nothing.
    pub fn insert(&mut self, r: &Rows<'_>) -> Result<()> {
        let c = &self.config;
        let (e, o, g, nb) = (
            c.replay_envs as usize,
            c.obs_dim as usize,
            c.goal_dim as usize,
            c.num_branches as usize,
        );
        if e == 0 {
            // No replay: the library refuses the call (FH_ERR_UNSUPPORTED) before it reads any
            // row, so hand it an empty set and return its status and message.
            let raw = ffi::fh_replay_rows::zeroed();
            // SAFETY: live handle, a valid struct of the right size.
            return self
                .lib
                .check(unsafe { (self.lib.api.pipeline_insert)(self.h(), &raw) });
        }
        if r.obs.is_empty() || r.obs.len() % (e * o) != 0 {
            return Err(Error::Argument(format!(
                "obs has {} elements, expected a positive multiple of replay_envs * obs_dim \
                 = {} (a pipeline with a replay)",
                r.obs.len(),
                e * o
            )));
        }
        let n = r.obs.len() / o; // transitions: R * E
        check_len("next_obs", r.next_obs.len(), n * o)?;
        check_len("action", r.action.len(), n * nb)?;
        check_len("reward", r.reward.len(), n)?;
        check_len("done", r.done.len(), n)?;
        check_len("episode_end", r.episode_end.len(), n)?;
        if let Some(z) = r.regime {
            check_len("regime", z.len(), n)?;
        }
        let mut raw = ffi::fh_replay_rows::zeroed();
        raw.num_rows = u32::try_from(n / e).map_err(|_| Error::Argument("too many rows".into()))?;
        raw.num_envs = c.replay_envs;
        raw.obs = r.obs.as_ptr();
        raw.next_obs = r.next_obs.as_ptr();
        raw.goal = goal_ptr(g, "goal", r.goal, n)?;
        raw.next_achieved_goal = goal_ptr(g, "next_achieved_goal", r.next_achieved_goal, n)?;
        raw.action = r.action.as_ptr();
        raw.reward = r.reward.as_ptr();
        raw.done = r.done.as_ptr();
        raw.regime = r.regime.map_or(ptr::null(), |z| z.as_ptr());
        raw.episode_end = r.episode_end.as_ptr();
        // SAFETY: every pointer is valid for the lengths checked above for this call.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_insert)(self.h(), &raw) })
    }

    /// Wait for queued work (`fh_pipeline_sync`).
    pub fn sync(&mut self) -> Result<()> {
        // SAFETY: live handle.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_sync)(self.h()) })
    }

    fn act_raw(
        &mut self,
        obs: &[f32],
        goal: Option<&[f32]>,
        epsilon: f32,
        q: Option<&mut Vec<f32>>,
    ) -> Result<Vec<i32>> {
        let c = &self.config;
        let (o, g, nb, a) = (
            c.obs_dim as usize,
            c.goal_dim as usize,
            c.num_branches as usize,
            c.actions_per_branch as usize,
        );
        if obs.is_empty() || obs.len() % o != 0 {
            return Err(Error::Argument(format!(
                "obs has {} elements, expected a positive multiple of obs_dim = {}",
                obs.len(),
                o
            )));
        }
        let n = obs.len() / o;
        let goal_ptr = match (g, goal) {
            (0, None) => ptr::null(),
            (0, Some([])) => ptr::null(),
            (0, Some(_)) => return Err(Error::Argument("goal: goal_dim is 0".into())),
            (_, None) => return Err(Error::Argument("goal is required (goal_dim > 0)".into())),
            (_, Some(s)) => {
                check_len("goal", s.len(), n * g)?;
                s.as_ptr()
            }
        };
        let mut actions = vec![0i32; n * nb];
        let q_ptr = match q {
            Some(v) => {
                v.clear();
                v.resize(n * nb * a, 0.0);
                v.as_mut_ptr()
            }
            None => ptr::null_mut(),
        };
        let rows = u32::try_from(n).map_err(|_| Error::Argument("too many rows".into()))?;
        // SAFETY: obs [n, O], goal [n, G] or NULL, actions [n, NB], q [n, NB, A] or NULL.
        self.lib.check(unsafe {
            (self.lib.api.pipeline_act)(
                self.h(),
                obs.as_ptr(),
                goal_ptr,
                rows,
                epsilon,
                actions.as_mut_ptr(),
                q_ptr,
            )
        })?;
        Ok(actions)
    }

    /// Greedy / epsilon-greedy actions (SPEC §7) of n = obs.len() / obs_dim rows:
    /// [n, NB] row-major.
    pub fn act(&mut self, obs: &[f32], goal: Option<&[f32]>, epsilon: f32) -> Result<Vec<i32>> {
        self.act_raw(obs, goal, epsilon, None)
    }

    /// As [`Pipeline::act`], also returning the clamped q values [n, NB, A].
    pub fn act_with_q(
        &mut self,
        obs: &[f32],
        goal: Option<&[f32]>,
        epsilon: f32,
    ) -> Result<(Vec<i32>, Vec<f32>)> {
        let mut q = Vec::new();
        let a = self.act_raw(obs, goal, epsilon, Some(&mut q))?;
        Ok((a, q))
    }

    pub fn metrics(&self) -> Result<Metrics> {
        let mut m = ffi::fh_metrics::zeroed();
        // SAFETY: live handle, writable struct of the right size.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_metrics)(self.h(), &mut m) })?;
        let r = (m.num_regimes as usize).min(ffi::FH_MAX_REGIMES);
        Ok(Metrics {
            step: m.step,
            td_loss: m.td_loss,
            q_mean: m.q_mean,
            cql_loss: m.cql_loss,
            iql_loss_hi: m.iql_loss_hi,
            iql_loss_lo: m.iql_loss_lo,
            iqn_loss: m.iqn_loss,
            attn_loss: m.attn_loss,
            conf_loss: m.conf_loss,
            grad_norm: m.grad_norm,
            sigma: m.sigma,
            sigma_target: m.sigma_target,
            ensemble_std: m.ensemble_std,
            num_relabelled: m.num_relabelled,
            regime_scale: m.regime_scale[..r].to_vec(),
            steps_skipped: m.steps_skipped,
            last_step_skipped: m.last_step_skipped != 0,
        })
    }

    pub fn timings(&self) -> Result<Timings> {
        let mut t = Timings::zeroed();
        // SAFETY: live handle, writable struct of the right size.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_timings)(self.h(), &mut t) })?;
        Ok(t)
    }

    /// `Err` (status ERR_NON_FINITE) if the divergence guard skipped a step since the last
    /// check; the message names the first non-finite quantity (`fh_pipeline_check`).
    pub fn check(&mut self) -> Result<()> {
        // SAFETY: live handle.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_check)(self.h()) })
    }

    pub fn memory(&self) -> Result<MemoryReport> {
        let mut r = MemoryReport::zeroed();
        // SAFETY: live handle, writable struct of the right size.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_memory)(self.h(), &mut r) })?;
        Ok(r)
    }

    fn info_of(&self, raw: &ffi::fh_tensor_info) -> TensorInfo {
        TensorInfo {
            // SAFETY: the name is owned by the pipeline and NUL-terminated.
            name: unsafe { cstr(raw.name) },
            rows: raw.rows,
            cols: raw.cols,
            group: Group::from_code(raw.group),
            writable: raw.writable != 0,
        }
    }

    /// Every named tensor (parameters, targets, state, outputs), in the library's order.
    pub fn tensors(&self) -> Result<Vec<TensorInfo>> {
        let mut n = 0u32;
        // SAFETY: live handle.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_num_tensors)(self.h(), &mut n) })?;
        (0..n)
            .map(|i| {
                let mut raw = ffi::fh_tensor_info::zeroed();
                // SAFETY: live handle, index in range, writable struct.
                self.lib
                    .check(unsafe { (self.lib.api.pipeline_tensor_info)(self.h(), i, &mut raw) })?;
                Ok(self.info_of(&raw))
            })
            .collect()
    }

    /// Look one tensor up by name.
    pub fn tensor(&self, name: &str) -> Result<TensorInfo> {
        let cname = c_name(name)?;
        let mut raw = ffi::fh_tensor_info::zeroed();
        // SAFETY: live handle, NUL-terminated name, writable struct.
        self.lib.check(unsafe {
            (self.lib.api.pipeline_find_tensor)(self.h(), cname.as_ptr(), &mut raw)
        })?;
        Ok(self.info_of(&raw))
    }

    /// A copy of tensor `name` (rows * cols floats, row-major).
    pub fn read(&self, name: &str) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.tensor(name)?.len()];
        self.read_into(name, &mut out)?;
        Ok(out)
    }

    /// Copy tensor `name` into `out`, which must hold exactly its rows * cols floats.
    pub fn read_into(&self, name: &str, out: &mut [f32]) -> Result<()> {
        let cname = c_name(name)?;
        // SAFETY: live handle; `out` is valid for out.len() floats, which the library checks.
        self.lib.check(unsafe {
            (self.lib.api.pipeline_read_tensor)(
                self.h(),
                cname.as_ptr(),
                out.as_mut_ptr(),
                out.len(),
            )
        })
    }

    /// Overwrite tensor `name` (a parameter, target or state tensor).
    pub fn write(&mut self, name: &str, values: &[f32]) -> Result<()> {
        let cname = c_name(name)?;
        // SAFETY: live handle; `values` is valid for values.len() floats.
        self.lib.check(unsafe {
            (self.lib.api.pipeline_write_tensor)(
                self.h(),
                cname.as_ptr(),
                values.as_ptr(),
                values.len(),
            )
        })
    }

    /// Save everything a continued run needs (not the replay).
    pub fn save<P: AsRef<Path>>(&self, path: P) -> Result<()> {
        let p = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_save)(self.h(), p.as_ptr()) })
    }

    /// Save with the replay too (`FH_SAVE_REPLAY`): a run that samples from it resumes bit
    /// for bit.
    pub fn save_with_replay<P: AsRef<Path>>(&self, path: P) -> Result<()> {
        let p = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        self.lib.check(unsafe {
            (self.lib.api.pipeline_save_ex)(self.h(), p.as_ptr(), ffi::FH_SAVE_REPLAY)
        })
    }

    /// Load a checkpoint of a pipeline with the same config; on error nothing changes.
    pub fn load<P: AsRef<Path>>(&mut self, path: P) -> Result<()> {
        let p = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_load)(self.h(), p.as_ptr()) })
    }

    /// Write the captured CUDA graph as Graphviz dot (FH_ERR_NO_CUDA on the CPU backend).
    pub fn dump_graph<P: AsRef<Path>>(&self, path: P) -> Result<()> {
        let p = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        self.lib
            .check(unsafe { (self.lib.api.pipeline_dump_graph)(self.h(), p.as_ptr()) })
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // SAFETY: the handle is live and destroyed exactly once.
        unsafe { (self.lib.api.pipeline_destroy)(self.h()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, size_of};

    // Sizes on LP64 (x86_64 / aarch64 Linux), from the header's field lists; the integration
    // tests confirm them against the library itself.
    #[test]
    fn struct_sizes_lp64() {
        assert_eq!(size_of::<ffi::fh_config>(), 8 + 46 * 4 + 8 + 2 * 4 + 8);
        assert_eq!(size_of::<ffi::fh_batch>(), 8 + 8 + 9 * 8 + 8);
        assert_eq!(size_of::<ffi::fh_replay_rows>(), 8 + 3 * 4 + 4 + 9 * 8);
        assert_eq!(
            size_of::<ffi::fh_metrics>(),
            8 + 8 + 9 * 4 + 16 + 4 + 8 + 64 * 4 + 8 + 4 + 4 // steps_skipped, last_step_skipped, padding
        );
        assert_eq!(size_of::<ffi::fh_timings>(), 8 + 14 * 4); // 13 floats, padded
        assert_eq!(size_of::<ffi::fh_tensor_info>(), 8 + 8 + 16);
        assert_eq!(size_of::<ffi::fh_memory_report>(), 8 + 6 * 8);
        assert_eq!(align_of::<ffi::fh_config>(), 8);
    }

    #[test]
    fn backend_discriminants_are_the_c_values() {
        // `config.backend = Backend::Cuda as i32` must ask for CUDA, not the CPU (1).
        assert_eq!(Backend::Auto as i32, 0);
        assert_eq!(Backend::Cpu as i32, 1);
        assert_eq!(Backend::Cuda as i32, 2);
    }

    #[test]
    fn status_codes_round_trip() {
        for code in 0..20 {
            assert_eq!(Status::from_code(code).code(), code);
        }
        assert_eq!(Status::from_code(6).name(), "FH_ERR_NON_FINITE");
        assert_eq!(Status::from_code(99), Status::Other(99));
        assert_eq!(Status::Other(99).to_string(), "FH_STATUS_99");
    }
}
