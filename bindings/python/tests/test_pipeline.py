"""foxhunt.Pipeline against the library: config keywords, upload checks, step, act, metrics,
tensors, read/write, checkpoints, errors and lifetime."""
import os
import re
import warnings

import numpy as np
import pytest

from fh_testdata import SMALL, make_batch


# ---- config ---------------------------------------------------------------------------------

def test_unknown_keyword_is_type_error(fh):
    with pytest.raises(TypeError, match="batchsize"):
        fh.Pipeline(batchsize=64)


def test_wrong_types_and_ranges_refused_before_the_call(fh):
    with pytest.raises(TypeError):
        fh.Pipeline(**dict(SMALL, batch_size=16.0))
    with pytest.raises(TypeError):
        fh.Pipeline(**dict(SMALL, gamma="high"))
    # A value the C field cannot hold is named with the field's type; the library checks the
    # valid range of what it can hold (batch_size in [1, 1048576]).
    with pytest.raises(ValueError, match=re.escape(
            "batch_size=-1 does not fit fh_config.batch_size (uint32_t, [0, 4294967295])")):
        fh.Pipeline(**dict(SMALL, batch_size=-1))
    with pytest.raises(fh.FoxhuntError, match=r"config.batch_size = 0 is outside \[1, 1048576\]"):
        fh.Pipeline(**dict(SMALL, batch_size=0))
    # bool is an int in Python: a flag takes one, a size does not (True would be a batch of 1).
    with pytest.raises(TypeError, match=re.escape("batch_size=True: expected an int, not a bool")):
        fh.Pipeline(**dict(SMALL, batch_size=True))
    with pytest.raises(ValueError):
        fh.Pipeline(**dict(SMALL, her_reward="medium"))
    with pytest.raises(ValueError):
        fh.Pipeline(**dict(SMALL, sn_layers=["W3"]))
    # The float fields are float32: a value they cannot hold is refused, not turned into 0 or inf.
    with pytest.raises(ValueError, match=r"lr_q=1e-300 underflows float32 to 0"):
        fh.Pipeline(**dict(SMALL, lr_q=1e-300))
    with pytest.raises(ValueError, match=r"clip_norm=1e\+300 overflows float32"):
        fh.Pipeline(**dict(SMALL, clip_norm=1e300))
    with pytest.raises(ValueError, match="overflows float32"):
        fh.Pipeline(**dict(SMALL, clip_norm=10 ** 400))


@pytest.mark.parametrize("override,status", [
    (dict(gamma=1.5), "ERR_BAD_VALUE"),
    (dict(batch_size=0), "ERR_BAD_DIMENSION"),
    (dict(obs_dim=9), "ERR_INDIVISIBLE"),
    # An NCCL communicator (SPEC §9) on the CPU backend; the address is never dereferenced.
    (dict(nccl_comm=0x1000), "ERR_UNSUPPORTED"),
])
def test_library_refusals_are_foxhunt_errors(fh, override, status):
    with pytest.raises(fh.FoxhuntError) as ei:
        fh.Pipeline(**dict(SMALL, **override))
    e = ei.value
    assert e.status == getattr(fh.Status, status)
    assert e.name == "FH_" + status
    assert e.message and str(e).startswith("FH_" + status)
    if "gamma" in override or "nccl_comm" in override:
        assert next(iter(override)) in e.message


def test_cuda_backend_or_no_cuda_error(fh):
    """backend='cuda' gives a CUDA pipeline where a device is usable, else FH_ERR_NO_CUDA with
    the reason; 'auto' gives whichever of the two exists."""
    try:
        p = fh.Pipeline(**dict(SMALL, backend="cuda"))
    except fh.FoxhuntError as e:
        assert e.status == fh.Status.ERR_NO_CUDA and e.message
        with fh.Pipeline(**dict(SMALL, backend="auto")) as q:
            assert q.backend == "cpu"
        return
    with p:
        assert p.backend == "cuda"
        with fh.Pipeline(**dict(SMALL, backend="auto")) as q:
            assert q.backend == "cuda"


