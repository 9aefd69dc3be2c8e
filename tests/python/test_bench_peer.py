"""The GPU peer benchmark runs (eager, on the CPU, tiny) and skips cleanly without CUDA."""
import json

import pytest
import torch

import bench_torch_peer


def test_bench_skips_without_cuda(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is there")
    assert bench_torch_peer.main(["--json", str(tmp_path / "x.json")]) == 0
    assert "skipped" in capsys.readouterr().out
    assert not (tmp_path / "x.json").exists()


def test_bench_eager_smoke_on_cpu(tmp_path):
    out = tmp_path / "b.json"
    assert bench_torch_peer.main(["--allow-cpu", "--batch-size", "32", "--iters", "1",
                                  "--warmup", "0", "--modes", "eager,fast_eager",
                                  "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    oracle, fast = report["results"]
    assert (oracle["mode"], oracle["peer"]) == ("eager", "oracle")
    assert (fast["mode"], fast["peer"]) == ("fast_eager", "fast")
    for r in (oracle, fast):
        assert r["ms_median"] > 0 and r["first_step_td_loss"] > 0
    # the two forms compute one step (float32 here; test_peer_fast checks float64 tightly)
    assert abs(fast["first_step_td_loss"] - oracle["first_step_td_loss"]) \
        <= 1e-5 * oracle["first_step_td_loss"]


def test_bench_rejects_an_unknown_mode(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:  # before anything runs, with or without CUDA
        bench_torch_peer.main(["--modes", "eager,fast_warp", "--json", str(tmp_path / "x")])
    assert e.value.code == 2
    assert "unknown mode 'fast_warp'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError):
        bench_torch_peer.run_mode("fast_warp", None, torch.device("cpu"), 1, 0)


def test_ratios_against_foxhunt(capsys):
    ours = bench_torch_peer.parse_foxhunt("multi-tf32:3.5:4.0,single-tf32:4.2:5.0")
    assert [o["mode"] for o in ours] == ["multi-tf32", "single-tf32"]
    bench_torch_peer.print_ratios(ours, [{"mode": "eager", "ms_median": 60.0},
                                         {"mode": "compile", "error": "x"}])
    assert ours[0]["peer_over_foxhunt"] == {"eager": 15.0}
    assert ours[1]["peer_over_foxhunt"] == {"eager": 12.0}
    assert "15.00x" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "--batch-size: 0 is below 1"),
    (["--iters", "-1"], "--iters: -1 is below 1"),
    (["--warmup", "-2"], "--warmup: -2 is below 0"),
    (["--modes", ","], "--modes: no mode given"),
    (["--foxhunt", "bogus"], "'bogus' is not MODE:GRAPH_MS:WALL_MS"),
    (["--foxhunt", "multi-tf32:1.4:0"], "'multi-tf32:1.4:0' is not MODE:GRAPH_MS:WALL_MS"),
    (["--allow-cpu", "--modes", "compile,fast_cuda_graph"], "none of --modes runs on the CPU"),
])
def test_bench_refuses_bad_arguments(args, message, capsys, tmp_path):
    if torch.cuda.is_available() and "--allow-cpu" in args:
        pytest.skip("with a GPU those modes run (the refusal is the CPU's)")
    with pytest.raises(SystemExit) as e:
        bench_torch_peer.main(args + ["--json", str(tmp_path / "x")])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_bench_fails_when_no_mode_ran(monkeypatch, capsys, tmp_path):
    def broken(*a, **k):
        raise RuntimeError("out of memory")
    monkeypatch.setattr(bench_torch_peer, "run_mode", broken)
    out = tmp_path / "b.json"
    assert bench_torch_peer.main(["--allow-cpu", "--batch-size", "8", "--modes", "eager",
                                  "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: out of memory" in captured.out and "no mode ran" in captured.err
    assert json.loads(out.read_text())["results"][0]["error"] == "RuntimeError: out of memory"
