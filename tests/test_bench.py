"""The benchmark harness: options, output paths, inputs, timing loop, the correctness check,
report writers (CPU, synthetic rows), per-shape failures, the no-GPU exit, and one real quick
run on a GPU."""

import argparse
import csv
import json
import math

import pytest
import torch

from pingpong.tools import bench, timing
from pingpong.tools import rows as bench_rows
from pingpong.tools.rows import Row
from pingpong.errors import PingpongError

from bench_scripts import BENCHMARKS


def parse(*argv):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(list(argv))


def settings(*argv):
    return bench.settings_from_args(parse(*argv))


# --------------------------------------------------------------------------- options


def test_defaults_are_the_documented_method():
    s = settings()
    assert s.shapes == ((2048,) * 3, (4096,) * 3, (8192,) * 3, (16384,) * 3)
    assert (s.dtype, s.layout, s.reps, s.quick, s.op) == ("bf16", "nt", 100, False, "gemm")


def test_shapes_parse():
    assert settings("--shapes", "128,256,64", "512").shapes == ((128, 256, 64), (512, 512, 512))
    assert bench.parse_shape("1x2x3") == (1, 2, 3)


@pytest.mark.parametrize("bad", ["12,34", "a,b,c", "0,1,1", "1,2,3,4", "-5", ""])
def test_bad_shape_names_shapes(bad):
    with pytest.raises(PingpongError, match="--shapes"):
        settings("--shapes", bad)


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--dtype", "fp32"], "--dtype"),
        (["--layout", "xy"], "--layout"),
        (["--reps", "50"], "--reps"),
        (["--reps", "0", "--quick"], "--reps: 0 must be ≥ 1$"),  # not "below 100 ... use --quick"
        (["--op", "conv"], "--op"),
        (["--plot", "out.svg"], "--plot"),
    ],
)
def test_validation_names_the_option(argv, option):
    with pytest.raises(PingpongError, match=option):
        settings(*argv)


@pytest.mark.parametrize("argv, option", [
    (["--op", "grouped", "--dtype", "fp16"], "--dtype"),            # grouped runs bf16 or fp8, not fp16
    (["--op", "grouped", "--dtype", "fp8", "--products", "wgrad"], "--products"),  # no FP8 backward
    (["--op", "grouped", "--dtype", "fp8", "--scaling", "tensor"], "--scaling"),   # row- or block-wise only
    (["--op", "grouped", "--products", "train"], "--products: train .* needs --dtype fp8"),
    (["--op", "grouped", "--dtype", "fp8", "--products", "train", "forward"], "--products"),  # one of them
    (["--op", "grouped", "--dtype", "fp8", "--products", "train", "--scaling", "block"], "--scaling"),  # row_gw_hp
    (["--op", "grouped", "--dtype", "fp8", "--products", "train", "--fast-accum"], "--fast-accum"),
])
def test_grouped_options_refused_not_ignored(argv, option):
    with pytest.raises(PingpongError, match=option):
        settings(*argv)


@pytest.mark.parametrize("argv, option", [
    (["--op", "grouped", "--shapes", "5,5,5"], "--shapes: applies to --op gemm only"),
    (["--op", "grouped", "--suite", "llm"], "--suite: applies to --op gemm only"),
    (["--op", "grouped", "--csv", "x.csv"], "--csv: applies to --op gemm or vector_add only"),
    (["--op", "vector_add", "--plot", "x.png"], "--plot: applies to --op gemm only"),
    (["--op", "grouped", "--layout", "tn"], "--layout: applies to --op gemm only"),
    (["--scaling", "tensor"], "--scaling/--fast-accum: FP8 options; add --dtype fp8"),
    (["--fast-accum"], "--scaling/--fast-accum: FP8 options"),
])
def test_options_an_op_would_ignore_are_refused(argv, option):
    with pytest.raises(PingpongError, match=option):
        settings(*argv)