def test_enum_names_and_sn_layers(fh):
    with fh.Pipeline(**dict(SMALL, her_reward="dense", sn_layers=("W1", "W2"),
                            her_terminal_on_success=False)) as p:
        c = p.config
        assert (c["her_reward"], c["sn_layers"], c["her_terminal_on_success"]) == ("dense", 3, 0)
        names = [n for n, _, _ in p.tensors()]
        assert "sn.u.W1" in names and "sn.u.W2" in names
    assert fh.status_string(6).startswith("FH_ERR_NON_FINITE")
    # A single name is that one layer, not its characters.
    for layers, bits in (("W1", 1), ("W2", 2), (["W1"], 1), ((), 0), (3, 3)):
        with fh.Pipeline(**dict(SMALL, sn_layers=layers)) as p:
            assert p.config["sn_layers"] == bits
    with pytest.raises(ValueError, match="sn_layers: 'W3' is not 'W1' or 'W2'"):
        fh.Pipeline(**dict(SMALL, sn_layers="W3"))


def test_backend_and_repr(fh, pipe):
    assert pipe.backend == "cpu"
    assert pipe.config["backend"] == "cpu"  # as .backend says it, and as Pipeline() takes it
    with fh.Pipeline(**pipe.config) as same:
        assert same.config == pipe.config
    assert "B=16" in repr(pipe)


# ---- upload ---------------------------------------------------------------------------------

def test_upload_accepts_any_real_dtype_and_converts(pipe):
    b = make_batch()
    b["obs"] = b["obs"].astype(np.float64)           # converted to float32
    b["action"] = b["action"].astype(np.int64)        # to int32
    b["done"] = b["done"].astype(np.int16)            # to uint8
    b["regime"] = b["regime"].astype(np.uint8)
    b["reward"] = np.asfortranarray(b["reward"])
    b["next_obs"] = np.asfortranarray(b["next_obs"])  # made C-contiguous
    pipe.upload(**b)
    pipe.step()
    assert pipe.metrics()["step"] == 1


def test_float_done_as_gym_returns_it(fh, pipe):
    """done as float 0.0/1.0 (gym's habit) trains exactly as the uint8 flags do."""
    b = make_batch()
    b["done"][::3] = 1
    with fh.Pipeline(**pipe.config) as twin:
        pipe.upload(**b)
        twin.upload(**dict(b, done=b["done"].astype(np.float32)))
        pipe.step()
        twin.step()
        assert pipe.metrics() == twin.metrics()
    for bad in (0.5, 2.0, np.nan):
        done = b["done"].astype(np.float64)
        done[7] = bad
        with pytest.raises(ValueError, match=r"done\[7\] = .*must be 0.0 or 1.0"):
            pipe.upload(**dict(b, done=done))
    # A float done of the wrong shape gets the shape error, as an integer one does.
    for dtype in (np.float64, np.float32, np.int32):
        for shape in ((9,), (16, 1)):
            with pytest.raises(ValueError, match=re.escape(
                    "done: expected shape (16,), got %s" % (shape,))):
                pipe.upload(**dict(b, done=np.zeros(shape, dtype)))


@pytest.mark.parametrize("key,value,exc", [
    ("obs", np.zeros((16, 7)), ValueError),
    ("obs", np.zeros((15, 8)), ValueError),
    ("action", np.zeros((16, 2), np.float32), TypeError),
    ("action", np.zeros(16, np.int32), ValueError),
    ("reward", np.zeros((16, 1)), ValueError),
    ("goal", np.zeros((16, 3)), ValueError),
    ("done", np.full(16, 300), ValueError),
    ("action", np.full((16, 2), 2**40), ValueError),
    ("obs", np.array([["a"] * 8] * 16), TypeError),
])
def test_upload_shape_and_dtype_checked_before_the_call(pipe, key, value, exc):
    b = make_batch()
    b[key] = value
    with pytest.raises(exc):
        pipe.upload(**b)


