"""The ctypes structs mirror foxhunt.h exactly: sizes confirmed by the library itself, field
offsets by the C compiler (when one is present), defaults by fh_config_init."""
import ctypes
import inspect
import os
import shutil
import subprocess

import pytest

from fh_testdata import REPO, SMALL, make_batch


def test_config_size_is_what_fh_config_init_writes(fh):
    from foxhunt import _abi
    lib = fh.load_library()
    cfg = _abi.fh_config()
    cfg.struct_size = 12345
    assert lib.fh_config_init(ctypes.byref(cfg)) == 0
    assert cfg.struct_size == ctypes.sizeof(_abi.fh_config)


@pytest.mark.parametrize("delta", [-4, 8])
def test_config_wrong_size_refused(fh, delta):
    from foxhunt import _abi
    lib = fh.load_library()
    cfg = _abi.new(_abi.fh_config)
    lib.fh_config_init(ctypes.byref(cfg))
    cfg.struct_size += delta
    out = ctypes.c_void_p()
    assert lib.fh_pipeline_create(ctypes.byref(cfg), ctypes.byref(out)) == fh.Status.ERR_STRUCT_SIZE
    assert out.value is None


def test_config_defaults_are_spec_section_1(fh):
    """Reading every default through the ctypes struct checks every field's offset and type."""
    d = fh.default_config()
    f32 = lambda x: ctypes.c_float(x).value  # noqa: E731
    expect = dict(backend="auto", device=0, exec_mode="multi_stream", math_mode="tf32",
                  iql_gemm="auto", workspace_mib=32,
                  batch_size=16384, obs_dim=124, goal_dim=4, num_branches=4,
                  actions_per_branch=8, trunk_hidden=256, branch_hidden=128, q_clip=100.0,
                  gamma=f32(0.99), huber_kappa=1.0, her_ratio=f32(0.8), her_epsilon=f32(0.05),
                  her_reward="sparse", her_terminal_on_success=1, sn_layers=2, iql_hidden=128,
                  iql_tau_hi=f32(0.9), iql_tau_lo=f32(0.1), awr_beta=3.0, awr_max=100.0,
                  iqn_hidden=128, iqn_cos=64, iqn_n=8, iqn_n_target=8, attn_token_dim=4,
                  attn_d_model=64, attn_heads=4, attn_head_hidden=64, cql_alpha=f32(0.1),
                  num_regimes=4, regime_beta=f32(0.99), regime_min=0.25, regime_max=4.0,
                  ema_tau=f32(0.005), lr_q=f32(3e-4), lr_aux=f32(3e-4), adam_beta1=f32(0.9),
                  adam_beta2=f32(0.999), adam_eps=f32(1e-8), clip_norm=10.0, seed=0,
                  replay_capacity=0, replay_envs=0, nccl_comm=0)
    assert d == expect
    # help(Pipeline) shows the same defaults
    from foxhunt._config_doc import CONFIG_DOC
    assert [name for name, _, _ in CONFIG_DOC] == list(fh.CONFIG_FIELDS)
    assert {name: f32(v) if isinstance(v, float) else v for name, v, _ in CONFIG_DOC} == expect
    sig = inspect.signature(fh.Pipeline)
    assert sig.parameters["backend"].default == "auto"
    assert sig.parameters["seed"].kind is inspect.Parameter.KEYWORD_ONLY


def test_config_round_trips_every_field(fh):
    """Distinct non-default values in every field come back from fh_pipeline_config."""
    cfg = dict(SMALL, q_clip=7.5, gamma=0.5, huber_kappa=2.0, her_ratio=0.25,
               her_epsilon=0.125, her_reward="dense", her_terminal_on_success=0, sn_layers=3,
               iql_tau_hi=0.75, iql_tau_lo=0.375, awr_beta=1.5, awr_max=9.0, cql_alpha=0.625,
               num_regimes=5, regime_beta=0.875, regime_min=0.5, regime_max=3.0, ema_tau=0.0625,
               lr_q=0.001953125, lr_aux=0.00390625, adam_beta1=0.8125, adam_beta2=0.9375,
               adam_eps=0.03125, clip_norm=6.0, seed=(7 << 32) | 3, workspace_mib=8,
               exec_mode=1, math_mode=2, iql_gemm=3)
    with fh.Pipeline(**cfg) as p:
        got = p.config
    names = {"backend": "cpu", "exec_mode": "single_stream", "math_mode": "bf16",
             "iql_gemm": "sequential"}
    for k, v in cfg.items():
        assert got[k] == names.get(k, v), k


