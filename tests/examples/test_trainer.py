"""foxhunt-trainer as a user meets it: --help and --version without building, the files of a
run against the numbers it printed, the baselines against an independent float64
computation from the data file, the plots against the CSV files, and --resume after an
interruption against an uninterrupted run."""
import csv
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import time

import numpy as np
import pytest

from example_util import REPO, png_description

DATA = os.path.join(REPO, "examples", "data", "eustockmarkets.csv")
USAGE = os.path.join(REPO, "examples", "trainer", "usage.txt")
# The backend of the runs below: the CPU by default; FOXHUNT_TEST_BACKEND=cuda runs them on the
# GPU (the trainer's CUDA sizes at batch 32), as the oracle tests do.
BACKEND = os.environ.get("FOXHUNT_TEST_BACKEND", "cpu")
# A small run: 2 seeds, 4 checks each (a few seconds).
SMALL = ["--backend", BACKEND, "--steps", "40", "--batch", "32", "--seeds", "2",
         "--eval-every", "10", "--patience", "0"]


@pytest.fixture(scope="session")
def trainer(trainer, tmp_path_factory):
    """The trainer, or a skip when FOXHUNT_TEST_BACKEND asks for a backend it cannot have."""
    if BACKEND != "cpu":
        r = subprocess.run([trainer, "--backend", BACKEND, "--steps", "1", "--batch", "8",
                            "--seeds", "1", "--quiet",
                            "--out", str(tmp_path_factory.mktemp("probe"))],
                           capture_output=True, text=True)
        if "FH_ERR_NO_CUDA" in r.stderr:
            pytest.skip("no CUDA here: " + r.stderr.strip())
    return trainer


def env():
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return e