def test_float64_beyond_float32_named_not_turned_into_inf(pipe):
    b = make_batch()
    b["next_obs"] = np.array(b["next_obs"], dtype=np.float64)
    b["next_obs"][5, 3] = -1e39
    with pytest.raises(ValueError, match=r"next_obs\[5, 3\] = -1e\+39 overflows float32"):
        pipe.upload(**b)
    b["next_obs"][5, 3] = np.inf  # a real infinity is the library's to refuse
    with pytest.raises(Exception, match="not finite"):
        pipe.upload(**b)
    if np.finfo(np.longdouble).max > 1e4000:  # an x86 long double holds 1e4000
        b["next_obs"] = np.array(make_batch()["next_obs"], dtype=np.longdouble)
        b["next_obs"][2, 1] = np.longdouble("1e4000")
        with pytest.raises(ValueError, match=r"next_obs\[2, 1\] = 1e\+4000 overflows float32"):
            pipe.upload(**b)


def test_ragged_array_named(pipe):
    b = make_batch()
    rows = [list(r) for r in b["obs"]]
    rows[3] = rows[3][:-1]  # one row short
    b["obs"] = rows
    with pytest.raises(ValueError, match=r"^obs: not a rectangular array"):
        pipe.upload(**b)


def test_missing_goal_refused(pipe):
    b = make_batch()
    del b["her_goal"]
    with pytest.raises(TypeError, match="her_goal"):
        pipe.upload(**b)


@pytest.mark.parametrize("key,index,value,status", [
    ("obs", (3, 2), np.nan, "ERR_NON_FINITE"),
    ("her_goal", (0, 1), np.inf, "ERR_NON_FINITE"),
    ("reward", 5, -np.inf, "ERR_NON_FINITE"),
    ("action", (4, 1), 3, "ERR_OUT_OF_RANGE"),
    ("action", (4, 0), -1, "ERR_OUT_OF_RANGE"),
    ("regime", 2, 2, "ERR_OUT_OF_RANGE"),
    ("done", 1, 2, "ERR_OUT_OF_RANGE"),
])
def test_bad_values_refused_by_library_and_change_nothing(fh, pipe, key, index, value, status):
    good = make_batch(seed=1)
    pipe.upload(**good)
    b = make_batch(seed=2)
    b[key] = np.array(b[key], dtype=np.float64 if b[key].dtype.kind == "f" else np.int64)
    b[key][index] = value
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.upload(**b)
    assert ei.value.status == getattr(fh.Status, status)
    pipe.step()  # trains on the previous (good) batch
    with fh.Pipeline(**SMALL) as q:
        q.upload(**good)
        q.step()
        assert q.metrics()["td_loss"] == pipe.metrics()["td_loss"]


def test_step_without_batch(fh, pipe):
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.step()
    assert ei.value.status == fh.Status.ERR_NO_BATCH


def test_no_goal_config(fh):
    cfg = dict(SMALL, goal_dim=0)
    with fh.Pipeline(**cfg) as p:
        b = make_batch(cfg)
        p.upload(**b)
        p.step()
        assert p.metrics()["num_relabelled"] == 0
        with pytest.raises(ValueError):
            p.upload(**dict(b, goal=np.zeros((16, 2))))
        assert p.act(np.zeros(8)).shape == (2,)


# ---- step outputs -----------------------------------------------------------------------------