def _call_with_size(fh, p, fn, struct, delta, *args):
    s = struct()
    s.struct_size = ctypes.sizeof(struct) + delta
    return getattr(fh.load_library(), fn)(p._handle, *args, ctypes.byref(s))


@pytest.mark.parametrize("fn,struct_name,args", [
    ("fh_pipeline_metrics", "fh_metrics", ()),
    ("fh_pipeline_timings", "fh_timings", ()),
    ("fh_pipeline_memory", "fh_memory_report", ()),
    ("fh_pipeline_tensor_info", "fh_tensor_info", (ctypes.c_uint32(0),)),
    ("fh_pipeline_find_tensor", "fh_tensor_info", (b"q.W1",)),
])
def test_output_struct_sizes_confirmed_by_library(fh, pipe, fn, struct_name, args):
    from foxhunt import _abi
    struct = getattr(_abi, struct_name)
    assert _call_with_size(fh, pipe, fn, struct, 0, *args) == 0
    for delta in (-4, 8):
        assert _call_with_size(fh, pipe, fn, struct, delta, *args) == fh.Status.ERR_STRUCT_SIZE


@pytest.mark.parametrize("fn,struct_name,last_01", [
    ("fh_pipeline_timings", "fh_timings", "sample_ms"),
    ("fh_pipeline_memory", "fh_memory_report", "replay"),
    ("fh_pipeline_config", "fh_config", "replay_capacity"),
])
def test_structs_of_version_0_1_accepted(fh, pipe, fn, struct_name, last_01):
    """A struct that grew in 0.2 is accepted at its 0.1 size (up to the first new field)."""
    from foxhunt import _abi
    struct = getattr(_abi, struct_name)
    size_01 = getattr(struct, last_01).offset
    assert _call_with_size(fh, pipe, fn, struct, size_01 - ctypes.sizeof(struct)) == 0


def test_batch_struct_size_confirmed_by_library(fh, pipe):
    from foxhunt import _abi
    lib = fh.load_library()
    pipe.upload(**make_batch())  # the binding's own fh_batch is accepted
    import numpy as np
    obs = np.zeros((16, 8), np.float32)
    g = np.zeros((16, 2), np.float32)
    act = np.zeros((16, 2), np.int32)
    r = np.zeros(16, np.float32)
    done = np.zeros(16, np.uint8)
    fp = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))  # noqa: E731
    for delta, want in ((0, 0), (-8, 0), (-4, 2), (8, 2)):  # -8: the 0.1 size, host memory
        b = _abi.new(_abi.fh_batch)
        b.struct_size += delta
        b.batch_size = 16
        b.obs, b.next_obs, b.reward = fp(obs), fp(obs), fp(r)
        b.goal, b.next_achieved_goal, b.her_goal = fp(g), fp(g), fp(g)
        b.action = act.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        b.done = done.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        assert lib.fh_pipeline_upload(pipe._handle, ctypes.byref(b)) == want


def test_metrics_fields_land_where_expected(fh, pipe):
    pipe.upload(**make_batch())
    pipe.step()
    m = pipe.metrics()
    assert m["step"] == 1 and m["num_regimes"] == 2 and len(m["regime_scale"]) == 2
    assert m["sigma"][0] == 0.0 and m["sigma"][1] > 0  # SN on W2 only (default)
    assert 0 <= m["num_relabelled"] <= 16


C_PROGRAM = r"""
#include <stdio.h>
#include <stddef.h>
#include "foxhunt.h"
#define F(s, f) printf(#s " " #f " %zu %zu\n", offsetof(s, f), sizeof(((s *)0)->f));
int main(void) {
%s
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to ask for offsetof")
def test_field_offsets_match_the_c_compiler(tmp_path):
    from foxhunt import _abi
    lines = []
    for struct in _abi.STRUCTS:
        name = struct.__name__
        lines.append('  printf("%s SIZE %%zu 0\\n", sizeof(%s));' % (name, name))
        for field, _ in struct._fields_:
            lines.append("  F(%s, %s)" % (name, field))
    src = tmp_path / "offsets.c"
    src.write_text(C_PROGRAM.replace("%s", "\n".join(lines)))
    exe = tmp_path / "offsets"
    subprocess.run(["cc", "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o",
                    str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    seen = 0
    for line in out.splitlines():
        sname, field, off, size = line.split()
        struct = getattr(_abi, sname)
        if field == "SIZE":
            assert ctypes.sizeof(struct) == int(off), sname
        else:
            desc = getattr(struct, field)
            assert (desc.offset, desc.size) == (int(off), int(size)), "%s.%s" % (sname, field)
        seen += 1
    assert seen == sum(len(s._fields_) + 1 for s in _abi.STRUCTS)
