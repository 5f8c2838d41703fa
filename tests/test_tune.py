"""`pingpong tune` on the CPU: argument errors (exit 2, nothing written), the refusal without a
GPU, and the search itself with a stand-in for the GPU measurement."""

import dataclasses
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from pingpong import KernelConfig
from pingpong.tools import tune
from pingpong.hopper.host import table as tables
from pingpong.hopper.host.select import Device, heuristic_config, select_config

H100 = Device("NVIDIA H100 80GB HBM3", 132)


@pytest.fixture(autouse=True)
def cache(tuning_cache):
    return tuning_cache


def cli(capsys, *args):
    """`pingpong tune ARGS` in this process: (exit code, stdout, stderr)."""
    from pingpong.tools.cli import main

    code = main(["tune", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, needle", [
    (["--shapes", "16,4096"], "--shapes: '16,4096' is not M,N,K"),
    (["--shapes", "a,b,c"], "--shapes: 'a,b,c' is not M,N,K"),
    (["--shapes", "0,4096,4096"], "--shapes: '0,4096,4096' has a size ≤ 0"),
    (["--shapes", "16,-1,4096"], "has a size ≤ 0"),
    (["--suite", "nope"], "--suite: unknown suite 'nope'; expected one of llm"),
    (["--shapes", "16,4096,4096", "--trials", "0"], "--trials: 0 must be ≥ 1"),
    (["--shapes", "16,4096,4096", "--quick", "--trials", "60"], "--trials: --quick measures its fixed grid"),
    (["--shapes", "16,4096,4096", "--layout", "xx"], "--layout"),
    ([], "nothing to tune"),
])
def test_bad_arguments_exit_2_and_write_nothing(args, needle, cache, capsys):
    code, _, err = cli(capsys, *args)
    assert code == 2 and needle in err, err
    assert not cache.exists()


