//! Against the built library: set FOXHUNT_LIBRARY to libfoxhunt.so's full path (the tests
//! skip, saying so, when it is unset).
use std::sync::Arc;

use foxhunt::{ffi, Batch, Config, Error, Library, Pipeline, Rows, Status};

fn library() -> Option<Arc<Library>> {
    match std::env::var("FOXHUNT_LIBRARY") {
        Ok(p) if !p.is_empty() => Some(Library::open(p).expect("FOXHUNT_LIBRARY does not load")),
        _ => {
            eprintln!("skipping: set FOXHUNT_LIBRARY to the full path of libfoxhunt.so");
            None
        }
    }
}

/// Every metric and tensor of the two pipelines equal.
fn assert_same(p: &Pipeline, q: &Pipeline) {
    assert_eq!(p.metrics().unwrap(), q.metrics().unwrap());
    for t in p.tensors().unwrap() {
        assert_eq!(
            p.read(&t.name).unwrap(),
            q.read(&t.name).unwrap(),
            "{}",
            t.name
        );
    }
}

fn small(lib: &Library) -> Config {
    let mut c = lib.default_config();
    c.backend = 1; // CPU
    c.batch_size = 16;
    c.obs_dim = 8;
    c.goal_dim = 2;
    c.num_branches = 2;
    c.actions_per_branch = 3;
    c.trunk_hidden = 16;
    c.branch_hidden = 8;
    c.iql_hidden = 8;
    c.iqn_hidden = 8;
    c.iqn_cos = 4;
    c.iqn_n = 4;
    c.iqn_n_target = 3;
    c.attn_d_model = 8;
    c.attn_heads = 2;
    c.attn_head_hidden = 8;
    c.num_regimes = 2;
    c
}

/// A deterministic pseudo-random stream (xorshift), enough for valid batches.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn fs(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
    fn below(&mut self, k: u64, n: usize) -> Vec<i32> {
        (0..n).map(|_| (self.next() % k) as i32).collect()
    }
}

struct Data {
    obs: Vec<f32>,
    goal: Vec<f32>,
    action: Vec<i32>,
    reward: Vec<f32>,
    done: Vec<u8>,
    next_obs: Vec<f32>,
    ag: Vec<f32>,
    her: Vec<f32>,
    regime: Vec<i32>,
}

impl Data {
    fn new(seed: u64) -> Data {
        let mut r = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        Data {
            obs: r.fs(16 * 8),
            goal: r.fs(16 * 2),
            action: r.below(3, 16 * 2),
            reward: r.fs(16),
            done: r.below(2, 16).into_iter().map(|d| d as u8).collect(),
            next_obs: r.fs(16 * 8),
            ag: r.fs(16 * 2),
            her: r.fs(16 * 2),
            regime: r.below(2, 16),
        }
    }
    fn batch(&self) -> Batch<'_> {
        Batch {
            obs: &self.obs,
            goal: Some(&self.goal),
            action: &self.action,
            reward: &self.reward,
            done: &self.done,
            next_obs: &self.next_obs,
            next_achieved_goal: Some(&self.ag),
            her_goal: Some(&self.her),
            regime: Some(&self.regime),
        }
    }
}

#[test]
fn version_and_defaults() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    assert_eq!(lib.version().0, ffi::FOXHUNT_VERSION_MAJOR);
    assert_eq!(lib.version().1, ffi::FOXHUNT_VERSION_MINOR);
    let c = lib.default_config();
    // fh_config_init writes sizeof(fh_config) as the library knows it
    assert_eq!(c.struct_size, std::mem::size_of::<Config>());
    assert_eq!(
        (c.batch_size, c.obs_dim, c.goal_dim, c.num_branches),
        (16384, 124, 4, 4)
    );
    assert_eq!(
        (c.trunk_hidden, c.iqn_cos, c.num_regimes, c.seed),
        (256, 64, 4, 0)
    );
    assert_eq!((c.gamma, c.clip_norm, c.adam_eps), (0.99f32, 10.0, 1e-8f32));
    assert!(lib
        .status_string(Status::NonFinite)
        .starts_with("FH_ERR_NON_FINITE"));
}