def run_trainer(trainer, out, *args):
    r = subprocess.run([trainer, *SMALL, "--out", str(out), *args], capture_output=True,
                       text=True, env=env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---- --help and --version ---------------------------------------------------------------

def test_help_and_version_build_nothing(tmp_path):
    """run-example.sh --help answers from the sources in well under a second, in a checkout
    where nothing is built yet, and creates nothing."""
    for rel in ("scripts/run-example.sh", "examples/trainer/usage.txt", "include/foxhunt.h"):
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(REPO, rel), tmp_path / rel)
    before = sorted(os.listdir(tmp_path))
    t0 = time.monotonic()
    r = subprocess.run(["bash", "scripts/run-example.sh", "--help"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=10)
    seconds = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert r.stdout == open(USAGE).read()
    assert seconds < 1.0, seconds
    v = subprocess.run(["bash", "scripts/run-example.sh", "--version"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=10)
    assert v.returncode == 0 and "not built yet" in v.stdout
    header = open(os.path.join(REPO, "include", "foxhunt.h")).read()
    version = ".".join(re.search(r"#define FOXHUNT_VERSION_%s (\d+)" % k, header).group(1)
                       for k in ("MAJOR", "MINOR", "PATCH"))
    assert ("foxhunt-trainer %s " % version) in v.stdout
    assert sorted(os.listdir(tmp_path)) == before  # no build/ appeared


def test_trainer_help_is_usage_txt_and_version_names_the_library(trainer):
    r = subprocess.run([trainer, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == open(USAGE).read()
    v = subprocess.run([trainer, "--version"], capture_output=True, text=True)
    assert v.returncode == 0
    assert re.match(r"foxhunt-trainer \d+\.\d+\.\d+ .*libfoxhunt \d+\.\d+\.\d+ loaded", v.stdout)


@pytest.mark.parametrize("args,message", [
    (["--steps", "0"], "--steps wants an integer in [1,"),
    (["--seeds", "x"], "--seeds wants an integer"),
    (["--gamma", "1.5"], "--gamma wants a number in [0, 1]"),
    (["--math", "fp16"], "--math wants tf32, strict or bf16, got 'fp16'"),
    (["--bogus"], "unknown option '--bogus'"),
    (["--resume", "--steps", "5"], "--steps cannot change them"),
])
def test_bad_arguments_are_named(trainer, tmp_path, args, message):
    r = subprocess.run([trainer, "--out", str(tmp_path), *args], capture_output=True, text=True)
    assert r.returncode == 1
    assert message in r.stderr


def test_cuda_without_a_device_writes_nothing(trainer, tmp_path):
    """--backend cuda with no usable device fails before any file of the run is written."""
    out = tmp_path / "run"
    r = subprocess.run([trainer, "--backend", "cuda", "--steps", "1", "--batch", "8", "--seeds",
                        "1", "--quiet", "--out", str(out)], capture_output=True, text=True)
    if "FH_ERR_NO_CUDA" not in r.stderr:
        pytest.skip("a CUDA device is usable here")
    assert r.returncode == 1
    assert "--backend cpu trains on the CPU" in r.stderr
    assert not out.exists()


def test_resume_names_a_bad_line_of_options_txt(trainer, tmp_path):
    """A bad value in a run's options.txt is refused on --resume with the file and line named."""
    out = tmp_path / "run"
    r = subprocess.run([trainer, "--backend", "cpu", "--steps", "2", "--seeds", "1", "--batch",
                        "64", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    opts = (out / "options.txt").read_text().splitlines()
    line = next(i for i, l in enumerate(opts) if l.startswith("math ")) + 1
    opts[line - 1] = "math fp16"
    (out / "options.txt").write_text("\n".join(opts) + "\n")
    r = subprocess.run([trainer, "--resume", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "%s:%d: --math wants tf32, strict or bf16, got 'fp16'" % (out / "options.txt", line) \
        in r.stderr


@pytest.mark.parametrize("args", [["--math", "BF16"], ["--math", "Strict"], ["--backend", "CPU"]])
def test_mode_names_in_any_case(trainer, tmp_path, args):
    """As the Python binding: the names are taken in any case. Options are read in order, so the
    bad --steps after them is the only complaint."""
    r = subprocess.run([trainer, "--out", str(tmp_path), *args, "--steps", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "--steps wants an integer in [1," in r.stderr
    assert args[0] + " wants" not in r.stderr


# ---- an independent reference for the baselines -------------------------------------------

def reference_market():
    """Closes, log returns (row i: into day i) and the periods' decision days [from, to], from
    the CSV in float64 numpy, written from the trainer's documentation (usage.txt, trainer.c's
    header), not its code."""
    raw = np.loadtxt(DATA, delimiter=",", skiprows=1)
    year, price = raw[:, 0], raw[:, 1:]
    ret = np.vstack([np.zeros((1, 4)), np.diff(np.log(price), axis=0)])
    first = 31  # a full window of 31 daily returns
    valid = int(np.argmax(year >= 1996 - 1e-9))
    test = int(np.argmax(year >= 1997 - 1e-9))
    n = len(year)
    periods = {"train": (first, valid - 2), "valid": (valid - 1, test - 2),
               "test": (test - 1, n - 2)}
    return price, ret, periods


def reference_baselines():
    """Buy & hold, flat and momentum on the three periods."""
    price, ret, periods = reference_market()

    def run(policy, lo, hi):
        pos = np.zeros(4)
        daily, trades = [], 0
        for d in range(lo, hi + 1):
            new = policy(d)
            trades += int(np.count_nonzero(new != pos))
            daily.append(np.mean(new * ret[d + 1] - 0.0005 * np.abs(new - pos)))
            pos = new
        daily = np.array(daily)
        sd = daily.std()
        return dict(log_return=daily.sum(), sharpe=daily.mean() / sd * math.sqrt(252) if sd else 0.0,
                    trades=trades, days=len(daily))

    policies = {"buy_hold": lambda d: np.ones(4), "flat": lambda d: np.zeros(4),
                "momentum": lambda d: np.sign(price[d] - price[d - 31])}
    return {(per, k): run(f, *periods[per]) for per in periods for k, f in policies.items()}


# ---- one run's files against its output ---------------------------------------------------

@pytest.fixture(scope="module")
def small_run(trainer, tmp_path_factory):
    out = tmp_path_factory.mktemp("trainer")
    stdout = run_trainer(trainer, out)
    return out, stdout


def test_summary_baselines_match_an_independent_computation(small_run):
    out, _ = small_run
    ref = reference_baselines()
    rows = [r for r in read_csv(out / "summary.csv") if r["strategy"] != "agent"]
    assert len(rows) == 9
    for r in rows:
        want = ref[(r["period"], r["strategy"])]
        assert int(r["days"]) == want["days"] and int(r["trades"]) == want["trades"], r
        assert float(r["log_return"]) == pytest.approx(want["log_return"], rel=2e-8, abs=1e-12)
        assert float(r["sharpe"]) == pytest.approx(want["sharpe"], rel=2e-8, abs=1e-12)
        assert float(r["return_pct"]) == pytest.approx(100 * math.expm1(want["log_return"]),
                                                       rel=1e-8, abs=1e-10)
    # the data set's known answer: buy & hold out of sample, as the README quotes it
    assert 100 * math.expm1(ref[("test", "buy_hold")]["log_return"]) == pytest.approx(72.57, abs=0.005)


def test_checkpoint_evaluation_matches_the_check_that_chose_it(small_run):
    """summary.csv evaluates best.ckpt, reloaded; the learning curve recorded the same policy
    live at its step: the validation and training numbers must agree exactly, and the step
    must be the curve's first best validation Sharpe."""
    out, _ = small_run
    curve = read_csv(out / "learning_curve.csv")
    agent = [r for r in read_csv(out / "summary.csv") if r["strategy"] == "agent"]
    for seed in ("0", "1"):
        rows = [r for r in curve if r["seed"] == seed]
        assert [int(r["step"]) for r in rows] == [10, 20, 30, 40]
        sharpe = [float(r["valid_sharpe"]) for r in rows]
        best = rows[sharpe.index(max(sharpe))]
        mine = {r["period"]: r for r in agent if r["seed"] == seed}
        assert all(int(r["best_step"]) == int(best["step"]) for r in mine.values())
        assert float(mine["valid"]["sharpe"]) == float(best["valid_sharpe"])
        assert float(mine["valid"]["log_return"]) == float(best["valid_log_return"])
        assert float(mine["train"]["sharpe"]) == float(best["train_sharpe"])
        for name in ("best.ckpt", "latest.ckpt", "trainer.state"):
            assert os.path.getsize(out / ("seed-" + seed) / name) > 0


def test_equity_and_printed_tables_hold_the_summary(small_run):
    out, stdout = small_run
    summary = read_csv(out / "summary.csv")
    test = {(r["strategy"], r["seed"]): r for r in summary if r["period"] == "test"}
    equity = read_csv(out / "equity.csv")
    assert len(equity) == int(test[("buy_hold", "")]["days"]) + 1
    assert float(equity[0]["year"]) < 1997 <= float(equity[1]["year"])
    for column in equity[0]:
        if column == "year":
            continue
        key = ("agent", column[len("agent_seed_"):]) if column.startswith("agent") else (column, "")
        values = np.array([float(r[column]) for r in equity])
        assert values[0] == 1.0
        assert values[-1] == pytest.approx(math.exp(float(test[key]["log_return"])), rel=1e-8)
        daily = np.diff(np.log(values))
        sharpe = daily.mean() / daily.std() * math.sqrt(252) if daily.std() > 0 else 0.0
        assert sharpe == pytest.approx(float(test[key]["sharpe"]), rel=1e-5, abs=1e-9)
    # the printed out-of-sample line: mean ± sd (n - 1) of the seeds' returns
    pct = [float(test[("agent", s)]["return_pct"]) for s in ("0", "1")]
    m = re.search(r"OUT OF SAMPLE.*?agent, 2 seeds\s+([-+]\d+\.\d+) ± +(\d+\.\d+)", stdout, re.S)
    assert m, stdout
    assert float(m.group(1)) == pytest.approx(np.mean(pct), abs=0.006)
    assert float(m.group(2)) == pytest.approx(np.std(pct, ddof=1), abs=0.006)
    beat = sum(p > float(test[("buy_hold", "")]["return_pct"]) for p in pct)
    assert "beat buy & hold out of sample in %d of 2 seeds" % beat in stdout
    # out of sample comes first, in-sample last and labelled as such
    assert stdout.index("OUT OF SAMPLE") < stdout.index("Validation") < stdout.index("In sample")
    assert "Sharpe: annualised" in stdout


def test_plots_are_drawn_from_the_run(small_run, python_with_matplotlib):
    out, _ = small_run
    r = subprocess.run([python_with_matplotlib, os.path.join(REPO, "examples", "plot.py"),
                        str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    equity = read_csv(out / "equity.csv")
    assert png_description(out / "equity.png") == pytest.approx(
        {c: float(v) for c, v in equity[-1].items() if c != "year"}, rel=1e-12)
    curve = read_csv(out / "learning_curve.csv")
    agent = {r["seed"]: r for r in read_csv(out / "summary.csv")
             if r["strategy"] == "agent" and r["period"] == "valid"}
    shown = png_description(out / "learning_curve.png")
    assert set(shown) == {"0", "1"}
    for seed, s in shown.items():
        assert s["checks"] == sum(r["seed"] == seed for r in curve)
        assert s["best_step"] == int(agent[seed]["best_step"])
        assert s["best_valid_sharpe"] == pytest.approx(float(agent[seed]["sharpe"]), rel=1e-12)


def read_replay(seed_dir):
    """The replay section of latest.ckpt (SPEC §2.1; docs/design.md "Checkpoints": best.ckpt's
    bytes before its checksum, then K, E, rows inserted, then the valid rows oldest first,
    field by field, [N, E, ...] each). With goal_dim = 0 and obs_dim 128, 4 branches."""
    data = open(seed_dir / "latest.ckpt", "rb").read()
    at = os.path.getsize(seed_dir / "best.ckpt") - 8
    K, E, n_ins = struct.unpack_from("<IIQ", data, at)
    N = min(n_ins, K)
    fields = [("obs", "<f4", 128), ("action", "<i4", 4), ("reward", "<f4", 1),
              ("done", "u1", 1), ("next_obs", "<f4", 128), ("regime", "<i4", 1),
              ("episode_end", "u1", 1)]
    rows, pos = {}, at + 16
    for name, dtype, width in fields:
        count = N * E * width
        a = np.frombuffer(data, dtype=dtype, count=count, offset=pos)
        rows[name] = a.reshape(N, E, width) if width > 1 else a.reshape(N, E)
        pos += a.nbytes
    assert pos + 8 == len(data)  # only the checksum follows
    return K, E, n_ins, rows


def test_replay_holds_the_documented_transitions(small_run):
    """The rows the trainer inserted, read back from latest.ckpt, against the environment as
    trainer.c's header documents it, recomputed in float64 numpy: the environments (4 on the
    CPU, 64 on CUDA) start at spread-out training days and step through the training period in
    lockstep; obs = the last 31 daily log returns x 100 and the positions held, s' the next
    day's with the new positions (action - 1), the reward 100 x the sleeves' return net of 5 bp
    per unit of change, the regime the quartile of the 20-day volatility (thresholds from the
    training days), and the period's last day ends the episode, terminally, the environment
    starting over flat."""
    out, _ = small_run
    price, ret, periods = reference_market()
    lo, hi = periods["train"]
    K, E, n_ins, rows = read_replay(out / "seed-0")
    assert E == {"cpu": 4, "cuda": 64}[BACKEND]
    days = hi - lo + 1
    assert K * E == 1 << 18
    assert n_ins == -(-days // E) + 40  # warm-up: one pass over the training days; 40 steps
    vol = np.zeros(len(ret))
    for i in range(20, len(ret)):
        vol[i] = ret[i - 19:i + 1].std(axis=0).mean()
    train_vol = np.sort(vol[lo:hi + 2])  # the days before 1996
    thresholds = [train_vol[len(train_vol) * q // 4] for q in (1, 2, 3)]

    def features(d):
        return (100 * ret[d - 30:d + 1]).astype(np.float32).ravel()

    for e in range(E):
        day, pos = lo + days * e // E, np.zeros(4)
        for n in range(n_ins):
            new = rows["action"][n, e] - 1.0
            np.testing.assert_allclose(rows["obs"][n, e], np.r_[features(day), pos], rtol=1e-6)
            np.testing.assert_allclose(rows["next_obs"][n, e], np.r_[features(day + 1), new],
                                       rtol=1e-6)
            want = 100 * np.sum(new * ret[day + 1] - 0.0005 * np.abs(new - pos))
            assert rows["reward"][n, e] == pytest.approx(want, rel=1e-6, abs=1e-6)
            assert rows["regime"][n, e] == sum(vol[day] >= t for t in thresholds)
            end = day == hi
            assert rows["done"][n, e] == end and rows["episode_end"][n, e] == end
            day, pos = (lo, np.zeros(4)) if end else (day + 1, new)


# ---- interruption and --resume ------------------------------------------------------------

def test_resume_after_an_interrupt_continues_bit_for_bit(trainer, tmp_path):
    """SIGINT stops at a step boundary after saving; --resume then ends exactly where an
    uninterrupted run ends: the same checkpoints byte for byte and the same CSV files."""
    args = ["--steps", "150"]
    run_trainer(trainer, tmp_path / "straight", *args)
    cut = tmp_path / "cut"
    proc = subprocess.Popen([trainer, *SMALL, "--out", str(cut), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    deadline = time.monotonic() + 120
    while not (cut / "learning_curve.csv").exists() and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and "--resume --out" in err
    r = subprocess.run([trainer, "--resume", "--out", str(cut), "--quiet"], capture_output=True,
                       text=True, env=env(), timeout=300)
    assert r.returncode == 0, r.stderr
    for name in ("summary.csv", "learning_curve.csv", "equity.csv", "seed-0/best.ckpt",
                 "seed-0/latest.ckpt", "seed-1/best.ckpt", "seed-1/latest.ckpt"):
        with open(tmp_path / "straight" / name, "rb") as a, open(cut / name, "rb") as b:
            assert a.read() == b.read(), name
