"""The replay through the binding (SPEC §2.1, §5.0): insert, train, checkpoints with the replay,
and device arrays (``__cuda_array_interface__`` and DLPack) recognised without importing torch
or cupy. No GPU here: device arrays are host memory dressed as device arrays, which the CPU
backend refuses; what the binding passed is checked on the struct itself."""
import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from fh_testdata import SMALL, make_batch

K, E = 6, 3
REPLAY = dict(SMALL, replay_capacity=K, replay_envs=E)


def make_rows(R, seed=0, cfg=REPLAY, p_end=0.3):
    rng = np.random.default_rng(seed)
    O, G, NB = cfg["obs_dim"], cfg["goal_dim"], cfg["num_branches"]
    ends = rng.random((R, E)) < p_end
    return dict(obs=rng.standard_normal((R, E, O)).astype(np.float32),
                goal=rng.standard_normal((R, E, G)).astype(np.float32),
                action=rng.integers(0, cfg["actions_per_branch"], (R, E, NB)).astype(np.int32),
                reward=rng.standard_normal((R, E)).astype(np.float32),
                done=(ends & (rng.random((R, E)) < 0.5)).astype(np.uint8),
                next_obs=rng.standard_normal((R, E, O)).astype(np.float32),
                next_achieved_goal=rng.standard_normal((R, E, G)).astype(np.float32),
                regime=rng.integers(0, cfg["num_regimes"], (R, E)).astype(np.int32),
                episode_end=ends.astype(np.uint8))


def state(p):
    return {n: p.read(n) for n, _, _ in p.tensors()}


def test_insert_and_train(fh):
    with fh.Pipeline(**REPLAY) as p:
        with pytest.raises(fh.FoxhuntError) as ei:
            p.train(2)
        assert ei.value.status == fh.Status.ERR_NO_BATCH
        p.insert(**make_rows(4))
        one = {k: v[0] for k, v in make_rows(1, seed=1).items()}  # [E, ...]: one row
        p.insert(**one)
        p.train(3)
        assert p.metrics()["step"] == 3
        assert p.timings()["sample_ms"] > 0
        # The plan counts the replay: K x E transitions of obs, next_obs, goal, ag' (floats),
        # NB actions, reward, regime (4 bytes), done, episode_end (1 byte) and the episode
        # table's slot (4 bytes), plus one 8-byte open-episode start per environment.
        O, G, NB = SMALL["obs_dim"], SMALL["goal_dim"], SMALL["num_branches"]
        per = 8 * O + 8 * G + 4 * NB + 4 + 4 + 1 + 1 + 4
        assert p.memory()["replay"] == K * E * per + 8 * E
        assert p.memory() == fh.memory_plan(**REPLAY)
        with pytest.raises(fh.FoxhuntError) as ei:
            p.upload(**make_batch())
        assert ei.value.status == fh.Status.ERR_UNSUPPORTED
        with pytest.raises(fh.FoxhuntError) as ei:
            p.train(0)
        assert ei.value.status == fh.Status.ERR_BAD_VALUE
        with pytest.raises(TypeError):
            p.train(1.5)
        with pytest.raises(ValueError, match=re.escape(
                "k=-1 is outside fh_pipeline_train's range of steps [1, 4294967295] "
                "(uint32_t)")):
            p.train(-1)
        with pytest.raises(ValueError, match=re.escape("k=4294967296 is outside")):
            p.train(2**32)


def test_refused_insert_names_the_element_and_changes_nothing(fh):
    with fh.Pipeline(**REPLAY) as p, fh.Pipeline(**REPLAY) as twin:
        p.insert(**make_rows(3))
        twin.insert(**make_rows(3))
        bad = make_rows(2, seed=5)
        bad["obs"][1, 2, 3] = np.nan
        with pytest.raises(fh.FoxhuntError) as ei:
            p.insert(**bad)
        assert ei.value.status == fh.Status.ERR_NON_FINITE
        assert "rows.obs[1, 2, 3] = nan" in ei.value.message
        bad = make_rows(2, seed=6)
        bad["done"][0, 1], bad["episode_end"][0, 1] = 1, 0
        with pytest.raises(fh.FoxhuntError, match=r"rows.done\[0, 1\] = 1 but"):
            p.insert(**bad)
        with pytest.raises(ValueError, match="episode_end"):
            p.insert(**dict(make_rows(2), episode_end=np.zeros((2, E + 1), np.uint8)))
        with pytest.raises(TypeError, match="episode_end"):
            rows = make_rows(2)
            del rows["episode_end"]
            p.insert(episode_end=None, **rows)
        p.train(2)
        twin.train(2)
        a, b = state(p), state(twin)
        assert all(np.array_equal(a[n], b[n]) for n in a)


def test_checkpoint_with_replay_resumes_bit_for_bit(fh, tmp_path):
    path = str(tmp_path / "r.ckpt")
    with fh.Pipeline(**REPLAY) as a, fh.Pipeline(**REPLAY) as b:
        a.insert(**make_rows(8, seed=1))
        a.train(2)
        a.save(path, include_replay=True)
        b.load(path)
        for p in (a, b):
            p.insert(**make_rows(2, seed=2))
            p.train(3)
        sa, sb = state(a), state(b)
        assert all(np.array_equal(sa[n], sb[n]) for n in sa)
        assert a.metrics() == b.metrics()
    with fh.Pipeline(**SMALL) as plain:
        with pytest.raises(fh.FoxhuntError) as ei:
            plain.save(path, include_replay=True)
        assert ei.value.status == fh.Status.ERR_UNSUPPORTED
        # Rows for a pipeline without a replay: the library's refusal, not a shape complaint.
        with pytest.raises(fh.FoxhuntError, match="without a replay") as ei:
            plain.insert(**make_rows(2, seed=3))
        assert ei.value.status == fh.Status.ERR_UNSUPPORTED


