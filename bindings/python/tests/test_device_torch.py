"""Device arrays from a real producer: PyTorch CUDA tensors, passed through
``__cuda_array_interface__`` and through DLPack, inserted into a CUDA pipeline's replay and
uploaded as batches, give bit for bit the state that the same arrays give from host memory.
The binding never imports torch (test_replay.py checks that); this test does, and skips without
torch, a GPU or a CUDA build of the library."""
import numpy as np
import pytest

from fh_testdata import SMALL, make_batch
from test_replay import REPLAY, make_rows, state

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)


class OnlyCai:
    """A torch tensor seen through __cuda_array_interface__ alone."""

    def __init__(self, t):
        self.t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class OnlyDlpack:
    """A torch tensor seen through DLPack alone."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


DTYPES = {"action": np.int32, "regime": np.int32, "done": np.uint8, "episode_end": np.uint8}


def exact(arrays):
    """The arrays in the dtypes a device array must already have (host ones are converted)."""
    return {k: np.ascontiguousarray(v, dtype=DTYPES.get(k, np.float32)) for k, v in arrays.items()}


def on_device(arrays, wrap):
    out = {k: wrap(torch.from_numpy(v).cuda()) for k, v in arrays.items()}
    torch.cuda.synchronize()  # the header: device arrays must be complete when the call is made
    return out


def cuda_pipeline(fh, cfg):
    try:
        return fh.Pipeline(**dict(cfg, backend="cuda"))
    except fh.FoxhuntError as e:
        if e.status == fh.Status.ERR_NO_CUDA:
            pytest.skip("this libfoxhunt has no CUDA backend or sees no GPU")
        raise


def assert_same_state(a, b):
    sa, sb = state(a), state(b)
    for name in sa:
        assert np.array_equal(sa[name], sb[name]), name
    ma, mb = a.metrics(), b.metrics()
    for k in ("td_loss", "q_mean", "iqn_loss", "attn_loss", "step"):
        assert ma[k] == mb[k], k


@pytest.mark.parametrize("wrap", [OnlyCai, OnlyDlpack])
def test_torch_rows_insert_as_host_rows_do(fh, wrap):
    rows = [exact(make_rows(4, seed=s, cfg=REPLAY)) for s in (3, 4)]
    with cuda_pipeline(fh, REPLAY) as host, cuda_pipeline(fh, REPLAY) as dev:
        for r in rows:
            host.insert(**r)
            dev.insert(**on_device(r, wrap))
            host.train(2)
            dev.train(2)
        assert dev.metrics()["step"] == 4
        assert_same_state(host, dev)


@pytest.mark.parametrize("wrap", [OnlyCai, OnlyDlpack])
def test_torch_batch_steps_as_a_host_batch_does(fh, wrap):
    batches = [exact(make_batch(SMALL, seed=s)) for s in (5, 6)]
    with cuda_pipeline(fh, SMALL) as host, cuda_pipeline(fh, SMALL) as dev:
        for b in batches:
            host.upload(**b)
            dev.upload(**on_device(b, wrap))
            host.step()
            dev.step()
        assert_same_state(host, dev)


def test_a_bad_torch_value_is_refused_by_the_next_call(fh):
    """A NaN in a device batch is found on the device: the next call returns the message the
    host pass would give, and the state is what it was."""
    good, bad = exact(make_batch(SMALL, seed=7)), exact(make_batch(SMALL, seed=8))
    bad["reward"][5] = np.nan
    with cuda_pipeline(fh, SMALL) as p:
        p.upload(**good)
        p.step()
        before = state(p)
        p.upload(**on_device(bad, OnlyCai))  # returns at once: checked on the device
        with pytest.raises(fh.FoxhuntError) as ei:
            p.step()
        assert ei.value.status == fh.Status.ERR_NON_FINITE
        assert "reward[5]" in ei.value.message
        after = state(p)
        for name in before:
            assert np.array_equal(before[name], after[name]), name