def test_metrics_timings_memory(pipe):
    m = pipe.metrics()
    assert m["step"] == 0 and m["td_loss"] == 0.0
    pipe.upload(**make_batch())
    pipe.step()
    pipe.step()
    m = pipe.metrics()
    assert m["step"] == 2 and np.isfinite(m["td_loss"]) and m["td_loss"] > 0
    assert set(m) >= {"td_loss", "q_mean", "cql_loss", "iql_loss_hi", "iql_loss_lo", "iqn_loss",
                      "attn_loss", "conf_loss", "grad_norm", "sigma", "sigma_target",
                      "ensemble_std", "num_relabelled", "regime_scale"}
    t = pipe.timings()
    assert set(t) == {"her_ms", "spectral_ms", "ddqn_ms", "forward_ms", "aux_ms", "adam_ms",
                      "total_ms", "aux_ema_ms", "aux_iql_ms", "aux_iqn_ms", "aux_attn_ms",
                      "aux_tail_ms", "sample_ms"}
    assert t["total_ms"] > 0 and t["sample_ms"] == 0  # no replay
    mem = pipe.memory()
    assert mem["total"] >= mem["parameters"] > 0 and mem["replay"] == 0


def test_tensors_read_shapes(pipe):
    listed = pipe.tensors()
    shapes = {n: s for n, s, _ in listed}
    groups = {n: g for n, _, g in listed}
    assert shapes["q.W1"] == (16, 10) and shapes["q.b1"] == (16,) and shapes["q.w_u"] == (16,)
    assert shapes["q.b_u"] == (1,) and shapes["attn.P"] == (3, 8) and shapes["q.U.1"] == (3, 8)
    assert shapes["d_states"] == (16, 10) and shapes["confidence"] == (16,)
    assert shapes["sn.u.W2"] == (16,) and shapes["regime.s"] == (2,)
    assert groups["q.W1"] == "q" and groups["target.q.W1"] == "q_target"
    assert groups["iql_lo.W1"] == "iql_lo" and groups["d_states"] == "output"
    for n, s, _ in listed:
        a = pipe.read(n)
        assert a.shape == s and a.dtype == np.float32


def test_write_then_read(fh, pipe):
    w = np.arange(16 * 10, dtype=np.float64).reshape(16, 10) / 100
    pipe.write("q.W1", w)
    assert np.array_equal(pipe.read("q.W1"), w.astype(np.float32))
    pipe.write("q.b_u", [0.5])
    assert pipe.read("q.b_u")[0] == 0.5
    pipe.write("q.w_u", np.ones((1, 16)))  # a row as [1, n] is accepted
    pipe.write("q.W1", w.ravel()[::-1].copy())  # and a flat array, row-major
    assert np.array_equal(pipe.read("q.W1"), w.ravel()[::-1].reshape(16, 10).astype(np.float32))
    pipe.write("q.W1", w)
    with pytest.raises(ValueError):
        pipe.write("q.W1", np.zeros((10, 16)))
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.write("no.such", np.zeros(3))
    assert ei.value.status == fh.Status.ERR_UNKNOWN_NAME
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.read("no.such")
    assert ei.value.status == fh.Status.ERR_UNKNOWN_NAME
    with pytest.raises(fh.FoxhuntError):
        pipe.write("d_states", np.zeros((16, 10)))  # read-only output
    bad = np.zeros(16)
    bad[3] = np.nan
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.write("q.b1", bad)
    assert ei.value.status == fh.Status.ERR_NON_FINITE
    # A float64 beyond float32's range is named, with no numpy warning on the way.
    bad[3] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"q.b1\[3\] = 1e\+300 overflows float32"):
            pipe.write("q.b1", bad)
    for name in (None, b"q.W1", 3):
        with pytest.raises(TypeError, match="name: expected a str"):
            pipe.read(name)
        with pytest.raises(TypeError, match="name: expected a str"):
            pipe.write(name, np.zeros(3))


def test_act(fh, pipe):
    rng = np.random.default_rng(0)
    obs, goal = rng.standard_normal((5, 8)), rng.standard_normal((5, 2))
    a = pipe.act(obs, goal)
    assert a.shape == (5, 2) and a.dtype == np.int32 and ((0 <= a) & (a < 3)).all()
    a2, q = pipe.act(obs, goal, return_q=True)
    assert np.array_equal(a, a2) and q.shape == (5, 2, 3)
    assert np.array_equal(a, q.argmax(axis=2))
    one, q1 = pipe.act(obs[0], goal[0], return_q=True)
    assert one.shape == (2,) and q1.shape == (2, 3) and np.array_equal(one, a[0])
    with pytest.raises(TypeError):
        pipe.act(obs)  # goal required
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.act(obs, goal, epsilon=1.5)
    assert ei.value.status == fh.Status.ERR_BAD_VALUE
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.act(np.full((5, 8), np.nan), goal)
    assert ei.value.status == fh.Status.ERR_NON_FINITE