def test_grouped_fp8_dispatches_to_the_scaled_grouped_bench(monkeypatch):
    """--op grouped --dtype fp8 times scaled_grouped_mm (bench_grouped_fp8), with the options
    it was given; plain --op grouped the 16-bit grouped_mm bench."""
    from pingpong.tools import bench_grouped, bench_grouped_fp8

    calls = []
    monkeypatch.setattr(bench, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(bench, "fp8_gpu_reason", lambda: None)
    monkeypatch.setattr(bench_grouped_fp8, "run", lambda *a: calls.append(("fp8", a)) or 0)
    monkeypatch.setattr(bench_grouped, "run", lambda *a: calls.append(("bf16", a)) or 0)
    assert bench.run(parse("--op", "grouped", "--dtype", "fp8", "--fast-accum", "--tokens", "512",
                           "--models", "mixtral-8x7b", "--quick")) == 0
    assert bench.run(parse("--op", "grouped", "--quick")) == 0
    assert bench.run(parse("--op", "grouped", "--dtype", "fp8", "--scaling", "block", "--quick")) == 0
    (kind, a), (kind2, _), (kind3, a3) = calls
    assert (kind, kind2, kind3) == ("fp8", "bf16", "fp8")
    assert a[0] == ["mixtral-8x7b"] and a[1] == [512] and a[-2] is True  # models, tokens, fast accumulation
    assert a[-1] == "row" and a3[-1] == "block"  # the scaling


def test_grouped_fp8_train_dispatches_to_the_training_bench(monkeypatch):
    """--op grouped --dtype fp8 --products train times an MoE block's forward + backward
    (bench_grouped_fp8.run_training) with the models and tokens given."""
    from pingpong.tools import bench_grouped_fp8

    calls = []
    monkeypatch.setattr(bench, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(bench, "fp8_gpu_reason", lambda: None)
    monkeypatch.setattr(bench_grouped_fp8, "run_training", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(bench_grouped_fp8, "run", lambda *a: pytest.fail("the forward bench ran"))
    assert bench.run(parse("--op", "grouped", "--dtype", "fp8", "--products", "train", "--models", "deepseek-v3",
                           "--tokens", "8192", "--rounds", "2", "--quick")) == 0
    (a,) = calls
    assert a[:2] == (["deepseek-v3"], [8192]) and a[3] == 2  # models, tokens, reps, rounds


def test_grouped_fp8_train_table():
    from pingpong.tools.bench_grouped_fp8 import KEPT, TRAIN_RECIPES, format_training_rows

    def ok(ratio):
        r = dict(status="ok", rows=65536, ms_bf16=2.0, tf_bf16=300.0)
        for i, n in enumerate((*TRAIN_RECIPES, *KEPT)):
            f = ratio * (1 + i / 4)
            r.update({f"ms_{n}": 2.0 / f, f"ratio_{n}": f, f"lo_{n}": f * 0.9, f"hi_{n}": f * 1.1})
        return r

    rows = [dict(model="m", tokens=8192, routing="balanced", **ok(2.0)),
            dict(model="m", tokens=8192, routing="zipf", **ok(0.5)),
            dict(model="m", tokens=8192, routing="zipf", status="FAILED", rel_diff=0.5)]
    text = format_training_rows(rows)
    assert "FP8 row_gw_hp vs bf16 grouped_mm: geomean 1.000 over 2, min 0.500" in text and "FAILED" in text
    assert "FP8 row vs bf16 grouped_mm: geomean 1.250 over 2, min 0.625" in text
    assert "FP8 block vs bf16 grouped_mm: geomean 1.500 over 2, min 0.750" in text
    assert "FP8 row_gw_hp, the weights' FP8 copies kept vs bf16 grouped_mm: geomean 1.750 over 2, min 0.875" in text
    assert "FP8 block, the weights' FP8 copies kept vs bf16 grouped_mm: geomean 2.250 over 2, min 1.125" in text


def test_grouped_fp8_block_table():
    from pingpong.tools.bench_grouped_fp8 import format_block_rows

    ok = dict(status="ok", tf_ours=100.0, ms_ours=1.0, row_spread=(0.8, 0.9), loop_spread=(2.0, 4.0), loop="pingpong")
    rows = [dict(model="m", tokens=512, routing="balanced", ratio_row=0.8, ratio_loop=2.0, **ok),
            dict(model="m", tokens=512, routing="zipf", ratio_row=0.9, ratio_loop=8.0, **ok),
            dict(model="m", tokens=512, routing="zipf", status="FAILED", rel_diff=0.5)]
    text = format_block_rows(rows)
    assert "per-group loop / block-wise: geomean 4.000 over 2, min 2.000" in text
    assert "row-wise grouped / block-wise: geomean 0.849 over 2, min 0.800" in text and "FAILED" in text


def test_grouped_fp8_table():
    from pingpong.tools.bench_grouped_fp8 import format_rows

    ok = dict(status="ok", tf_ours=100.0, tf_torch=50.0, lo=1.9, hi=2.1)
    rows = [dict(model="m", tokens=512, routing="balanced", fast=False, ratio=2.0, **ok),
            dict(model="m", tokens=512, routing="zipf", fast=False, ratio=0.5, **ok),
            dict(model="m", tokens=512, routing="zipf", fast=True, torch_fast=False, ratio=1.5, **ok),
            dict(model="m", tokens=512, routing="balanced", fast=True, status="FAILED", rel_diff=0.5)]
    text = format_rows(rows)
    assert "promoted: geomean ratio (torch / ours) 1.000 over 2, min 0.500" in text
    assert "fast: geomean ratio (torch / ours) 1.500 over 1" in text
    assert "fast*" in text and "torch refused this accumulation mode" in text and "FAILED" in text


def test_quick_allows_few_reps():
    assert settings("--quick").reps == bench.QUICK_REPS
    assert settings("--quick", "--reps", "3").reps == 3
    assert settings("--reps", "250").reps == 250


def test_run_reports_bad_option_with_exit_2(capsys):
    assert bench.run(parse("--shapes", "1,2")) == 2
    assert "--shapes" in capsys.readouterr().err


# --------------------------------------------------------------------------- inputs


def test_layouts_strides_and_values():
    M, N, K = 3, 5, 7
    for layout, a_stride, b_stride in [
        ("nn", (K, 1), (N, 1)),
        ("nt", (K, 1), (1, K)),  # b is the (K, N) view of an (N, K) tensor
        ("tn", (1, M), (N, 1)),
        ("tt", (1, M), (1, K)),
    ]:
        a, b = bench.make_inputs(M, N, K, torch.float16, layout, seed=3)
        assert a.shape == (M, K) and b.shape == (K, N), layout
        assert a.stride() == a_stride and b.stride() == b_stride, layout
        assert a.dtype == b.dtype == torch.float16
    # same seed, same values whatever the storage; random normal, not zeros
    nt_a, nt_b = bench.make_inputs(M, N, K, torch.float32, "nt", seed=4)
    assert nt_b.t().is_contiguous() and (nt_b != 0).all() and nt_a.std() > 0.2


def test_make_inputs_rejects_unknown_layout():
    with pytest.raises(PingpongError, match="layout"):
        bench.make_inputs(2, 2, 2, torch.float16, "nx")


def test_rel_error_and_tflops():
    ref = torch.ones(4, 4)
    assert bench_rows.rel_error(ref, ref) == 0.0
    assert math.isnan(bench_rows.rel_error(torch.full((4, 4), float("nan")), ref))
    assert bench_rows.tflops(1000, 1000, 1000, 2.0) == pytest.approx(1.0)


def test_time_callable_grows_budget_until_enough_reps():
    calls = []

    def fake_bench(fn, warmup, rep, return_mode):
        assert return_mode == "all"
        calls.append(rep)
        n = int(rep / 2.0)  # "each repetition takes 2 ms"
        return [2.0 + 0.001 * i for i in range(n)]

    t = timing.time_callable(lambda: None, 100, bench=fake_bench)
    assert t.reps >= 100 and len(calls) == 2 and calls[0] == 100.0
    assert t.median_ms == pytest.approx(2.0, abs=0.2)


# --------------------------------------------------------------------------- rows and writers


@pytest.fixture
def rows():
    return [
        Row(2048, 2048, 2048, "hopper", "ok", 2e-3, 0.030, 0.027, 120, 130),
        Row(4096, 4096, 4096, "hopper", "ok", 3e-3, 0.200, 0.220, 100, 100),
        Row(100, 200, 300, "portable", "FAILED", rel_err=0.9),
        Row(64, 64, 64, "portable", "FAILED", rel_err=float("nan")),
    ]


def test_row_derived_columns(rows):
    r = rows[1]
    assert r.shape == "4096x4096x4096"
    assert r.ratio == pytest.approx(1.1)
    assert r.ours_tflops == pytest.approx(2 * 4096**3 / 0.2e-3 / 1e12)
    assert rows[2].ratio is None and rows[2].ours_tflops is None


def test_geomean_skips_failed(rows):
    assert bench.geomean_ratio(rows) == pytest.approx(math.sqrt(0.9 * 1.1))
    assert bench.geomean_ratio(rows[2:]) is None


def test_table(rows):
    text = bench.format_table(rows, {"device": "NVIDIA H100", "SM clock": "1980 MHz (nvidia-smi)"})
    lines = text.splitlines()
    assert lines[0] == "# device: NVIDIA H100"
    assert "ours/cuBLAS" in text and "rel.err" in text
    failed = next(line for line in lines if line.startswith("100x200x300"))
    assert "FAILED" in failed and "portable" in failed
    assert lines[-1].startswith("geometric mean ours/cuBLAS: 0.995 over 2")


def test_csv(tmp_path, rows):
    path = tmp_path / "r.csv"
    bench.write_csv(str(path), rows)
    got = list(csv.DictReader(path.open()))
    assert [r["shape"] for r in got] == ["2048x2048x2048", "4096x4096x4096", "100x200x300", "64x64x64"]
    assert float(got[1]["ratio"]) == pytest.approx(1.1)
    assert got[2]["status"] == "FAILED" and got[2]["ours_tflops"] == ""
    assert tuple(got[0]) == bench.FIELDS


def test_json(tmp_path, rows):
    path = tmp_path / "r.json"
    bench.write_json(str(path), rows, {"device": "test"})
    doc = json.loads(path.read_text())
    assert doc["header"] == {"device": "test"}
    assert len(doc["rows"]) == 4 and doc["rows"][2]["ratio"] is None
    assert doc["rows"][3]["rel_err"] == "nan"  # strict JSON: no bare NaN
    assert doc["geomean_ratio"] == pytest.approx(math.sqrt(0.99))


def test_png(tmp_path, rows):
    pytest.importorskip("matplotlib", reason="needs matplotlib, the plot extra: pip install -e '.[plot]'")
    path = tmp_path / "r.png"
    bench.write_plot(str(path), rows, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- no GPU / GPU


def test_no_gpu_message_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.run(parse("--shapes", "256")) == 2
    err = capsys.readouterr()
    assert "no CUDA GPU" in err.err and err.out == ""  # no numbers printed


def test_cli_wires_bench(monkeypatch, capsys):
    from pingpong.tools.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--quick"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_quick_run_on_gpu(tmp_path, capsys):
    csv_path, json_path = tmp_path / "r.csv", tmp_path / "r.json"
    rc = bench.run(parse("--shapes", "512,384,256", "--quick", "--csv", str(csv_path), "--json", str(json_path)))
    out = capsys.readouterr()
    assert rc == 0, out
    assert "512x384x256" in out.out and "geometric mean" in out.out
    assert "[1/1] 512x384x256" in out.err
    doc = json.loads(json_path.read_text())
    row = doc["rows"][0]
    assert row["status"] == "ok" and row["ours_tflops"] > 0 and row["cublas_tflops"] > 0
    assert row["ours_reps"] >= bench.QUICK_REPS and row["rel_err"] < bench.TOLERANCE["bf16"]
    assert doc["header"]["WARNING"].startswith("--quick")


def test_spin_fills_short_calls_only():
    """The queued timer's spin tops a short call up to QUEUE_US; a call as long gets none (a
    near-idle GPU between repetitions would raise a power-limited kernel's clock)."""
    assert timing.spin_us(13.0, 200.0) == 187.0
    assert timing.spin_us(200.0, 200.0) == 0.0 and timing.spin_us(900.0, 200.0) == 0.0


@pytest.mark.gpu
def test_timer_leaves_out_host_lag():
    """A call whose host work (a 150 µs sleep) outlasts the L2 flush: the queued timer gives the
    small kernel's GPU time; do_bench's own loop counts the host's lag (the reason for the spin)."""
    import time

    from triton.testing import do_bench

    x = torch.randn(1024, device="cuda")

    def slow_host():
        time.sleep(150e-6)
        x.mul_(1.0)

    for _ in range(3):  # the control: do_bench shows the lag unless other processes keep the GPU busy
        lagging = timing.time_callable(slow_host, 100, bench=do_bench).median_ms
        if lagging > 0.08:
            break
    else:
        pytest.skip(f"do_bench showed no host lag either ({lagging:.4f} ms: the GPU was busy with other"
                    " processes' work), so this run cannot tell the timers apart")
    # best of 3: other processes' kernels on a shared GPU (pytest-xdist workers) only add time
    # (up to 0.052 ms seen beside 9 busy workers). A timer that counted the lag would read at
    # least the 0.15 ms sleep; half of it separates the two with room for that contention.
    queued = min(timing.time_callable(slow_host, 100).median_ms for _ in range(3))
    assert queued < 0.075, (queued, lagging)


# --------------------------------------------------------------------------- one shape, CPU stand-ins


class FakeApi:
    """Stand-in for pingpong.api: `mode` picks a right, wrong, unwritten or raising result."""

    def __init__(self, mode="right"):
        self.mode = mode

    def path_for(self, a, b):
        return "fake"

    def matmul(self, a, b):
        if self.mode == "raise":
            raise RuntimeError("boom")
        return (a.float() @ b.float()).to(a.dtype) * (2.0 if self.mode == "wrong" else 1.0)

    def gemm_(self, c, a, b, *, alpha, beta):
        if self.mode != "unwritten":  # leaves c as it was: the NaN poison must catch it
            c.copy_(self.matmul(a, b))
        return c


def fake_timer(calls):
    def timer(fn, reps):
        fn()
        calls.append(reps)
        return timing.Timing(1.0, reps)

    return timer


@pytest.mark.parametrize("mode, status", [("right", "ok"), ("wrong", "FAILED"), ("unwritten", "FAILED"), ("raise", "ERROR")])
def test_bench_shape_checks_before_timing(mode, status):
    calls = []
    s = settings("--shapes", "33,17,40", "--dtype", "fp16", "--layout", "tn", "--quick")
    row = bench.bench_shape(33, 17, 40, s, FakeApi(mode), device="cpu", timer=fake_timer(calls))
    assert row.status.startswith(status) and row.path == "fake"
    if status == "ok":
        assert calls == [s.reps] * 2 * s.rounds and row.rel_err < 1e-3 and row.ratio == 1.0
    else:
        assert calls == [] and row.ours_ms is None  # a failing shape is never timed


def test_vector_add_runs_the_streaming_bench(monkeypatch):
    from pingpong.tools import bench_streaming as streaming_bench

    got = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(streaming_bench, "bench_vector_add", lambda s: got.append(s.op) or 1)
    assert bench.run(parse("--op", "vector_add", "--quick")) == 1 and got == ["vector_add"]


def test_overhead_gets_the_sizes_and_the_rounds(monkeypatch):
    from pingpong.tools import overhead

    got = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(overhead, "main", lambda argv: got.append(argv) or 0)
    assert bench.run(parse("--overhead", "--shapes", "64", "512,512,512", "--rounds", "5")) == 0
    assert got == [["--sizes", "64", "512", "--rounds", "5"]]


def test_rounds_alternate_and_report_the_spread():
    """Ours and cuBLAS alternate; per-round ratios give the spread, medians give the times."""
    order, cublas_ms = [], iter([1.0, 1.2, 0.9])
    s = settings("--shapes", "33,17,40", "--quick", "--rounds", "3")

    def timer(fn, reps):
        fn()
        is_ours = len(order) % 2 == 0
        order.append("ours" if is_ours else "cublas")
        return timing.Timing(1.0 if is_ours else next(cublas_ms), reps)

    row = bench.bench_shape(33, 17, 40, s, FakeApi("right"), device="cpu", timer=timer)
    assert order == ["ours", "cublas"] * 3
    assert (row.ratio, row.ratio_min, row.ratio_max) == (1.0, 0.9, 1.2)
    assert "0.900-1.200" in bench.format_table([row])
    with pytest.raises(PingpongError, match="--rounds"):
        settings("--rounds", "0")


# --------------------------------------------------------------------------- the correctness bound


def off_by(ref, rel, gen):
    """ref plus random normal noise of norm `rel`·‖ref‖: a result wrong by that relative error."""
    noise = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    return ref.double() + noise * (rel * torch.linalg.vector_norm(ref.double()) / torch.linalg.vector_norm(noise))


class OffByApi(FakeApi):
    """Returns the exact product plus noise of relative norm `rel`, rounded to the input type."""

    def __init__(self, rel):
        super().__init__()
        self.rel, self.gen = rel, torch.Generator().manual_seed(11)

    def matmul(self, a, b):
        return off_by(a.double() @ b.double(), self.rel, self.gen).to(a.dtype)


# The bounds the method promises (docs/benchmarking.md): a correct bf16 result is within a few
# units of bf16 rounding (2^-8) of the truth, an fp16 one within a few units of 2^-11; an error
# of 1.5e-2 (bf16) or 8e-3 (fp16) must be refused. These numbers are this test's, not read from
# the code: loosening the bench's bound past them, or tightening it below plain rounding, fails.
@pytest.mark.parametrize("dtype, rel, status", [
    ("bf16", 0.0, "ok"), ("bf16", 3e-3, "ok"), ("bf16", 1.5e-2, "FAILED"), ("bf16", 5e-2, "FAILED"),
    ("fp16", 0.0, "ok"), ("fp16", 5e-4, "ok"), ("fp16", 8e-3, "FAILED"), ("fp16", 3e-2, "FAILED"),
])
def test_a_slightly_wrong_result_is_refused(dtype, rel, status, monkeypatch):
    calls = []
    s = settings("--shapes", "96,80,64", "--dtype", dtype, "--quick")
    row = bench.bench_shape(96, 80, 64, s, OffByApi(rel), device="cpu", timer=fake_timer(calls))
    assert row.status == status, (dtype, rel, row.rel_err)
    assert row.rel_err == pytest.approx(rel, abs=4e-3 if dtype == "bf16" else 5e-4)
    assert (calls == []) == (status == "FAILED")  # never time a wrong result


def test_nan_is_never_within_tolerance():
    assert not bench.within_tolerance(math.nan, "bf16") and not bench.within_tolerance(math.nan, "fp16")


# --------------------------------------------------------------------------- output paths, per-shape failures


@pytest.mark.parametrize("option", ["--csv", "--json", "--plot"])
def test_unwritable_output_fails_before_timing(option, tmp_path, monkeypatch, capsys):
    if option == "--plot":
        pytest.importorskip("matplotlib", reason="needs matplotlib, the plot extra: pip install -e '.[plot]'")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # would time, if it got that far
    monkeypatch.setattr(bench, "bench_shapes", lambda *a, **k: pytest.fail("timed before checking the outputs"))
    for bad in (tmp_path / "no-such-dir" / "r.png", tmp_path):  # missing directory; a directory
        assert bench.run(parse("--shapes", "64", "--quick", option, str(bad))) == 2
        err = capsys.readouterr().err
        assert option in err and str(bad) in err


def test_output_check_keeps_existing_files_and_leaves_no_new_ones(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("keep me\n")
    new = tmp_path / "new.json"
    bench.check_outputs_writable(settings("--csv", str(old), "--json", str(new)))
    assert old.read_text() == "keep me\n" and not new.exists()


def test_a_failing_shape_is_reported_and_rows_are_written_as_they_finish(tmp_path, monkeypatch):
    """The second shape cannot be allocated: it becomes an ERROR row, the third is still timed,
    and when the second started the first was already on disk."""
    csv_path, json_path = tmp_path / "r.csv", tmp_path / "r.json"
    s = settings("--shapes", "32,24,16", "40,8,8", "48,16,24", "--dtype", "fp16", "--quick",
                 "--csv", str(csv_path), "--json", str(json_path))
    real_make_inputs = bench.make_inputs

    def make_inputs(M, N, K, *args):
        if M == 40:
            assert [r["shape"] for r in csv.DictReader(csv_path.open())] == ["32x24x16"]
            assert len(json.loads(json_path.read_text())["rows"]) == 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 TiB")
        return real_make_inputs(M, N, K, *args)

    monkeypatch.setattr(bench, "make_inputs", make_inputs)
    rows = bench.bench_shapes(s, FakeApi(), {"device": "test"}, device="cpu", timer=fake_timer([]))
    assert [r.status.split(":")[0] for r in rows] == ["ok", "ERROR", "ok"]
    assert "OutOfMemoryError" in rows[1].status and rows[1].ours_ms is None
    got = list(csv.DictReader(csv_path.open()))
    assert [r["status"].split(":")[0] for r in got] == ["ok", "ERROR", "ok"]
    assert len(json.loads(json_path.read_text())["rows"]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("position", [1.0, 1.3, 0.7])
def test_alternated_rounds_cancel_the_position_in_a_round(position):
    """Two workloads of 10 and 12 units, whichever is timed first in its round costing
    `position` times more: the order flips every round (a b, b a, ...), the pair ratio is the
    true 10/12 with no spread, and the position's factor is reported. Timing the rounds in one
    order, or summarizing single rounds, reads the position into the ratio."""
    import gc

    order, gc_off = [], []

    def timed(name, value):
        def run():
            order.append(name)
            gc_off.append(not gc.isenabled())
            return value * (position if len(order) % 2 == 1 else 1.0)
        return run

    p = timing.alternated(timed("a", 10.0), timed("b", 12.0), rounds=7)
    assert "".join(order) == "abba" * 4  # rounded up to whole pairs
    assert all(gc_off) and gc.isenabled()
    assert math.isclose(p.ratio, 10 / 12) and math.isclose(p.lo, p.hi) and p.iqr_pct < 1e-9
    assert math.isclose(p.position_effect, position)
    assert len(p.times) == 8 and math.isclose(p.times[1][1], 12.0 * position)


@pytest.mark.slow
@pytest.mark.parametrize("lead_in_cost", [0.0, 5.0])
def test_interleaved_steps_follow_the_other_workload(lead_in_cost):
    """Steps of 10 and 12 units on a fake clock; a step that follows a step of its own workload,
    or starts a round, costs `lead_in_cost` more (the penalty a block of steps paid when first
    in its round). Interleaved, every timed step follows the other workload: the ratio is the
    true 10/12, no spread, no position effect. Without the round's untimed lead-in step the
    first timed step pays the penalty and the position shows."""
    import gc

    clock, log, gc_off = [0.0], [], []

    def step(name, cost):
        def run():
            extra = lead_in_cost if not log or log[-1] in (name, "settle") else 0.0
            clock[0] += cost + extra
            log.append(name)
            gc_off.append(not gc.isenabled())
        return run

    p = timing.interleaved(step("a", 10.0), step("b", 12.0), steps=3, rounds=3, mark=lambda: clock[0],
                           elapsed_ms=lambda m0, m1: m1 - m0, settle=lambda: log.append("settle"))
    assert "".join(x[0] for x in log) == "sbabababs" "sabababas" * 1 + "sbabababs" "sabababas"  # lead-in, 3 pairs
    assert all(gc_off) and gc.isenabled()
    assert math.isclose(p.ratio, 10 / 12) and p.iqr_pct < 1e-9
    assert math.isclose(p.position_effect, 1.0)
    assert len(p.times) == 4 and all(math.isclose(a, 10.0) and math.isclose(b, 12.0) for a, b in p.times)


def test_changed_picks_lists_the_shapes_a_rule_change_moves(capsys):
    """benchmarks/changed_picks.py end to end (a git worktree of the base, each tree's picks in
    its own interpreter): against 69b37fa, before the FP8 swap-AB pieces and the two-piece
    tiles above the mid rows, the shapes it lists are ones whose pick moved, each with the
    working tree's rule_fp8 pick as its second."""
    import subprocess

    from bench_scripts import BENCHMARKS, load
    from pingpong.hopper.host.fp8_select import rule_fp8
    from pingpong.hopper.host.select import DEFAULT_SMS

    if subprocess.run(["git", "-C", str(BENCHMARKS.parent), "cat-file", "-e", "69b37fa^{commit}"], capture_output=True).returncode:
        pytest.skip("a checkout without revision 69b37fa (shallow, or not a git clone)")
    tool = load("changed_picks")
    assert tool.main(["--base", "69b37fa", "--dtype", "fp8", "--seeds", "1-3", "--rows", "129-4096"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan, "the change moved picks on these seeds"
    for M, N, K, (old, new) in plan:
        assert old != new and new == rule_fp8(M, N, K, True, DEFAULT_SMS, "tensor").name(), (M, N, K)


@pytest.mark.parametrize("plan", sorted(p.name for p in (BENCHMARKS / "data").glob("*_plan.json")))
def test_shipped_schedule_plans_hold_configs_the_kernel_takes(plan):
    """benchmarks/data's plans for `benchmarks/schedules.py --plan`: every [M, N, K, configs]
    row parses (schedules.parse_config) and each config passes the 16-bit kernel's checks, so a
    GPU run of the plan times every config instead of stopping at a refused one."""
    from bench_scripts import load

    schedules = load("schedules")
    rows = json.loads((BENCHMARKS / "data" / plan).read_text())
    assert rows
    for M, N, K, configs in rows:
        assert min(M, N, K) > 0 and configs, (M, N, K)
        for name in configs:
            schedules.parse_config(name).validate()



def test_chain_bench_refuses_bad_counts_and_skips_without_a_gpu(capsys):
    """benchmarks/chain_bench.py: a count below 1 is an argparse error naming it; with no GPU
    the script says so and exits 2 (as every benchmark script), before building anything."""
    from bench_scripts import load

    tool = load("chain_bench")
    with pytest.raises(SystemExit):
        tool.main(["--rows", "32", "0"])
    assert "--rows" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--configs", "cooperative:128x256x64"])  # configs time the product kinds: --products
    assert "--products" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--products", "--configs", "cooperative:100x256x64"])  # block_m no wgmma takes
    assert "cooperative:100x256x64" in capsys.readouterr().err
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run")
    assert tool.main([]) == 2
    assert "skipped" in capsys.readouterr().err


def test_chain_bench_chains_compute_the_layer():
    """The chains chain_bench.py times, on the CPU in float64: the layer chain is the layer's
    products with the sum and SiLU·up between them; the product chain returns the last product."""
    from bench_scripts import load

    tool = load("chain_bench")
    g = torch.Generator().manual_seed(0)
    ws = [[torch.randn(n, k, generator=g, dtype=torch.float64) for n, k in ((8, 8),) * 4 + ((16, 8),) * 2 + ((8, 16),)]
          for _ in range(2)]
    x = torch.randn(3, 8, generator=g, dtype=torch.float64)
    h = x
    for q, k, v, o, gate, up, down in ws:
        h = (h @ q.T + h @ k.T + h @ v.T) @ o.T
        h = (torch.nn.functional.silu(h @ gate.T) * (h @ up.T)) @ down.T
    assert torch.allclose(tool.layer_chain(torch.matmul, x, ws)(), h)
    assert torch.equal(tool.product_chain(torch.matmul, x, [ws[0][0], ws[1][0]])(), x @ ws[1][0].T)


def test_model_bench_profiles_each_model_in_alternated_rounds(monkeypatch):
    """model_bench's host column: each model profiled once a round, in the given order in even
    rounds and reversed in odd ones, and each side's median GEMM call reported."""
    from bench_scripts import load

    tool = load("model_bench")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    order, a = [], torch.randn(8, 8)
    fns = {"torch": lambda: order.append("torch") or a @ a,
           "pingpong": lambda: order.append("pingpong") or (a @ a, a @ a)}
    got = tool.host_us_per_gemm(fns, rounds=3)
    assert order == ["torch", "pingpong"] + ["torch", "pingpong", "pingpong", "torch", "torch", "pingpong"], order
    assert set(got) == {"torch", "pingpong"}
    calls = {name: sum(len(us) for us in kinds.values()) for name, (_, kinds) in got.items()}
    assert calls == {"torch": 3, "pingpong": 6}, calls
    assert all(us > 0 for us, _ in got.values())
    # the median over every round's calls, of each side apart: profiled calls of fixed µs
    times = iter([[1.0, 9.0], [5.0], [2.0, 3.0], [7.0], [4.0, 100.0], [6.0]])  # in call order (round 1 reversed)
    monkeypatch.setattr(tool, "gemm_calls", lambda events: {"aten::mm": next(times)})
    got = tool.host_us_per_gemm({"pingpong": lambda: None, "torch": lambda: None}, rounds=3)
    assert (got["pingpong"][0], got["torch"][0]) == (7.0, 4.0), got  # of 1, 9, 7, 4, 100 and 5, 2, 3, 6


def test_model_bench_counts_outermost_gemm_calls_by_kind():
    """model_bench's host µs per GEMM op: only the outermost GEMM op of a nest counts (a
    quantization's or a fallback's mm inside a pingpong op is part of it), each under its kind:
    the op, the plan a pingpong op ran, the shapes where recorded; other ops are left out."""
    from types import SimpleNamespace as Event

    from bench_scripts import load

    tool = load("model_bench")
    linear = Event(name="pingpong::linear", cpu_parent=None, cpu_time_total=30.0,
                   kwinputs={"plan": "hopper pingpong:64x32x128/g8/swap"}, input_shapes=[[32, 1536], [256, 1536], []])
    inner = Event(name="aten::mm", cpu_parent=Event(name="pingpong::quantize", cpu_parent=linear), cpu_time_total=9.0)
    mms = [Event(name="aten::mm", cpu_parent=Event(name="Torch-Compiled Region", cpu_parent=None), cpu_time_total=us,
                 input_shapes=[[32, 1536], [1536, 256]]) for us in (20.0, 22.0)]
    other = Event(name="aten::add", cpu_parent=None, cpu_time_total=99.0)
    kinds = tool.gemm_calls([linear, inner, *mms, other])
    assert kinds == {"pingpong::linear hopper pingpong:64x32x128/g8/swap [[32, 1536], [256, 1536]]": [30.0],
                     "aten::mm [[32, 1536], [1536, 256]]": [20.0, 22.0]}, kinds
    assert tool.gemm_kind(Event(name="aten::addmm")) == "aten::addmm"  # no shapes recorded, no plan
    table = tool.kinds_table(kinds).splitlines()
    assert "42" in table[1] and "aten::mm" in table[1] and "pingpong::linear" in table[2]  # dearest in all first


@pytest.mark.parametrize("op", ["gemm", "grouped"])
def test_fp8_bench_refuses_a_gpu_without_the_fp8_kernels(monkeypatch, capsys, op):
    """On an L4 (sm_89), an A100 or an MI300, pingpong's FP8 products do not run (Hopper only):
    --dtype fp8 exits 2 before any work, naming the GPU and what runs here, not one ERROR row per shape."""
    from pingpong.runtime import device
    from pingpong.tools import bench_grouped_fp8

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA L4")
    monkeypatch.setattr(device, "is_hopper", lambda index: False)
    monkeypatch.setattr(bench, "bench_shapes", lambda *a, **k: pytest.fail("the shapes were timed"))
    monkeypatch.setattr(bench, "environment_header", lambda *a, **k: pytest.fail("the run started"))
    monkeypatch.setattr(bench_grouped_fp8, "run", lambda *a: pytest.fail("the grouped FP8 bench ran"))
    assert bench.run(parse("--op", op, "--dtype", "fp8", "--quick")) == 2
    err = capsys.readouterr().err
    assert "--dtype fp8" in err and "Hopper (sm_90)" in err and "NVIDIA L4" in err and "bf16" in err
