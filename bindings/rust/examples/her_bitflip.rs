//! Hindsight experience replay on the bit-flipping task, trained with foxhunt from Rust.
//!
//! The task (Andrychowicz et al. 2017, "Hindsight Experience Replay", §3.1 and §4.1): the
//! state is n bits, the goal another n bits, action k flips bit k; the reward is -1 on every
//! step that does not end on the goal and 0 on the one that does, which also ends the episode;
//! an episode lasts at most n steps. Start and goal are drawn uniformly, so a random policy
//! almost never sees a reward other than -1 when n is 12 or more, and plain DQN learns nothing.
//! HER stores each transition with a second goal, a state the episode actually reached later
//! ("future" strategy, §4.5); foxhunt relabels a transition with it at probability her_ratio
//! and recomputes reward and done (SPEC §5.1), so failed episodes teach how to reach the
//! states they did reach.
//!
//! The run trains the same agent (one action branch of n sub-actions: a goal-conditioned DQN)
//! twice per seed, with HER (her_ratio 0.8) and without (her_ratio 0, every other setting
//! equal), measures the greedy success rate on fresh start/goal pairs as it trains, prints a
//! table and writes DIR/her_success.csv (her, seed, step, success_rate);
//! `python3 examples/plot.py DIR` draws it.
//!
//!     cd bindings/rust
//!     FOXHUNT_LIBRARY=$PWD/../../build/libfoxhunt.so cargo run --release --example her_bitflip
//!
//! Options: --bits N (8), --steps N (3000), --seeds N (2), --eval-every N (250),
//! --backend cpu|cuda|auto (auto), --out DIR (her-run). A run of 3000 steps takes about 12 s
//! of CPU time. At n = 8 the success rate with HER reached 1.00 by step 2500 in both seeds of
//! our run, and stayed at 0.00 to 0.04 without it. Larger n needs more steps.
use std::fs::File;
use std::io::Write;
use std::time::Instant;

use foxhunt::{Backend, Batch, Config, Library, Pipeline};

/// splitmix64: start/goal draws, exploration is foxhunt's own (SPEC §7).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
    fn bits(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.next() >> 63) as f32).collect()
    }
}

struct Options {
    bits: usize,
    steps: usize,
    seeds: u64,
    eval_every: usize,
    backend: Backend,
    out: String,
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        bits: 8,
        steps: 3000,
        seeds: 2,
        eval_every: 250,
        backend: Backend::Auto,
        out: "her-run".into(),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let value = args.get(i + 1).ok_or(format!("{} needs a value", flag))?;
        let number = || -> Result<usize, String> {
            match value.parse::<usize>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(format!(
                    "{} wants a positive integer, got '{}'",
                    flag, value
                )),
            }
        };
        match flag {
            "--bits" => o.bits = number()?,
            "--steps" => o.steps = number()?,
            "--seeds" => o.seeds = number()? as u64,
            "--eval-every" => o.eval_every = number()?,
            "--out" => o.out = value.clone(),
            "--backend" => {
                o.backend = match value.as_str() {
                    "cpu" => Backend::Cpu,
                    "cuda" => Backend::Cuda,
                    "auto" => Backend::Auto,
                    _ => {
                        return Err(format!(
                            "--backend wants cpu, cuda or auto, got '{}'",
                            value
                        ))
                    }
                }
            }
            _ => return Err(format!("unknown option '{}'", flag)),
        }
        i += 2;
    }
    // The observation is cut into tokens of 4 floats for the attention model (SPEC §4).
    if o.bits % 4 != 0 || o.bits > 64 {
        return Err(format!(
            "--bits must be a multiple of 4, at most 64; got {}",
            o.bits
        ));
    }
    Ok(o)
}

/// A goal-conditioned DQN over n bits. The auxiliary learners (IQL, IQN, attention) do not
/// change the Q net when CQL is off, so they are made small: this run is about HER.
fn config(lib: &Library, o: &Options, seed: u64, her: bool) -> Config {
    let mut c = lib.default_config();
    c.backend = o.backend as i32;
    c.batch_size = 256;
    c.obs_dim = o.bits as u32;
    c.goal_dim = o.bits as u32;
    c.num_branches = 1;
    c.actions_per_branch = o.bits as u32;
    c.trunk_hidden = 128;
    c.branch_hidden = 64;
    c.gamma = 0.98; // the paper's
    c.ema_tau = 0.05; // the paper's Polyak 0.95
    c.lr_q = 1e-3;
    c.her_ratio = if her { 0.8 } else { 0.0 };
    c.her_epsilon = 0.5; // bits differ by >= 1: success is the exact goal
    c.cql_alpha = 0.0;
    c.num_regimes = 1;
    c.iql_hidden = 16;
    c.iqn_hidden = 16;
    c.iqn_cos = 8;
    c.iqn_n = 2;
    c.iqn_n_target = 2;
    c.attn_d_model = 8;
    c.attn_heads = 1;
    c.attn_head_hidden = 8;
    c.seed = seed;
    c
}