#[test]
fn struct_sizes_confirmed_by_library() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let p = Pipeline::new(&lib, &small(&lib)).unwrap();
    let api = lib.raw();
    let h = {
        // the handle is private; reach it through a second, raw pipeline
        let mut cfg = small(&lib);
        let mut raw: *mut ffi::fh_pipeline = std::ptr::null_mut();
        cfg.struct_size += 8;
        assert_eq!(
            unsafe { (api.pipeline_create)(&cfg, &mut raw) },
            Status::StructSize.code()
        );
        cfg.struct_size -= 8;
        assert_eq!(unsafe { (api.pipeline_create)(&cfg, &mut raw) }, 0);
        raw
    };
    unsafe {
        // -4 and +8 match no size; the 0.1 sizes (8 bytes less for timings, memory report
        // and batch) are accepted, see version_0_1_struct_sizes_accepted.
        for delta in [0isize, -4, 8] {
            let want = if delta == 0 {
                0
            } else {
                Status::StructSize.code()
            };
            let adj = |s: usize| (s as isize + delta) as usize;
            let mut m = ffi::fh_metrics::zeroed();
            m.struct_size = adj(m.struct_size);
            assert_eq!((api.pipeline_metrics)(h, &mut m), want);
            let mut t = ffi::fh_timings::zeroed();
            t.struct_size = adj(t.struct_size);
            assert_eq!((api.pipeline_timings)(h, &mut t), want);
            let mut r = ffi::fh_memory_report::zeroed();
            r.struct_size = adj(r.struct_size);
            assert_eq!((api.pipeline_memory)(h, &mut r), want);
            let mut i = ffi::fh_tensor_info::zeroed();
            i.struct_size = adj(i.struct_size);
            assert_eq!((api.pipeline_tensor_info)(h, 0, &mut i), want);
            let mut b = ffi::fh_batch::zeroed();
            b.struct_size = adj(b.struct_size);
            let d = Data::new(1);
            b.batch_size = 16;
            b.obs = d.obs.as_ptr();
            b.next_obs = d.next_obs.as_ptr();
            b.goal = d.goal.as_ptr();
            b.next_achieved_goal = d.ag.as_ptr();
            b.her_goal = d.her.as_ptr();
            b.action = d.action.as_ptr();
            b.reward = d.reward.as_ptr();
            b.done = d.done.as_ptr();
            assert_eq!((api.pipeline_upload)(h, &b), want);
        }
        (api.pipeline_destroy)(h);
    }
    drop(p);
}

#[test]
fn upload_step_metrics_timings() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let mut p = Pipeline::new(&lib, &small(&lib)).unwrap();
    assert_eq!(p.backend().unwrap(), foxhunt::Backend::Cpu);
    let e = p.step().unwrap_err();
    assert_eq!(e.status(), Some(Status::NoBatch));
    let d = Data::new(2);
    p.upload(&d.batch()).unwrap();
    p.step().unwrap();
    p.step().unwrap();
    let m = p.metrics().unwrap();
    assert_eq!(m.step, 2);
    assert!(m.td_loss.is_finite() && m.td_loss > 0.0);
    assert_eq!(m.regime_scale.len(), 2);
    assert!(m.sigma[1] > 0.0 && m.sigma[0] == 0.0);
    assert!(p.timings().unwrap().total_ms > 0.0);
    let mem = p.memory().unwrap();
    assert!(mem.total >= mem.parameters && mem.parameters > 0);
    // The plan of the config is what the CPU pipeline holds once it has stepped.
    assert_eq!(lib.memory_plan(p.config()).unwrap(), mem);
    assert_eq!(m.steps_skipped, 0);
    assert!(!m.last_step_skipped);
    p.check().unwrap();
}

#[test]
fn bad_input_refused() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let mut p = Pipeline::new(&lib, &small(&lib)).unwrap();
    let mut d = Data::new(3);
    d.obs[5] = f32::NAN;
    let e = p.upload(&d.batch()).unwrap_err();
    assert_eq!(e.status(), Some(Status::NonFinite));
    assert!(!e.message().is_empty());
    let mut d = Data::new(3);
    d.action[3] = 3;
    assert_eq!(
        p.upload(&d.batch()).unwrap_err().status(),
        Some(Status::OutOfRange)
    );
    let d = Data::new(3);
    let mut b = d.batch();
    b.reward = &d.reward[..15];
    assert!(matches!(p.upload(&b), Err(Error::Argument(_))));
    b = d.batch();
    b.her_goal = None;
    assert!(matches!(p.upload(&b), Err(Error::Argument(_))));
    let mut c = small(&lib);
    c.gamma = 2.0;
    let e = Pipeline::new(&lib, &c).err().unwrap();
    assert_eq!(e.status(), Some(Status::BadValue));
    assert!(e.to_string().starts_with("FH_ERR_BAD_VALUE"), "{}", e);
    // An NCCL communicator (SPEC §9) is a raw pointer the library dereferences: the safe
    // constructor and memory plan refuse a config with one, unread.
    let mut c = small(&lib);
    let mut not_a_communicator = 0u8;
    c.nccl_comm = &mut not_a_communicator as *mut u8 as *mut std::os::raw::c_void;
    let e = Pipeline::new(&lib, &c).err().unwrap();
    assert_eq!(e.status(), None);
    assert!(
        e.to_string().contains("Pipeline::with_communicator"),
        "{}",
        e
    );
    let e = lib.memory_plan(&c).err().unwrap();
    assert!(
        e.to_string().contains("memory_plan_with_communicator"),
        "{}",
        e
    );
    // Through the unsafe constructor, the CPU backend refuses it before dereferencing it.
    // SAFETY: on the CPU backend the library refuses a communicator without reading it.
    let e = unsafe { Pipeline::with_communicator(&lib, &c) }
        .err()
        .unwrap();
    assert_eq!(e.status(), Some(Status::Unsupported));
    assert!(e.message().contains("nccl_comm"), "{}", e);
}