def test_act_epsilon_checked_as_a_float32(fh, pipe):
    """epsilon is a float32, checked as the config's float fields: a value that would reach the
    library as inf or 0, or rounded into [0, 1], is refused by its value as given, and the
    refused call changes nothing (the act counter that seeds exploration included)."""
    obs, goal = np.ones((4, 8)), np.ones((4, 2))
    for eps, msg in ((1e300, "epsilon=1e+300 overflows float32"),
                     (10 ** 400, "epsilon=%d overflows float32" % 10 ** 400),
                     (1e-50, "epsilon=1e-50 underflows float32 to 0"),
                     (-1e-50, "epsilon=-1e-50 underflows float32 to 0"),
                     (1 + 1e-9, "epsilon=1.000000001 is outside [0, 1]")):
        with pytest.raises(ValueError, match=re.escape(msg)):
            pipe.act(obs, goal, epsilon=eps)
    with pytest.raises(TypeError, match="epsilon='0.5': expected a real number"):
        pipe.act(obs, goal, epsilon="0.5")
    with fh.Pipeline(**SMALL) as twin:
        for _ in range(3):
            assert np.array_equal(pipe.act(obs, goal, epsilon=0.5),
                                  twin.act(obs, goal, epsilon=0.5))
    assert pipe.act(obs, goal, epsilon=np.float32(1.0)).shape == (4, 2)
    assert pipe.act(obs, goal, epsilon=1).shape == (4, 2)


# ---- checkpoints ------------------------------------------------------------------------------

def test_save_load_continues_bit_for_bit(fh, tmp_path):
    path = tmp_path / "a.ckpt"
    b1, b2 = make_batch(seed=1), make_batch(seed=2)
    with fh.Pipeline(**SMALL) as p, fh.Pipeline(**SMALL) as q:
        p.upload(**b1)
        p.step()
        p.act(np.zeros((2, 8)), np.zeros((2, 2)), epsilon=0.5)
        p.save(path)
        q.load(str(path))
        for x in (p, q):
            x.upload(**b2)
            x.step()
        assert p.metrics() == q.metrics()
        for n, _, _ in p.tensors():
            assert np.array_equal(p.read(n), q.read(n)), n
        obs = np.ones((4, 8))
        assert np.array_equal(p.act(obs, np.ones((4, 2)), epsilon=0.5),
                              q.act(obs, np.ones((4, 2)), epsilon=0.5))


