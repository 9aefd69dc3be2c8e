"""`Pipeline`: the Python face of one ``fh_pipeline`` handle."""
import ctypes
import os
import threading
from ctypes import POINTER, byref, c_float, c_int32, c_uint8, c_uint32, c_void_p

import numpy as np

from . import _abi, _device
from ._config_doc import document
from ._loader import load_library
from .errors import FoxhuntError, status_name

CONFIG_FIELDS = tuple(name for name, _ in _abi.fh_config._fields_ if name != "struct_size")
_ENUMS = {"backend": _abi.BACKENDS, "exec_mode": _abi.EXEC_MODES, "math_mode": _abi.MATH_MODES,
          "iql_gemm": _abi.IQL_GEMMS, "her_reward": _abi.HER_REWARDS}
_INT_RANGES = {ctypes.c_int32: (-2**31, 2**31 - 1), ctypes.c_uint32: (0, 2**32 - 1),
               ctypes.c_uint64: (0, 2**64 - 1), ctypes.c_void_p: (0, 2**64 - 1)}
_C_TYPE_NAMES = {ctypes.c_int32: "int32_t", ctypes.c_uint32: "uint32_t",
                 ctypes.c_uint64: "uint64_t", ctypes.c_void_p: "a pointer"}
_FIELD_TYPES = dict(_abi.fh_config._fields_)
_FLAG_FIELDS = {"her_terminal_on_success"}  # the int fields that are 0 or 1 (foxhunt.h)
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _check(lib, status):
    if status != 0:
        msg = lib.fh_last_error_message()
        text = msg.decode("utf-8", "replace") if msg else ""
        raise FoxhuntError(status, status_name(status), text)


def _config_value(name, value):
    """Convert one keyword argument to the C field's value, or raise TypeError/ValueError."""
    if name in _ENUMS and isinstance(value, str):
        table = _ENUMS[name]
        if value.lower() not in table:
            raise ValueError("%s=%r: expected one of %s or an int" % (name, value, sorted(table)))
        return table[value.lower()]
    if name == "sn_layers" and not isinstance(value, (int, np.integer)):
        bits = 0
        for layer in (value,) if isinstance(value, str) else value:  # "W2" is one layer
            bit = {"W1": _abi.FH_SN_W1, "W2": _abi.FH_SN_W2}.get(layer)
            if bit is None:
                raise ValueError("sn_layers: %r is not 'W1' or 'W2'" % (layer,))
            bits |= bit
        return bits
    ctype = _FIELD_TYPES[name]
    if ctype is ctypes.c_float:
        return _float32(name, value)
    if not isinstance(value, (int, np.integer)):
        raise TypeError("%s=%r: expected an int" % (name, value))
    # bool is an int: her_terminal_on_success=True is a flag, batch_size=True a mistake.
    if isinstance(value, (bool, np.bool_)) and name not in _FLAG_FIELDS:
        raise TypeError("%s=%r: expected an int, not a bool" % (name, value))
    lo, hi = _INT_RANGES[ctype]
    if not lo <= int(value) <= hi:
        # The C field cannot hold it; the library checks the valid range of what it can hold.
        raise ValueError("%s=%r does not fit fh_config.%s (%s, [%d, %d])"
                         % (name, value, name, _C_TYPE_NAMES[ctype], lo, hi))
    return int(value)


def _float32(name, value):
    """@p value (argument @p name) as a float for a C float, or raise TypeError/ValueError. Only
    what float32 cannot hold is refused here (the library checks each field's range, on the
    float32 value: a value that rounds into the range, gamma=1.00000001 to 1, is accepted)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError("%s=%r: expected a real number" % (name, value))
    # A float32 field: a value it cannot hold would reach the library as an infinity or, worse,
    # as 0 (lr_q=1e-300 would turn learning off without a word).
    try:
        v = float(value)
    except OverflowError:
        raise ValueError("%s=%r overflows float32" % (name, value)) from None
    with np.errstate(over="ignore", under="ignore"):
        f32 = float(np.float32(v))
    if np.isfinite(v) and not np.isfinite(f32):
        raise ValueError("%s=%r overflows float32" % (name, value))
    if v != 0 and f32 == 0:
        raise ValueError("%s=%r underflows float32 to 0" % (name, value))
    return v


def _c_string(value, name, path=False):
    """@p value (argument @p name) as the bytes of a C string: a path through os.fsencode, a
    tensor name as UTF-8. A NUL inside would cut it short on the C side, so it is refused,
    as open() does."""
    b = os.fsencode(value) if path else value.encode()
    if b"\0" in b:
        raise ValueError("%s=%r: embedded null byte" % (name, value))
    return b


def _tensor_shape(name, rows, cols, group):
    """numpy shape of a tensor: SPEC §3 names matrices with a capital letter (W1, V.0, P) and
    vectors in lower case (b1, w_u, c.0); the library stores vectors as [1, n]."""
    if rows != 1:
        return (rows, cols)
    if group == _abi.GROUP_STATE:
        return (cols,)
    if name == "d_states":
        return (rows, cols)
    parts = [p for p in name.split(".") if not p.isdigit()]
    last = parts[-1] if parts else name
    return (rows, cols) if last[:1].isupper() else (cols,)


def _asarray(value, what):
    """np.asarray, with numpy's refusal of a ragged or non-numeric sequence naming the argument."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as e:
        raise ValueError("%s: not a rectangular array (%s)" % (what, e)) from None