def test_unwritable_cache_dir_exits_2(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PINGPONG_CACHE_DIR", str(blocker / "cache"))
    code, _, err = cli(capsys, "--shapes", "16,4096,4096")
    assert code == 2 and "cache directory" in err and "not a directory" in err
    assert blocker.read_text() == ""


def test_without_a_gpu_tune_refuses(cache):
    r = subprocess.run([sys.executable, "-m", "pingpong", "tune", "--suite", "largek", "--quick"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr
    assert not cache.exists()


def test_show_without_a_gpu_lists_tables(cache, capsys):
    code, out, _ = cli(capsys, "--show")
    assert code == 0 and "no table is active" in out


def test_show_without_a_gpu_says_which_tables_would_be_ignored(cache, capsys, monkeypatch):
    """A corrupt table, or one measured with another Triton, is not listed as if it were usable."""
    t = tables.Table(tables.TableKey.current(H100.name, H100.sms))
    t.add(16, 4096, 4096, "bf16", "bf16", "nt", KernelConfig(128, 16, 64, split_k=4, swap_ab=True), us=9.5)
    good = tables.write(t, tables.user_table_path(t.key))
    old = tables.user_table_path(dataclasses.replace(t.key, triton="2.0"))
    old.write_text(good.read_text().replace(f'"triton": "{t.key.triton}"', '"triton": "2.0"'))
    (cache / "tuning" / "broken.json").write_text("{not json")
    code, out, _ = cli(capsys, "--show")
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert code == 0
    assert "NVIDIA H100 80GB HBM3, 132 SMs" in lines[str(good)] and "ignored" not in lines[str(good)]
    assert "ignored" in lines[str(old)] and "triton 2.0" in lines[str(old)]
    assert "unreadable, ignored" in lines[str(cache / "tuning" / "broken.json")]
    monkeypatch.setattr(tables, "shipped_table_path", lambda key: cache / "nothing-shipped" / key.filename)
    for path in (cache / "tuning").iterdir():
        path.unlink()
    code, out, _ = cli(capsys, "--show")
    assert code == 0 and "no tuning table found" in out, out


# ----------------------------------------------------------------------------- search


class FakeGPU:
    """Times a config by a made-up cost; `wrong` configs fail their check."""

    def __init__(self, wrong=()):
        self.measured = []
        self.wrong = set(wrong)

    def __call__(self, config):
        config.validate()  # tune never runs an invalid config
        self.measured.append(config)
        if config in self.wrong:
            return tune.Result(config, None, "wrong result")
        return tune.Result(config, 1.0 + 0.01 * config.block_n + 0.1 * abs(config.split_k - 3) + 0.5 * config.swap_ab)


def settings(**kw):
    return dataclasses.replace(tune.Settings(shapes=((512, 512, 65536),)), **kw)


def test_quick_grid_measures_heuristic_first_each_config_once():
    gpu = FakeGPU()
    results = tune.search(512, 512, 65536, settings(quick=True), gpu)
    assert gpu.measured[0] == heuristic_config(512, 512, 65536)
    planned = tune.planned(512, 512, 65536, settings(quick=True))
    assert len(gpu.measured) == len(set(gpu.measured)) == len(results) == planned
    assert 3 <= len(results) <= 28  # a quick grid: a few seconds a shape


@pytest.mark.parametrize("M", [17, 64, 128, 256])
def test_quick_grid_tries_every_mid_size_width(M):
    """The mid-size 64-row ping-pong tiles (select's pick for 17..128 rows is one of them, and
    which one wins depends on the GPU) are all measured up to twice that many rows."""
    grid = tune.quick_grid(M, 4096, 4096)
    for bn in (96, 64, 32):
        assert KernelConfig(64, bn, 64, schedule="pingpong") in grid, bn


def test_quick_grid_tries_the_medium_tile_on_both_schedules_and_the_few_tile_tiles():
    """Cooperative 128×128 won 512×28672×4096 where the heuristic picks 128×192 (RESULTS.md
    run 96); the few-tile 64-row tiles are select's pick below half a wave of 128×128."""
    grid = tune.quick_grid(512, 28672, 4096)
    assert KernelConfig(128, 128, 64) in grid and KernelConfig(128, 128, 64, schedule="pingpong") in grid
    for bn in (128, 64):
        assert KernelConfig(64, bn, 64, schedule="pingpong") in grid, bn


def test_the_current_table_config_is_measured_second():
    """A search starts from the heuristic's config and the active table's, so the table it
    writes is never worse (on that run) than the one it started from."""
    gpu = FakeGPU()
    current = KernelConfig(128, 256, 64, split_k=4)
    results = tune.search(512, 6144, 4096, settings(trials=5), gpu, current=current)
    assert gpu.measured[:2] == [heuristic_config(512, 6144, 4096), current]
    assert len(results) == 5


def test_small_space_is_brute_forced():
    space = tune.space(64, 64, 128)  # K = 128: two k-steps, so every split_k normalizes to 1 or 2
    gpu = FakeGPU()
    tune.search(64, 64, 128, settings(trials=10_000), gpu)
    assert set(gpu.measured) == set(space) | {tune.normalize(heuristic_config(64, 64, 128), 64, 64, 128)}
    assert all(c.split_k <= 2 for c in gpu.measured)


def test_space_is_valid_and_deduplicated():
    space = tune.space(16, 4096, 4096)
    assert len(space) == len(set(space)) > 50
    for c in space:
        c.validate()
        assert tune.normalize(c, 16, 4096, 4096) == c
    # one or two 64-element k-steps per ring slot (select's small tiles take two)
    assert {c.block_k for c in space} == {64, 128}


@pytest.mark.parametrize("optuna", [True, False])
def test_budget_search_with_and_without_optuna(optuna, monkeypatch):
    if optuna:
        pytest.importorskip("optuna", reason="needs optuna, the tune extra: pip install -e '.[tune]'")
    else:
        monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna -> ImportError
    gpu = FakeGPU()
    results = tune.search(16, 4096, 4096, settings(trials=12, seed=1), gpu)
    assert len(gpu.measured) == len(set(gpu.measured)) == len(results)
    assert 2 <= len(results) <= 12


def test_wrong_configs_never_win():
    h = heuristic_config(512, 512, 65536)
    gpu = FakeGPU(wrong={h})
    best = tune.best(tune.search(512, 512, 65536, settings(quick=True), gpu))
    assert best is not None and best.config != h and best.ms is not None


def test_run_writes_a_table_select_config_reads(monkeypatch, cache, capsys):
    monkeypatch.setattr(tune, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(tune, "current_device", lambda: H100)
    monkeypatch.setattr(tune, "gpu_measure", lambda M, N, K, s: FakeGPU())
    monkeypatch.setattr(tune, "cublas_ms", lambda M, N, K, s: 2.0)
    import argparse

    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    assert tune.run(p.parse_args(["--suite", "largek", "--quick"])) == 0
    path = tables.user_table_path(tables.TableKey.current(H100.name, H100.sms))
    doc = json.loads(path.read_text())
    assert len(doc["entries"]) == 3 and doc["key"]["gpu"] == H100.name
    tuned = KernelConfig(**doc["entries"][0]["config"])
    e = doc["entries"][0]
    assert select_config(e["M"], e["N"], e["K"], device=H100) == tuned
    assert "tuning table:" in capsys.readouterr().out


def test_show_prints_the_active_table(monkeypatch, capsys):
    monkeypatch.setattr(tune, "no_gpu_reason", lambda: None)
    untuned = Device("A GPU nobody tuned", 132)
    monkeypatch.setattr(tune, "current_device", lambda: untuned)
    code, out, _ = cli(capsys, "--show")
    assert code == 0 and "no tuning table for A GPU nobody tuned" in out and "the heuristic chooses" in out
    monkeypatch.setattr(tune, "current_device", lambda: H100)
    shipped = sorted(Path(str(resources.files("pingpong") / "tables")).glob("nvidia-h100-80gb-hbm3-132sm-triton*.json"))[-1]
    monkeypatch.setattr(tables, "minor", lambda version: shipped.name.rsplit("triton", 1)[1][:-len(".json")])
    code, out, _ = cli(capsys, "--show")
    assert code == 0 and f"pingpong/tables/{shipped.name}" in out  # the shipped table of that Triton
    t = tables.Table(tables.TableKey.current(H100.name, H100.sms))
    t.add(16, 4096, 4096, "bf16", "bf16", "nt", KernelConfig(128, 16, 64, split_k=4, swap_ab=True), us=9.5,
          cublas_us=20.0)
    tables.write(t, tables.user_table_path(t.key))
    code, out, _ = cli(capsys, "--show")
    assert code == 0 and "16x4096x4096 bf16 nt: 128x16x64 cooperative split_k=4 swap_ab=True  9.5 us" in out


def test_clusters_are_searched_only_when_asked():
    """--clusters adds the 2-CTA twin of every candidate that can pair (one split, no swap, one
    piece); without it no cluster config is measured (none measured faster yet)."""
    plain, paired = tune.quick_grid(1024, 1024, 1024), tune.quick_grid(1024, 1024, 1024, clusters=True)
    assert all(c.cluster_m == 1 for c in plain) and all(c.cluster_m == 1 for c in tune.space(512, 4096, 4096))
    twins = [c for c in paired if c.cluster_m == 2]
    assert twins and all(c.schedule != "persistent" and c.split_k == 1 and not c.swap_ab for c in twins)
    assert {dataclasses.replace(c, cluster_m=1) for c in twins} <= set(plain)
    space = tune.space(512, 4096, 4096, clusters=True)
    assert any(c.cluster_m == 2 for c in space) and len(space) == len(set(space))
    gpu = FakeGPU()
    tune.search(1024, 1024, 1024, settings(quick=True, clusters=True), gpu)
    assert any(c.cluster_m == 2 for c in gpu.measured)
    assert tune.planned(1024, 1024, 1024, settings(quick=True, clusters=True)) == len(gpu.measured)


def test_the_search_includes_stream_k_and_the_mid_rows_whole_tiles():
    """Stream-K (on the heuristic's tile and 128×128) and, for mid rows, the mid-rows model's
    whole tiles (128×160, swap-AB 64×144/160/192) and its narrow tiles where their row limits
    hold M are in the quick grid; the full space holds
    stream-K twins (never split: stream-K divides K itself) and the two-piece widths; a
    sampler's stream-K trial builds a config that validates."""
    from pingpong.hopper.host.select import MID_ROWS_NARROW, MID_ROWS_NARROW_SWAP, MID_ROWS_WHOLE_TILES

    grid = tune.quick_grid(372, 3072, 8192)
    assert KernelConfig(128, 128, 64, stream_k=True) in grid
    assert any(c.stream_k and c.block_n == heuristic_config(372, 3072, 8192).block_n for c in grid)
    for c in MID_ROWS_WHOLE_TILES:
        assert c in grid, c
    assert not any(c.block_n in (144, 160) for c in tune.quick_grid(2048, 4096, 4096)), "whole tiles: mid rows only"
    assert set(MID_ROWS_WHOLE_TILES) <= set(tune.quick_grid(82, 16384, 4096)), "82 rows the mid-rows model decides"
    assert set(MID_ROWS_NARROW_SWAP) <= set(tune.quick_grid(75, 16384, 4096)), "the narrow swap-AB tiles holding M"
    assert KernelConfig(128, 80, 64, swap_ab=True) not in tune.quick_grid(82, 16384, 4096), "80 columns hold no 82 rows"
    assert set(MID_ROWS_NARROW) <= set(tune.quick_grid(112, 9216, 4096)), "the narrow cooperative tile"
    assert set(MID_ROWS_NARROW) <= set(tune.quick_grid(200, 9216, 4096)), "its last row of tiles 72 of 128"
    assert set(MID_ROWS_NARROW) <= set(tune.quick_grid(406, 9216, 4096)), "22 of 128 (its last row of tiles ends at M)"
    assert not set(MID_ROWS_NARROW) & set(tune.quick_grid(576, 9216, 4096)), "past its 512 rows"
    space = tune.space(372, 3072, 8192)
    streamed = [c for c in space if c.stream_k]
    assert streamed and all(c.split_k == 1 for c in streamed)
    assert {(c.block_m, c.block_n) for c in space} >= {(128, 160), (64, 144)}
    assert set(MID_ROWS_WHOLE_TILES) <= set(space), "the full space holds the swap-AB tiles the selection picks"
    params = {"tile": "128x128", "k_bytes": 128, "schedule": "cooperative", "split_k": 4, "stream_k": True}
    built = KernelConfig(**tune._trial_config(params, 2))
    assert built.stream_k and built.split_k == 1
    built.validate()