def test_load_errors(fh, tmp_path):
    with fh.Pipeline(**SMALL) as p:
        with pytest.raises(fh.FoxhuntError) as ei:
            p.load(tmp_path / "missing.ckpt")
        assert ei.value.status == fh.Status.ERR_IO
        p.save(tmp_path / "ok.ckpt")
        data = (tmp_path / "ok.ckpt").read_bytes()
        (tmp_path / "short.ckpt").write_bytes(data[: len(data) // 2])
        with pytest.raises(fh.FoxhuntError) as ei:
            p.load(tmp_path / "short.ckpt")
        assert ei.value.status == fh.Status.ERR_CHECKPOINT_TRUNCATED
        with fh.Pipeline(**dict(SMALL, trunk_hidden=32)) as other:
            with pytest.raises(fh.FoxhuntError) as ei:
                other.load(tmp_path / "ok.ckpt")
            assert ei.value.status == fh.Status.ERR_CHECKPOINT_CONFIG


def test_nul_in_a_path_or_name_refused_before_the_call(fh, pipe, tmp_path):
    """A NUL would cut the C string short ('y.ck\\0zzz' saved as y.ck, 'q.W1\\0junk' read as
    q.W1): a path or tensor name with one is a ValueError naming it, as in open()."""
    bad = str(tmp_path / "y.ck") + "\0zzz"
    for path in (bad, os.fsencode(bad)):
        msg = re.escape("path=%r: embedded null byte" % (path,))
        for call in (pipe.save, lambda p: pipe.save(p, include_replay=True), pipe.dump_graph):
            with pytest.raises(ValueError, match=msg):
                call(path)
        assert os.listdir(tmp_path) == []
        pipe.save(tmp_path / "y.ck")
        with pytest.raises(ValueError, match=msg):
            pipe.load(path)
        os.remove(tmp_path / "y.ck")
    before = pipe.read("q.W1")
    for name in ("q.W1\0junk", "\0"):
        msg = re.escape("name=%r: embedded null byte" % (name,))
        with pytest.raises(ValueError, match=msg):
            pipe.read(name)
        with pytest.raises(ValueError, match=msg):
            pipe.write(name, np.zeros((16, 10)))
    assert np.array_equal(pipe.read("q.W1"), before)


# ---- lifetime ---------------------------------------------------------------------------------

def test_close_and_context_manager(fh):
    p = fh.Pipeline(**SMALL)
    with p:
        assert not p.closed
    assert p.closed
    p.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        p.step()
    assert "closed" in repr(p)


def test_close_while_another_thread_steps(fh):
    """The C pipeline is not thread-safe and ctypes drops the GIL during a call: closing from one
    thread while another steps must wait for the step, not destroy the handle under it (that
    crashed the interpreter before the binding took a lock). The stepping thread then sees a
    closed pipeline."""
    import threading
    import time

    p = fh.Pipeline(**SMALL)
    p.upload(**make_batch())
    done, errors = [], []

    def run():
        try:
            for _ in range(100000):
                p.step()
                done.append(1)
        except ValueError as e:
            errors.append(str(e))

    t = threading.Thread(target=run)
    t.start()
    while not done:
        time.sleep(0.001)
    p.close()
    t.join(timeout=60)
    assert not t.is_alive()
    assert p.closed and errors and "closed" in errors[0], errors


# ---- divergence guard and memory plan ---------------------------------------------------------

def test_divergence_guard_skips_and_check_reports(fh):
    """A batch whose rewards and observations overflow the step (M3's x1e12 and x1e11) leaves
    the state as it was; check() raises once, naming what was not finite."""
    with fh.Pipeline(**SMALL) as p:
        p.upload(**make_batch())
        p.step()
        p.check()
        before = {name: p.read(name) for name in ("q.W1", "target.q.W1", "iql_hi.W1")}
        b = make_batch(seed=1)
        b["reward"] = b["reward"] * 1e12
        b["obs"] = b["obs"] * 1e11
        b["next_obs"] = b["next_obs"] * 1e11
        p.upload(**b)
        p.step()
        m = p.metrics()
        assert m["step"] == 2 and m["last_step_skipped"] == 1 and m["steps_skipped"] == 1
        for name, value in before.items():
            assert np.array_equal(p.read(name), value), name
        with pytest.raises(fh.FoxhuntError) as ei:
            p.check()
        assert ei.value.status == fh.Status.ERR_NON_FINITE
        assert "step 2 applied no update" in str(ei.value)
        p.check()  # reported once


def test_memory_plan_is_what_the_cpu_pipeline_holds(fh):
    plan = fh.memory_plan(**SMALL)
    assert plan["total"] == plan["parameters"] + plan["activations"] + plan["batch_staging"]
    with fh.Pipeline(**SMALL) as p:
        p.upload(**make_batch())
        p.step()
        assert p.memory() == plan
    with pytest.raises(fh.FoxhuntError) as ei:
        fh.memory_plan(**dict(SMALL, obs_dim=7))
    assert ei.value.status == fh.Status.ERR_INDIVISIBLE