def _float_array(value, what, shape):
    a = _asarray(value, what)
    if a.dtype.kind not in "fiub":
        raise TypeError("%s: expected a real numeric array, got dtype %s" % (what, a.dtype))
    if a.shape != tuple(shape):
        raise ValueError("%s: expected shape %s, got %s" % (what, tuple(shape), a.shape))
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype.kind == "f" and a.dtype.itemsize > 4:
        # A finite value beyond float32's range would reach the library as an infinity and be
        # reported as one; name the value the caller passed instead.
        over = np.isinf(out) & np.isfinite(a)
        if over.any():
            idx = tuple(int(i) for i in np.argwhere(over)[0])
            raise ValueError("%s%s = %s overflows float32" % (what, list(idx), a[idx]))
    return out


def _int_array(value, what, shape, lo, hi, ctype):
    a = _asarray(value, what)
    if a.dtype.kind not in "iub":
        raise TypeError("%s: expected an integer array, got dtype %s" % (what, a.dtype))
    if a.shape != tuple(shape):
        raise ValueError("%s: expected shape %s, got %s" % (what, tuple(shape), a.shape))
    if a.size and (a.min() < lo or a.max() > hi):
        raise ValueError("%s: values must fit %s (got %d..%d)" % (what, ctype, a.min(), a.max()))
    return np.ascontiguousarray(a, dtype=np.int32 if ctype == "int32" else np.uint8)


def _config_dict(cfg):
    """An fh_config as a dict; enum fields by name ('cpu', 'dense'), as the keywords take them."""
    out = {name: getattr(cfg, name) for name in CONFIG_FIELDS}
    out["nccl_comm"] = out["nccl_comm"] or 0  # ctypes reads a NULL c_void_p as None
    for name, table in _ENUMS.items():
        out[name] = {v: k for k, v in table.items()}.get(out[name], out[name])
    return out


def _flag_array(value, what, shape):
    """uint8 flags (done): bool, integer, or float as gym returns them, which must then be
    exactly 0.0 or 1.0 (anything else would be truncated on conversion)."""
    a = np.asarray(value)
    if a.dtype.kind == "f":
        if a.shape != tuple(shape):
            raise ValueError("%s: expected shape %s, got %s" % (what, tuple(shape), a.shape))
        bad = (a != 0) & (a != 1)
        if bad.any():
            i = tuple(int(k) for k in np.argwhere(bad)[0])
            raise ValueError("%s%s = %r: a float flag must be 0.0 or 1.0"
                             % (what, list(i), float(a[i])))
        a = a.astype(np.uint8)
    return _int_array(a, what, shape, 0, 255, "uint8")


def _ptr(a, ctype):
    return None if a is None else a.ctypes.data_as(POINTER(ctype))


def _make_config(lib, config, caller):
    cfg = _abi.new(_abi.fh_config)
    _check(lib, lib.fh_config_init(byref(cfg)))
    for name, value in config.items():
        if name not in CONFIG_FIELDS:
            raise TypeError("%s() got an unexpected keyword argument %r" % (caller, name))
        setattr(cfg, name, _config_value(name, value))
    return cfg


def memory_plan(library=None, **config):
    """Bytes a Pipeline(**config) would hold once it has stepped, by category, as a dict
    (fh_memory_plan: computed from the dimensions, nothing is created)."""
    lib = load_library(library) if library is not None else load_library()
    cfg = _make_config(lib, config, "memory_plan")
    r = _abi.new(_abi.fh_memory_report)
    _check(lib, lib.fh_memory_plan(byref(cfg), byref(r)))
    return {name: getattr(r, name) for name, _ in _abi.fh_memory_report._fields_[1:]}