#[test]
fn act_read_write() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let mut p = Pipeline::new(&lib, &small(&lib)).unwrap();
    let d = Data::new(4);
    let (a, q) = p
        .act_with_q(&d.obs[..5 * 8], Some(&d.goal[..5 * 2]), 0.0)
        .unwrap();
    assert_eq!((a.len(), q.len()), (10, 30));
    for (i, &ai) in a.iter().enumerate() {
        let row = &q[i * 3..i * 3 + 3];
        let best = (0..3).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        assert_eq!(ai as usize, best);
    }
    assert_eq!(
        p.act(&d.obs[..8], Some(&d.goal[..2]), 0.0).unwrap(),
        a[..2].to_vec()
    );
    assert!(p.act(&d.obs[..8], None, 0.0).is_err());

    let info = p.tensor("q.W1").unwrap();
    assert_eq!(
        (info.rows, info.cols, info.group),
        (16, 10, foxhunt::Group::Q)
    );
    let all = p.tensors().unwrap();
    assert_eq!(all[0].name, "q.W1");
    assert!(all.iter().any(|t| t.name == "d_states" && !t.writable));
    let w: Vec<f32> = (0..160).map(|i| i as f32 / 100.0).collect();
    p.write("q.W1", &w).unwrap();
    assert_eq!(p.read("q.W1").unwrap(), w);
    assert_eq!(
        p.write("q.W1", &w[..159]).unwrap_err().status(),
        Some(Status::BufferSize)
    );
    assert_eq!(
        p.read("nope").unwrap_err().status(),
        Some(Status::UnknownName)
    );
}

#[test]
fn version_0_1_struct_sizes_accepted() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let mut p = Pipeline::new(&lib, &small(&lib)).unwrap();
    let d = Data::new(2);
    p.upload(&d.batch()).unwrap();
    p.step().unwrap();
    let api = lib.raw();
    let mut raw: *mut ffi::fh_pipeline = std::ptr::null_mut();
    let mut cfg = small(&lib);
    cfg.struct_size = std::mem::offset_of!(ffi::fh_config, replay_capacity); // ends at `seed`
    unsafe {
        assert_eq!((api.pipeline_create)(&cfg, &mut raw), 0);
        let mut t = ffi::fh_timings::zeroed();
        t.struct_size -= 8;
        t.sample_ms = 7.0;
        assert_eq!((api.pipeline_timings)(raw, &mut t), 0);
        assert_eq!(t.sample_ms, 7.0); // beyond the 0.1 size: not written
        let mut r = ffi::fh_memory_report::zeroed();
        r.struct_size -= 8;
        assert_eq!((api.pipeline_memory)(raw, &mut r), 0);
        assert!(r.total > 0);
        (api.pipeline_destroy)(raw);
    }
}

/// Rows of E = 3 environments for `small` with a replay; every 4th transition ends its
/// episode.
struct RowData {
    obs: Vec<f32>,
    goal: Vec<f32>,
    action: Vec<i32>,
    reward: Vec<f32>,
    done: Vec<u8>,
    next_obs: Vec<f32>,
    ag: Vec<f32>,
    ends: Vec<u8>,
}

impl RowData {
    fn new(rows: usize, seed: u64) -> RowData {
        let n = rows * 3;
        let mut r = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        let ends: Vec<u8> = (0..n).map(|i| (i % 4 == 3) as u8).collect();
        RowData {
            obs: r.fs(n * 8),
            goal: r.fs(n * 2),
            action: r.below(3, n * 2),
            reward: r.fs(n),
            done: ends
                .iter()
                .enumerate()
                .map(|(i, e)| e & (i % 8 == 7) as u8)
                .collect(),
            next_obs: r.fs(n * 8),
            ag: r.fs(n * 2),
            ends,
        }
    }
    fn rows(&self) -> Rows<'_> {
        Rows {
            obs: &self.obs,
            goal: Some(&self.goal),
            action: &self.action,
            reward: &self.reward,
            done: &self.done,
            next_obs: &self.next_obs,
            next_achieved_goal: Some(&self.ag),
            regime: None,
            episode_end: &self.ends,
        }
    }
}

