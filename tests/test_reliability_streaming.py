"""vector_add's missing arguments, and the streaming benches never timing a wrong result (CPU:
the GPU-only parts are replaced by recorders)."""

import pytest
import torch

import pingpong
from pingpong import PingpongError
from pingpong.streaming import api
from pingpong.streaming import bench as sbench


@pytest.mark.parametrize("args, name", [((None, "t"), "a"), (("t", None), "b"), ((None, None), "a"),
                                        ((3.0, "t"), "a"), (("t", [1.0]), "b")])
def test_missing_or_non_tensor_arguments_are_named(args, name):
    t = torch.ones(4)
    a, b = (t if x == "t" else x for x in args)
    with pytest.raises(PingpongError, match=f"^{name}: expected a torch.Tensor, got"):
        pingpong.vector_add(a, b)
    with pytest.raises(PingpongError, match=f"^{name}: "):
        api.kernel_path(a, b)


def test_out_none_still_means_allocate(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a, b = torch.randn(5), torch.randn(5)
    assert torch.equal(pingpong.vector_add(a, b), a + b)


class Recorder:
    def __init__(self):
        self.timed = []

    def median(self, fn, reps):
        self.timed.append(fn)
        return 1.0

    def host(self, fn, calls=100):
        self.timed.append(fn)
        return 1.0


def _cpu_as_gpu(monkeypatch, rec):
    monkeypatch.setattr(sbench, "_median_ms", rec.median)
    monkeypatch.setattr(sbench, "_host_us", rec.host)
    monkeypatch.setattr(sbench, "kernel_path", lambda *a: "test")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "cpu")


def wrong_add(a, b, out=None):
    out.copy_(a)  # not a + b
    return out


def right_add(a, b, out=None):
    return torch.add(a, b, out=out)


def test_vector_add_bench_times_only_correct_sizes(monkeypatch):
    rec = Recorder()
    _cpu_as_gpu(monkeypatch, rec)
    monkeypatch.setattr(sbench, "vector_add", wrong_add)
    rows = sbench.run_vector_add_bench([16, 32], device="cpu", rounds=2)
    assert [r["correct"] for r in rows] == [False, False]
    assert not rec.timed, "a wrong result was timed"
    assert all(r["ms_ours"] is None and r["vs_torch"] is None for r in rows)
    table = sbench.format_table(rows)
    assert "False" in table and " - " in table

    monkeypatch.setattr(sbench, "vector_add", right_add)
    rows = sbench.run_vector_add_bench([16], device="cpu", rounds=2)
    assert rows[0]["correct"] and rows[0]["ms_ours"] == 1.0 and len(rec.timed) == 2 * 3


def test_stream_sweep_times_only_correct_rows(monkeypatch):
    rec = Recorder()
    _cpu_as_gpu(monkeypatch, rec)
    from pingpong.streaming import portable

    monkeypatch.setattr(sbench, "is_hopper", lambda index: True)
    monkeypatch.setattr(sbench, "sm_count", lambda index: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(portable, "launch", lambda a, b, out, interpret=False: out.copy_(b))  # wrong
    monkeypatch.setattr(sbench, "vector_add", wrong_add)
    rows = sbench.run_stream_sweep({}, [64], [torch.float32], device="cpu", diagnostics=False)
    by = {(r["kernel"], r["name"]): r for r in rows}
    assert not by[("portable", "plain-triton")]["correct"] and by[("portable", "plain-triton")]["ms"] is None
    assert not by[("vector_add", "test")]["correct"] and by[("vector_add", "test")]["vs_torch"] is None
    timed_rows = [r for r in rows if r["ms"] is not None]
    assert {r["kernel"] for r in timed_rows} == {"torch.add", "copy"}
    assert len(rec.timed) == 2 * len(timed_rows)  # do_bench + host time per timed row, none for wrong ones
    assert "-" in sbench.format_sweep(rows)