_CTYPES = {"f": c_float, "i": ctypes.c_int32, "u8": c_uint8, "flag": c_uint8}
_DEVICE_DTYPES = {"f": (np.dtype(np.float32),), "i": (np.dtype(np.int32),),
                  "u8": (np.dtype(np.uint8), np.dtype(bool)),
                  "flag": (np.dtype(np.uint8), np.dtype(bool))}


def _gather(specs, values, goal_dim):
    """Pointers to the arrays of a batch or of replay rows: @p specs lists (name, kind, shape,
    needs) with kind "f" (float32), "i" (int32), "u8" or "flag" (uint8 0/1; on the host also
    a float 0.0/1.0 array, as gym returns done), and needs "always", "goal" (required
    iff goal_dim > 0, else None) or "optional". All host arrays (checked and converted by numpy)
    or all device arrays (checked, never converted). Returns (pointers by name, memory kind,
    the device objects that must stay alive after the call, the host arrays that must stay
    alive during it)."""
    device = {}
    for name, _, _, _ in specs:
        v = values.get(name)
        if v is not None:
            device[name] = _device.device_array(v)
    on_device = {n for n, d in device.items() if d is not None}
    if on_device and len(on_device) != len(device):
        raise ValueError("%s in device memory but %s not: pass all arrays from one side"
                         % (sorted(on_device), sorted(set(device) - on_device)))
    ptrs, keep, host = {}, [], []
    for name, kind, shape, needs in specs:
        v = values.get(name)
        if needs == "goal" and goal_dim == 0:
            if v is not None and not on_device and np.asarray(v).size != 0:
                raise ValueError("%s: goal_dim is 0, pass None" % name)
            ptrs[name] = None
            continue
        if v is None:
            if needs == "optional":
                ptrs[name] = None
                continue
            raise TypeError("missing %r%s" % (name, " (goal_dim = %d)" % goal_dim
                                                  if needs == "goal" else ""))
        if on_device:
            d = device[name]
            _device.check(d, name, shape, _DEVICE_DTYPES[kind])
            ptrs[name] = ctypes.cast(c_void_p(d.ptr), POINTER(_CTYPES[kind]))
            keep.extend(d.keep)
            continue
        if kind == "f":
            a = _float_array(v, name, shape)
        elif kind == "i":
            a = _int_array(v, name, shape, _INT32_MIN, _INT32_MAX, "int32")
        elif kind == "flag":
            a = _flag_array(v, name, shape)
        else:
            a = _int_array(v, name, shape, 0, 255, "uint8")
        ptrs[name] = _ptr(a, _CTYPES[kind])
        host.append(a)
    memory = _abi.MEMORY_KINDS["device" if on_device else "host"]
    return ptrs, memory, keep, host