/// Transitions as columns, row-major: obs, goal and next_obs [len, n], the rest [len].
#[derive(Default)]
struct Transitions {
    obs: Vec<f32>,
    goal: Vec<f32>,
    action: Vec<i32>,
    reward: Vec<f32>,
    done: Vec<u8>,
    next_obs: Vec<f32>,
}

impl Transitions {
    fn zeroed(rows: usize, n: usize) -> Transitions {
        Transitions {
            obs: vec![0.0; rows * n],
            goal: vec![0.0; rows * n],
            action: vec![0; rows],
            reward: vec![0.0; rows],
            done: vec![0; rows],
            next_obs: vec![0.0; rows * n],
        }
    }

    fn len(&self) -> usize {
        self.reward.len()
    }

    fn append(&mut self, other: &Transitions) {
        self.obs.extend_from_slice(&other.obs);
        self.goal.extend_from_slice(&other.goal);
        self.action.extend_from_slice(&other.action);
        self.reward.extend_from_slice(&other.reward);
        self.done.extend_from_slice(&other.done);
        self.next_obs.extend_from_slice(&other.next_obs);
    }
}

/// Finished episodes, transition by transition, with where each episode ends: HER's future
/// goal for transition t is the achieved goal after a uniformly drawn step in [t, end).
struct Replay {
    n: usize,
    stored: Transitions,
    episode_end: Vec<usize>, // index one past the transition's episode
}

impl Replay {
    fn push_episode(&mut self, e: &Transitions) {
        let end = self.stored.len() + e.len();
        self.stored.append(e);
        self.episode_end
            .extend(std::iter::repeat(end).take(e.len()));
    }

    /// Uniform with replacement into `b` (the next achieved goal is the next state itself).
    fn sample(&self, rng: &mut Rng, b: &mut BatchData) {
        let (n, s, rows) = (self.n, &self.stored, &mut b.rows);
        for i in 0..rows.len() {
            let t = rng.below(s.len());
            let future = t + rng.below(self.episode_end[t] - t);
            let (to, from) = (i * n..(i + 1) * n, t * n..(t + 1) * n);
            rows.obs[to.clone()].copy_from_slice(&s.obs[from.clone()]);
            rows.goal[to.clone()].copy_from_slice(&s.goal[from.clone()]);
            rows.next_obs[to.clone()].copy_from_slice(&s.next_obs[from]);
            b.her_goal[to].copy_from_slice(&s.next_obs[future * n..(future + 1) * n]);
            rows.action[i] = s.action[t];
            rows.reward[i] = s.reward[t];
            rows.done[i] = s.done[t];
        }
    }
}

/// One batch: the sampled transitions and the HER goal of each.
struct BatchData {
    rows: Transitions,
    her_goal: Vec<f32>,
}

impl BatchData {
    fn batch(&self) -> Batch<'_> {
        let r = &self.rows;
        Batch {
            obs: &r.obs,
            goal: Some(&r.goal),
            action: &r.action,
            reward: &r.reward,
            done: &r.done,
            next_obs: &r.next_obs,
            next_achieved_goal: Some(&r.next_obs),
            her_goal: Some(&self.her_goal),
            regime: None,
        }
    }
}

/// `envs` bit-flipping environments stepped together, one `act` call per step for all.
struct Envs {
    n: usize,
    state: Vec<f32>,
    goal: Vec<f32>,
    t: Vec<usize>,
    episodes: Vec<Transitions>,
}

impl Envs {
    fn new(envs: usize, n: usize, rng: &mut Rng) -> Envs {
        let mut e = Envs {
            n,
            state: vec![0.0; envs * n],
            goal: vec![0.0; envs * n],
            t: vec![0; envs],
            episodes: (0..envs).map(|_| Transitions::default()).collect(),
        };
        for k in 0..envs {
            e.reset(k, rng);
        }
        e
    }

    fn reset(&mut self, k: usize, rng: &mut Rng) {
        let n = self.n;
        loop {
            let (s, g) = (rng.bits(n), rng.bits(n));
            if s != g {
                self.state[k * n..(k + 1) * n].copy_from_slice(&s);
                self.goal[k * n..(k + 1) * n].copy_from_slice(&g);
                break;
            }
        }
        self.t[k] = 0;
    }