# ---- device arrays ---------------------------------------------------------------------------

class FakeCai:
    """Host memory that claims to be a CUDA array through __cuda_array_interface__."""

    def __init__(self, a, strides=None):
        self.a = a
        self.__cuda_array_interface__ = dict(shape=a.shape, typestr=a.dtype.str,
                                             data=(a.ctypes.data, False), strides=strides,
                                             version=3)


def fake_dlpack(a, device_type=2):
    """A DLPack producer whose capsule describes numpy array @p a as on a CUDA device."""
    from foxhunt import _device

    class Managed(ctypes.Structure):
        _fields_ = [("dl_tensor", _device._DLTensor), ("manager_ctx", ctypes.c_void_p),
                    ("deleter", ctypes.c_void_p)]

    shape = (ctypes.c_int64 * a.ndim)(*a.shape)
    m = Managed()
    m.dl_tensor.data = a.ctypes.data
    m.dl_tensor.device.device_type = device_type
    m.dl_tensor.ndim = a.ndim
    code = {"f": 2, "i": 0, "u": 1, "b": 6}[a.dtype.kind]
    m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes = code, 8 * a.itemsize, 1
    m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

    class Producer:
        def __dlpack_device__(self):
            return (device_type, 0)

        def __dlpack__(self, stream=None):
            self.keep = (a, m, shape)  # the capsule's memory lives as long as the producer
            return new(ctypes.addressof(m), b"dltensor", None)

    return Producer()


class Recorder:
    """Stands in for the ctypes library and records the struct a call received."""

    def __init__(self, lib, fn):
        self.lib, self.fn, self.seen = lib, fn, None

    def __getattr__(self, name):
        real = getattr(self.lib, name)
        if name != self.fn:
            return real

        def call(handle, ref):
            s = ref._obj  # the struct behind ctypes.byref
            self.seen = {f: getattr(s, f) for f, _ in s._fields_}
            return real(handle, ref)
        return call


def _addr(p):
    return ctypes.cast(p, ctypes.c_void_p).value


@pytest.mark.parametrize("wrap", [FakeCai, fake_dlpack])
def test_device_arrays_pass_their_pointers(fh, pipe, wrap):
    b = {k: np.ascontiguousarray(v, dtype={"action": np.int32, "regime": np.int32,
                                           "done": np.uint8}.get(k, np.float32))
         for k, v in make_batch().items()}
    rec = Recorder(pipe._lib, "fh_pipeline_upload")
    pipe._lib = rec
    with pytest.raises(fh.FoxhuntError) as ei:
        pipe.upload(**{k: wrap(v) for k, v in b.items()})
    assert ei.value.status == fh.Status.ERR_UNSUPPORTED  # the CPU backend reads host memory
    assert "CPU backend" in ei.value.message
    assert rec.seen["memory"] == 1
    for k, v in b.items():
        assert _addr(rec.seen[k]) == v.ctypes.data, k
    assert len(pipe._device_refs) >= len(b)  # held until the next call returns
    pipe.upload(**make_batch())
    assert pipe._device_refs == []


def test_device_insert_passes_its_pointers(fh):
    with fh.Pipeline(**REPLAY) as p:
        rows = make_rows(2)
        rec = Recorder(p._lib, "fh_pipeline_insert")
        p._lib = rec
        with pytest.raises(fh.FoxhuntError) as ei:
            p.insert(**{k: FakeCai(v) for k, v in rows.items()})
        assert ei.value.status == fh.Status.ERR_UNSUPPORTED
        assert rec.seen["memory"] == 1 and rec.seen["num_rows"] == 2
        assert rec.seen["num_envs"] == E
        for k, v in rows.items():
            assert _addr(rec.seen[k]) == v.ctypes.data, k


def test_device_arrays_are_checked_not_converted(fh, pipe):
    b = make_batch()
    dev = {k: FakeCai(np.ascontiguousarray(v, dtype={"action": np.int32, "regime": np.int32,
                                                     "done": np.uint8}.get(k, np.float32)))
           for k, v in b.items()}
    with pytest.raises(TypeError, match="obs: a device array must be float32"):
        pipe.upload(**dict(dev, obs=FakeCai(b["obs"])))  # float64
    with pytest.raises(ValueError, match="from one side"):
        pipe.upload(**dict(dev, obs=np.asarray(b["obs"], np.float32)))
    with pytest.raises(ValueError, match="shape"):
        pipe.upload(**dict(dev, reward=FakeCai(np.zeros(15, np.float32))))
    t = np.zeros((8, 16), np.float32).T  # strides of a transposed array
    with pytest.raises(ValueError, match="not C-contiguous"):
        pipe.upload(**dict(dev, obs=FakeCai(np.ascontiguousarray(t), strides=(4, 64))))


def test_dlpack_parser_reads_shape_dtype_and_skips_host_producers(fh):
    from foxhunt import _device
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    d = _device.device_array(fake_dlpack(a))
    assert d.ptr == a.ctypes.data and d.shape == (2, 3, 4) and d.dtype == np.int32
    assert _device.device_array(fake_dlpack(a, device_type=1)) is None  # a CPU producer
    assert _device.device_array(a) is None
    assert _device.device_array(fake_dlpack(np.zeros(3, bool))).dtype == np.dtype(bool)


def test_no_array_library_is_imported():
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys; sys.path.insert(0, %r); import foxhunt, foxhunt._device; "
            "print(sorted(m for m in ('torch', 'cupy', 'jax') if m in sys.modules))"
            % os.path.join(here, ".."))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "[]"