fn with_replay(lib: &Library) -> Config {
    let mut c = small(lib);
    c.replay_capacity = 5;
    c.replay_envs = 3;
    c
}

#[test]
fn replay_insert_train_and_refusals() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let mut p = Pipeline::new(&lib, &with_replay(&lib)).unwrap();
    let mut twin = Pipeline::new(&lib, &with_replay(&lib)).unwrap();
    assert_eq!(p.train(2).unwrap_err().status(), Some(Status::NoBatch));
    let first = RowData::new(7, 1);
    p.insert(&first.rows()).unwrap();
    twin.insert(&first.rows()).unwrap();
    let mut bad = RowData::new(2, 2);
    bad.obs[8 * 3 + 5] = f32::NAN; // row 1, env 0, column 5
    let e = p.insert(&bad.rows()).unwrap_err();
    assert_eq!(e.status(), Some(Status::NonFinite));
    assert!(e.to_string().contains("rows.obs[1, 0, 5] = nan"), "{}", e);
    assert!(matches!(
        p.insert(&Rows {
            reward: &bad.reward[..5],
            ..bad.rows()
        }),
        Err(Error::Argument(_))
    ));
    let d = Data::new(3);
    assert_eq!(
        p.upload(&d.batch()).unwrap_err().status(),
        Some(Status::Unsupported)
    );
    p.train(3).unwrap();
    for _ in 0..3 {
        twin.step().unwrap();
    }
    p.sync().unwrap();
    assert_eq!(p.metrics().unwrap(), twin.metrics().unwrap());
    assert!(p.timings().unwrap().sample_ms > 0.0);
    assert!(p.memory().unwrap().replay > 0);
    let mut plain = Pipeline::new(&lib, &small(&lib)).unwrap();
    assert_eq!(
        plain.insert(&first.rows()).unwrap_err().status(),
        Some(Status::Unsupported) // the library's refusal, as foxhunt.h documents
    );
    plain.upload(&d.batch()).unwrap();
    plain.train(2).unwrap();
    assert_eq!(plain.metrics().unwrap().step, 2);
}

#[test]
fn checkpoint_with_replay_resumes_bit_for_bit() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let dir = std::env::temp_dir().join(format!("foxhunt-rs-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.ckpt");
    let mut p = Pipeline::new(&lib, &with_replay(&lib)).unwrap();
    let mut q = Pipeline::new(&lib, &with_replay(&lib)).unwrap();
    p.insert(&RowData::new(6, 4).rows()).unwrap();
    p.train(2).unwrap();
    p.save_with_replay(&path).unwrap();
    q.load(&path).unwrap();
    let more = RowData::new(2, 5);
    for x in [&mut p, &mut q] {
        x.insert(&more.rows()).unwrap();
        x.train(3).unwrap();
    }
    assert_same(&p, &q);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn save_load_continues_bit_for_bit() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let dir = std::env::temp_dir().join(format!("foxhunt-rs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.ckpt");
    let mut p = Pipeline::new(&lib, &small(&lib)).unwrap();
    let mut q = Pipeline::new(&lib, &small(&lib)).unwrap();
    let (d1, d2) = (Data::new(5), Data::new(6));
    p.upload(&d1.batch()).unwrap();
    p.step().unwrap();
    p.save(&path).unwrap();
    q.load(&path).unwrap();
    for x in [&mut p, &mut q] {
        x.upload(&d2.batch()).unwrap();
        x.step().unwrap();
    }
    assert_same(&p, &q);
    assert_eq!(
        q.load(dir.join("missing")).unwrap_err().status(),
        Some(Status::Io)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn pipeline_moves_across_threads_and_outlives_nothing() {
    let lib = match library() {
        Some(l) => l,
        None => return,
    };
    let p = Pipeline::new(&lib, &small(&lib)).unwrap();
    drop(lib); // the pipeline keeps the library loaded
    let h = std::thread::spawn(move || {
        let mut p = p;
        let d = Data::new(7);
        p.upload(&d.batch()).unwrap();
        p.step().unwrap();
        p.metrics().unwrap().step
    });
    assert_eq!(h.join().unwrap(), 1);
}