    /// Apply one action per environment. Finished episodes go to `replay` when given;
    /// returns how many environments reached their goal on this step.
    fn step(&mut self, actions: &[i32], rng: &mut Rng, mut replay: Option<&mut Replay>) -> usize {
        let n = self.n;
        let mut reached = 0;
        for (k, &action) in actions.iter().enumerate() {
            let s = k * n..(k + 1) * n;
            let before = self.state[s.clone()].to_vec();
            let bit = k * n + action as usize;
            self.state[bit] = 1.0 - self.state[bit];
            let success = self.state[s.clone()] == self.goal[s.clone()];
            self.t[k] += 1;
            reached += success as usize;
            let ep = &mut self.episodes[k];
            ep.obs.extend_from_slice(&before);
            ep.goal.extend_from_slice(&self.goal[s.clone()]);
            ep.action.push(action);
            ep.reward.push(if success { 0.0 } else { -1.0 });
            ep.done.push(success as u8);
            ep.next_obs.extend_from_slice(&self.state[s]);
            if success || self.t[k] == n {
                let finished = std::mem::take(&mut self.episodes[k]);
                if let Some(r) = replay.as_deref_mut() {
                    r.push_episode(&finished);
                }
                self.reset(k, rng);
            }
        }
        reached
    }
}

/// Greedy success rate on `count` fresh start/goal pairs (episodes of at most n steps).
fn success_rate(p: &mut Pipeline, n: usize, count: usize, rng: &mut Rng) -> foxhunt::Result<f64> {
    let mut e = Envs::new(count, n, rng);
    let mut solved = vec![false; count];
    for _ in 0..n {
        let actions = p.act(&e.state, Some(&e.goal), 0.0)?;
        for k in 0..count {
            if solved[k] {
                continue;
            }
            let bit = k * n + actions[k] as usize;
            e.state[bit] = 1.0 - e.state[bit];
            solved[k] = e.state[k * n..(k + 1) * n] == e.goal[k * n..(k + 1) * n];
        }
    }
    Ok(solved.iter().filter(|&&s| s).count() as f64 / count as f64)
}

/// One training run; returns the success rate at every check.
fn train(
    lib: &std::sync::Arc<Library>,
    o: &Options,
    seed: u64,
    her: bool,
) -> foxhunt::Result<Vec<(usize, f64)>> {
    let cfg = config(lib, o, seed, her);
    let mut p = Pipeline::new(lib, &cfg)?;
    let n = o.bits;
    let envs = 16;
    let mut rng = Rng(seed ^ 0x00C0_FFEE);
    let mut eval_rng = Rng(seed ^ 0xE7A1);
    let mut e = Envs::new(envs, n, &mut rng);
    let mut replay = Replay {
        n,
        stored: Transitions::default(),
        episode_end: vec![],
    };
    let rows = cfg.batch_size as usize;
    let mut batch = BatchData {
        rows: Transitions::zeroed(rows, n),
        her_goal: vec![0.0; rows * n],
    };
    let mut curve = vec![];
    // Random episodes until a batch's worth of transitions is stored.
    while replay.stored.len() < rows {
        let actions = p.act(&e.state, Some(&e.goal), 1.0)?;
        e.step(&actions, &mut rng, Some(&mut replay));
    }
    for step in 1..=o.steps {
        // Exploration: 0.2 throughout, as in the paper's bit-flipping runs.
        let actions = p.act(&e.state, Some(&e.goal), 0.2)?;
        e.step(&actions, &mut rng, Some(&mut replay));
        replay.sample(&mut rng, &mut batch);
        p.upload(&batch.batch())?;
        p.step()?;
        if step % o.eval_every == 0 || step == o.steps {
            curve.push((step, success_rate(&mut p, n, 200, &mut eval_rng)?));
        }
    }
    Ok(curve)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let o = parse_options()?;
    let lib = Library::load()?;
    std::fs::create_dir_all(&o.out)?;
    let path = format!("{}/her_success.csv", o.out);
    let mut csv = File::create(&path)?;
    writeln!(csv, "her,seed,step,success_rate")?;
    println!(
        "bit flipping, n = {} bits, {} steps of batch 256 per run, success rate of the greedy \
         policy on 200 fresh goals (libfoxhunt {:?}, {})",
        o.bits,
        o.steps,
        lib.version(),
        lib.path()
    );
    let mut finals = vec![];
    for seed in 0..o.seeds {
        for her in [true, false] {
            let t0 = Instant::now();
            let curve = train(&lib, &o, seed, her)?;
            for (step, rate) in &curve {
                writeln!(csv, "{},{},{},{}", her as u8, seed, step, rate)?;
            }
            let shown: Vec<String> = curve.iter().map(|(_, r)| format!("{:.2}", r)).collect();
            println!(
                "seed {} HER {:3}: {}  ({:.1} s)",
                seed,
                if her { "on" } else { "off" },
                shown.join(" "),
                t0.elapsed().as_secs_f64()
            );
            finals.push((her, curve.last().map_or(0.0, |c| c.1)));
        }
    }
    let mean = |her: bool| {
        let v: Vec<f64> = finals.iter().filter(|f| f.0 == her).map(|f| f.1).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    println!(
        "final success rate, mean over seeds: HER on {:.2}, HER off {:.2}; wrote {}",
        mean(true),
        mean(false),
        path
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("her_bitflip: {}", e);
        std::process::exit(1);
    }
}