@document
class Pipeline:
    """One foxhunt pipeline. Configure with the header's field names::

        with Pipeline(batch_size=64, obs_dim=8, goal_dim=2, backend="cpu") as p:
            p.upload(obs=..., goal=..., action=..., reward=..., done=..., next_obs=...,
                     next_achieved_goal=..., her_goal=..., regime=...)
            p.step()
            print(p.metrics()["td_loss"])

    Enum fields take their C value or a name (backend="cpu", her_reward="dense");
    sn_layers takes the bit mask, a layer name ("W2") or an iterable such as ("W1", "W2").

    The C pipeline is not thread-safe (foxhunt.h); this object takes a lock around each call
    into it, so Python threads that share one Pipeline take turns, and close() waits for a call
    in flight instead of destroying the handle under it.
    """

    def __init__(self, library=None, **config):
        self._lib = load_library(library) if library is not None else load_library()
        self._handle = None
        self._device_refs = []
        # ctypes releases the GIL during a call: the lock keeps two threads out of the handle.
        self._lock = threading.RLock()
        cfg = _make_config(self._lib, config, "Pipeline")
        handle = c_void_p()
        _check(self._lib, self._lib.fh_pipeline_create(byref(cfg), byref(handle)))
        self._handle = handle
        resolved = _abi.new(_abi.fh_config)
        _check(self._lib, self._lib.fh_pipeline_config(self._handle, byref(resolved)))
        self._config = _config_dict(resolved)
        self._tensors = self._list_tensors()

    # -- lifetime -----------------------------------------------------------------------------
    def close(self):
        """Destroy the handle (idempotent; waits for a call in flight on another thread)."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the handle existed
            return
        with lock:
            if self._handle is not None:
                self._lib.fh_pipeline_destroy(self._handle)
                self._handle = None
                self._device_refs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    @property
    def closed(self):
        return self._handle is None

    def _h(self):
        if self._handle is None:
            raise ValueError("the pipeline is closed")
        return self._handle

    def _call(self, fn, *args, keep=()):
        """Call @p fn on the handle. Device arrays the library may still read are held until
        the next call has returned (@p keep: those of this call)."""
        with self._lock:
            held = self._device_refs
            try:
                _check(self._lib, getattr(self._lib, fn)(self._h(), *args))
            finally:
                self._device_refs = list(keep)
            del held

    # -- description --------------------------------------------------------------------------
    @property
    def config(self):
        """The pipeline's config (backend resolved) as a dict of the header's field names;
        enum fields by name, as the keyword arguments take them: Pipeline(**p.config) makes
        an identical pipeline."""
        return dict(self._config)

    @property
    def backend(self):
        """'cpu' or 'cuda'."""
        b = c_int32()
        self._call("fh_pipeline_backend", byref(b))
        return {v: k for k, v in _abi.BACKENDS.items()}[b.value]

    def _list_tensors(self):
        n = c_uint32()
        self._call("fh_pipeline_num_tensors", byref(n))
        out = []
        for i in range(n.value):
            info = _abi.new(_abi.fh_tensor_info)
            self._call("fh_pipeline_tensor_info", c_uint32(i), byref(info))
            name = info.name.decode()
            out.append((name, _tensor_shape(name, info.rows, info.cols, info.group),
                        _abi.GROUPS.get(info.group, info.group), bool(info.writable),
                        info.rows * info.cols))
        return out

    def tensors(self):
        """Every named tensor as (name, shape, group), group one of 'q', 'iql_hi', 'iql_lo',
        'iqn', 'attn', 'q_target', 'iqn_target', 'state', 'output'."""
        return [(name, shape, group) for name, shape, group, _, _ in self._tensors]

    def _info(self, name):
        if not isinstance(name, str):
            raise TypeError("name: expected a str, got %s" % type(name).__name__)
        cname = _c_string(name, "name")
        info = _abi.new(_abi.fh_tensor_info)
        self._call("fh_pipeline_find_tensor", cname, byref(info))
        return _tensor_shape(name, info.rows, info.cols, info.group), info.rows * info.cols, cname

    # -- data in ------------------------------------------------------------------------------
    def upload(self, *, obs, action, reward, done, next_obs, goal=None, next_achieved_goal=None,
               her_goal=None, regime=None):
        """Validate and copy one batch (SPEC §2). Host arrays: shapes and dtypes are checked
        here (ValueError/TypeError) and converted; values (finite floats, ranges) by the library
        (FoxhuntError). Device arrays (``__cuda_array_interface__`` or DLPack, all of them on
        the device) must be C-contiguous float32 / int32 / uint8 (or bool) already; the library
        reads them after the call, so they are kept alive until the next call returns
        (include/foxhunt.h, "Device memory")."""
        c = self._config
        B, O, G, NB = c["batch_size"], c["obs_dim"], c["goal_dim"], c["num_branches"]
        specs = [("obs", "f", (B, O), "always"), ("goal", "f", (B, G), "goal"),
                 ("action", "i", (B, NB), "always"), ("reward", "f", (B,), "always"),
                 ("done", "flag", (B,), "always"), ("next_obs", "f", (B, O), "always"),
                 ("next_achieved_goal", "f", (B, G), "goal"), ("her_goal", "f", (B, G), "goal"),
                 ("regime", "i", (B,), "optional")]
        values = dict(obs=obs, goal=goal, action=action, reward=reward, done=done,
                      next_obs=next_obs, next_achieved_goal=next_achieved_goal,
                      her_goal=her_goal, regime=regime)
        ptrs, memory, keep, _host = _gather(specs, values, G)
        batch = _abi.new(_abi.fh_batch)
        batch.batch_size = B
        batch.memory = memory
        for name, _, _, _ in specs:
            setattr(batch, name, ptrs[name])
        self._call("fh_pipeline_upload", byref(batch), keep=keep)

    def insert(self, *, obs, action, reward, done, next_obs, episode_end, goal=None,
               next_achieved_goal=None, regime=None):
        """Append rows to the replay (SPEC §2.1; the pipeline needs replay_capacity and
        replay_envs). Arrays are [R, E, ...]: R rows of E environments' transitions, in time
        order (obs [R, E, O], reward [R, E], ...); [E, ...] is one row. episode_end [R, E]
        marks each environment's last transition of an episode (termination or time limit);
        done = 1 requires episode_end = 1. Host and device arrays as upload() says."""
        c = self._config
        if c["replay_capacity"] == 0:  # the library's FH_ERR_UNSUPPORTED, before any shape check
            self._call("fh_pipeline_insert", byref(_abi.new(_abi.fh_replay_rows)))
        E, O, G, NB = c["replay_envs"], c["obs_dim"], c["goal_dim"], c["num_branches"]
        values = dict(obs=obs, goal=goal, action=action, reward=reward, done=done,
                      next_obs=next_obs, next_achieved_goal=next_achieved_goal, regime=regime,
                      episode_end=episode_end)
        dev = _device.device_array(obs)
        shape = dev.shape if dev is not None else np.shape(obs)
        if len(shape) == 2:  # one row: [E, O]
            R, lead = 1, ()
        elif len(shape) == 3:
            R, lead = shape[0], (shape[0],)
        else:
            raise ValueError("obs: expected shape (R, %d, %d) or (%d, %d), got %s"
                             % (E, O, E, O, tuple(shape)))
        specs = [("obs", "f", lead + (E, O), "always"), ("goal", "f", lead + (E, G), "goal"),
                 ("action", "i", lead + (E, NB), "always"), ("reward", "f", lead + (E,), "always"),
                 ("done", "flag", lead + (E,), "always"), ("next_obs", "f", lead + (E, O), "always"),
                 ("next_achieved_goal", "f", lead + (E, G), "goal"),
                 ("regime", "i", lead + (E,), "optional"),
                 ("episode_end", "flag", lead + (E,), "always")]
        ptrs, memory, keep, _host = _gather(specs, values, G)
        rows = _abi.new(_abi.fh_replay_rows)
        rows.num_rows = R
        rows.num_envs = E
        rows.memory = memory
        for name, _, _, _ in specs:
            setattr(rows, name, ptrs[name])
        self._call("fh_pipeline_insert", byref(rows), keep=keep)

    def step(self):
        """One training step (SPEC §5) on the current batch, or on one drawn from the replay
        (SPEC §5.0) when the pipeline has one."""
        self._call("fh_pipeline_step")

    def train(self, k):
        """k steps back to back (each draws its own batch from the replay, with one), with no
        host round trip between them; metrics and timings are the last step's."""
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError("k must be an int")
        # 0 fits uint32_t and goes on to the library, which refuses it with its own message.
        if not 0 <= int(k) <= 2**32 - 1:
            raise ValueError("k=%r is outside fh_pipeline_train's range of steps [1, %d] "
                             "(uint32_t)" % (k, 2**32 - 1))
        self._call("fh_pipeline_train", c_uint32(int(k)))

    def sync(self):
        """Wait for the pipeline's queued work; raises a pending refusal of device input."""
        self._call("fh_pipeline_sync")

    def act(self, obs, goal=None, epsilon=0.0, return_q=False):
        """Greedy / epsilon-greedy actions (SPEC §7). obs [n, O] (or [O] for one row) ->
        int32 actions [n, NB] ([NB]); with return_q also the clamped q values [n, NB, A].
        epsilon, in [0, 1], is a float32: as for the config's float fields, a value that float32
        would turn into inf or 0 is a ValueError (the library checks the range); unlike them, so
        is one outside [0, 1] that float32 would round into it (1 + 1e-9)."""
        c = self._config
        O, G, NB, A = c["obs_dim"], c["goal_dim"], c["num_branches"], c["actions_per_branch"]
        o = np.asarray(obs)
        single = o.ndim == 1
        if single:
            o = o.reshape(1, -1)
        if o.ndim != 2:
            raise ValueError("obs: expected shape (n, %d) or (%d,), got %s" % (O, O, o.shape))
        n = o.shape[0]
        o = _float_array(o, "obs", (n, O))
        g = None
        if G > 0:
            if goal is None:
                raise TypeError("act() needs goal (goal_dim = %d)" % G)
            ga = np.asarray(goal)
            g = _float_array(ga.reshape(1, -1) if single and ga.ndim == 1 else ga, "goal", (n, G))
        elif goal is not None and np.asarray(goal).size != 0:
            raise ValueError("goal: goal_dim is 0, pass None")
        eps = _float32("epsilon", epsilon)  # as the config's float fields
        if (0 <= eps <= 1) != (0 <= np.float32(eps) <= 1):  # 1 + 1e-9 would reach it as 1
            raise ValueError("epsilon=%r is outside [0, 1]" % (epsilon,))
        actions = np.empty((n, NB), dtype=np.int32)
        q = np.empty((n, NB, A), dtype=np.float32) if return_q else None
        self._call("fh_pipeline_act", _ptr(o, c_float), _ptr(g, c_float), c_uint32(n),
                   c_float(eps), _ptr(actions, ctypes.c_int32), _ptr(q, c_float))
        if single:
            actions, q = actions[0], (q[0] if q is not None else None)
        return (actions, q) if return_q else actions

    # -- data out -----------------------------------------------------------------------------
    def metrics(self):
        """Metrics of the last step (SPEC §6) as a dict; regime_scale has num_regimes entries."""
        m = _abi.new(_abi.fh_metrics)
        self._call("fh_pipeline_metrics", byref(m))
        out = {name: getattr(m, name) for name, _ in _abi.fh_metrics._fields_
               if name not in ("struct_size", "sigma", "sigma_target", "regime_scale")}
        out["sigma"] = tuple(m.sigma)
        out["sigma_target"] = tuple(m.sigma_target)
        out["regime_scale"] = list(m.regime_scale[: m.num_regimes])
        return out

    def timings(self):
        """Milliseconds per child graph and aux learner of the last step, as a dict."""
        t = _abi.new(_abi.fh_timings)
        self._call("fh_pipeline_timings", byref(t))
        return {name: getattr(t, name) for name, _ in _abi.fh_timings._fields_[1:]}

    def check(self):
        """Raise FoxhuntError (ERR_NON_FINITE) if the divergence guard skipped a step since the
        last check (fh_pipeline_check); the message names the first non-finite quantity."""
        self._call("fh_pipeline_check")

    def memory(self):
        """Bytes held, by category, as a dict."""
        r = _abi.new(_abi.fh_memory_report)
        self._call("fh_pipeline_memory", byref(r))
        return {name: getattr(r, name) for name, _ in _abi.fh_memory_report._fields_[1:]}

    def read(self, name):
        """A copy of tensor @p name as a float32 array of its shape."""
        shape, count, cname = self._info(name)
        out = np.empty(count, dtype=np.float32)
        self._call("fh_pipeline_read_tensor", cname, _ptr(out, c_float),
                   ctypes.c_size_t(count))
        return out.reshape(shape)

    def write(self, name, array):
        """Overwrite tensor @p name (a parameter, target or state tensor) from @p array, whose
        shape is the tensor's, or flat: all of its elements in row-major order (and a [1, n]
        matrix is accepted for a row)."""
        shape, count, cname = self._info(name)
        a = _asarray(array, name)
        if a.dtype.kind not in "fiub":
            raise TypeError("%s: expected a real numeric array, got dtype %s" % (name, a.dtype))
        allowed = {tuple(shape), (count,)} | ({(1, count)} if len(shape) == 1 else set())
        if a.shape not in allowed:
            raise ValueError("%s: expected shape %s, got %s" % (name, tuple(shape), a.shape))
        a = _float_array(a, name, a.shape)
        self._call("fh_pipeline_write_tensor", cname, _ptr(a, c_float),
                   ctypes.c_size_t(count))

    def state_dict(self):
        """Every tensor by name (a convenience over read())."""
        return {name: self.read(name) for name, _, _ in self.tensors()}

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, path, include_replay=False):
        """Save the state (fh_pipeline_save); with include_replay, the replay too
        (FH_SAVE_REPLAY), so that a run that samples from it resumes bit for bit. A path (here,
        in load and dump_graph) or a tensor name with a NUL in it is a ValueError, as in open()."""
        flags = _abi.FH_SAVE_REPLAY if include_replay else 0
        self._call("fh_pipeline_save_ex", _c_string(path, "path", path=True), c_uint32(flags))

    def load(self, path):
        self._call("fh_pipeline_load", _c_string(path, "path", path=True))

    def dump_graph(self, path):
        self._call("fh_pipeline_dump_graph", _c_string(path, "path", path=True))

    def __repr__(self):
        if self._handle is None:
            return "<foxhunt.Pipeline closed>"
        c = self._config
        return "<foxhunt.Pipeline %s B=%d O=%d G=%d NB=%d A=%d>" % (
            c["backend"], c["batch_size"],
            c["obs_dim"], c["goal_dim"], c["num_branches"], c["actions_per_branch"])
