"""`pingpong tune --dtype fp8` on the CPU: the FP8 search space, the table entries select_fp8
reads (and select_config does not), the CLI's refusals, and the whole tune loop with a stand-in
for the GPU measurement. Nothing here has run on a GPU."""

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from pingpong import KernelConfig
from pingpong.errors import ConfigError
from pingpong.hopper.host import fp8_launch
from pingpong.hopper.host import table as tables
from pingpong.hopper.host.fp8_launch import check_fp8_config, choose_fp8, scale_boxes, select_fp8
from pingpong.hopper.host.select import Device, choose, select_config
from pingpong.runtime import spec as specs
from pingpong.tools import tune

H100 = Device("NVIDIA H100 80GB HBM3", 132)
#: (scaling, promote) pairs scaled_mm can run: block-wise always promotes
PROBLEMS = [("tensor", True), ("tensor", False), ("row", True), ("row", False), ("block", True)]
SHAPES = [(16, 8192, 8192), (100, 4096, 4096), (512, 4096, 4096), (8192, 8192, 8192)]


@pytest.fixture(autouse=True)
def cache(tuning_cache):
    return tuning_cache


def runs_on_fp8_kernel(c: KernelConfig, scaling: str, promote: bool) -> None:
    """What the FP8 kernel takes (raises ConfigError otherwise), for bench_fp8's inputs: b scales
    in 128×128 blocks, bf16 output (split-K and, for tensor/row scales, swap-AB included)."""
    check_fp8_config(c, promote, 2, scale_boxes(scaling, 128, c))
    assert c.block_k == 128 and c.cluster_m == 1 and not (c.swap_ab and scaling == "block"), c


def settings(**kw):
    return dataclasses.replace(tune.Settings(shapes=((512, 4096, 4096),), dtype="fp8"), **kw)


# ----------------------------------------------------------------------------- the space


@pytest.mark.parametrize("scaling, promote", PROBLEMS)
@pytest.mark.parametrize("M, N, K", SHAPES)
def test_fp8_space_is_valid_deduplicated_and_spans_the_factors(scaling, promote, M, N, K):
    space = tune.fp8_space(M, N, K, scaling, promote)
    assert len(space) == len(set(space)) >= 10
    for c in space:
        runs_on_fp8_kernel(c, scaling, promote)
        assert tune.fp8_normalize(c, M, N, K, scaling, promote) == c
    assert {c.schedule for c in space} == {"cooperative", "pingpong"}
    assert {c.block_m for c in space} == {64, 128}
    widths = {c.block_n for c in space}
    assert {64, 128} <= widths
    # two column pieces (128×192 = 128 + 64, 128×96 = 64 + 32, the mid-rows model's) run
    # cooperative and unsplit, with tensor- and row-wise scales
    assert (192 in widths) == (96 in widths) == (scaling != "block")
    assert all(c.schedule == "cooperative" and c.split_k == 1 and c.block_m == 128 for c in space
               if c.block_n in (192, 96))
    assert len({c.stages for c in space}) >= 2
    if M >= 512:  # several tile rows: the raster's band height is a factor
        assert len({c.group_m for c in space}) >= 2
    if not promote:  # one accumulator: the widest tile fits; promoted, 2 × 128 registers do not
        assert any(c.block_m == 128 and c.block_n == 256 for c in space)
    else:
        assert not any(c.block_m == 128 and c.block_n == 256 and c.schedule == "cooperative" for c in space)


def test_fp8_normalize_merges_configs_that_run_alike():
    c = KernelConfig(128, 128, 128)
    derived = check_fp8_config(c, True, 2).stages
    assert tune.fp8_normalize(dataclasses.replace(c, stages=derived), 8192, 8192, 8192, "row", True) == c
    assert tune.fp8_normalize(dataclasses.replace(c, stages=3), 8192, 8192, 8192, "row", True).stages == 3
    # 256 rows are 2 tile rows: any band of ≥ 2 rows rasterizes them alike
    assert tune.fp8_normalize(dataclasses.replace(c, group_m=16), 256, 8192, 8192, "row", True).group_m == 2


@pytest.mark.parametrize("scaling, promote", PROBLEMS)
@pytest.mark.parametrize("M, N, K", SHAPES)
def test_fp8_quick_grid_holds_select_fp8s_pick(scaling, promote, M, N, K):
    grid = tune.fp8_quick_grid(M, N, K, scaling, promote)
    pick = select_fp8(M, N, K, promote, 132, scaling=scaling)
    assert tune.fp8_normalize(pick, M, N, K, scaling, promote) == grid[0]
    assert 3 <= len(grid) == len(set(grid)) <= 16
    for c in grid:
        runs_on_fp8_kernel(c, scaling, promote)
    assert {c.schedule for c in grid} == {"cooperative", "pingpong"}


class FakeFp8GPU:
    """Times an FP8 config by a made-up cost (64×64 ping-pong, band of 1, fewest stages
    fastest); refuses, as the kernel would, a config check_fp8_config rejects."""

    def __init__(self, scaling="row", promote=True, wrong=()):
        self.scaling, self.promote, self.wrong, self.measured = scaling, promote, set(wrong), []

    def __call__(self, config):
        runs_on_fp8_kernel(config, self.scaling, self.promote)  # tune never runs an invalid config
        self.measured.append(config)
        if config in self.wrong:
            return tune.Result(config, None, "wrong result")
        return tune.Result(config, self.cost(config))

    @staticmethod
    def cost(config):
        return (1.0 + 0.01 * config.block_n + 0.002 * config.block_m + 0.1 * (config.schedule == "cooperative")
                + 0.001 * config.group_m + 0.01 * (config.stages or 7))


def test_fp8_search_measures_the_rule_first_each_config_once():
    gpu = FakeFp8GPU()
    results = tune.search(512, 4096, 4096, settings(quick=True), gpu)
    assert gpu.measured[0] == tune.fp8_normalize(select_fp8(512, 4096, 4096, True, 132), 512, 4096, 4096, "row", True)
    assert len(gpu.measured) == len(set(gpu.measured)) == len(results) == tune.planned(512, 4096, 4096,
                                                                                        settings(quick=True))


@pytest.mark.parametrize("optuna", [True, False])
@pytest.mark.parametrize("scaling, fast", [("row", False), ("tensor", True), ("block", False)])
def test_fp8_budget_search_with_and_without_optuna(optuna, scaling, fast, monkeypatch):
    if optuna:
        pytest.importorskip("optuna", reason="needs optuna, the tune extra: pip install -e '.[tune]'")
    else:
        monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna -> ImportError
    gpu = FakeFp8GPU(scaling, scaling == "block" or not fast)
    results = tune.search(8192, 8192, 8192, settings(trials=12, seed=1, scaling=scaling, fast_accum=fast), gpu)
    assert len(gpu.measured) == len(set(gpu.measured)) == len(results)
    assert 2 <= len(results) <= 12


def test_fp8_small_space_is_brute_forced():
    gpu = FakeFp8GPU()
    tune.search(16, 8192, 8192, settings(trials=10_000), gpu)
    pick = tune.fp8_normalize(select_fp8(16, 8192, 8192, True, 132, scaling="row"), 16, 8192, 8192, "row", True)
    assert pick.swap_ab  # the rule's decode tile: measured too, though the space holds no swap-AB tile
    assert set(gpu.measured) == set(tune.fp8_space(16, 8192, 8192, "row", True)) | {pick}


# ----------------------------------------------------------------------------- the table


def write(entries):
    """A user table for H100 of (M, N, K, dtype, config) entries (bf16 output, layout nt), each
    well ahead of the rule's config at its shape (so near shapes take it: select.NEAR_GAIN)."""
    t = tables.Table(tables.TableKey.current(H100.name, H100.sms))
    for M, N, K, dtype, config in entries:
        t.add(M, N, K, dtype, "bf16", "nt", config, us=10.0, heuristic_us=12.0)
    return str(tables.write(t, tables.user_table_path(t.key)))


def fp8(M, N, K, scaling="row", promote=True, kind="e4m3", out_bytes=2, sb_cols=128):
    return choose_fp8(M, N, K, promote, H100.sms, H100.name, scaling, sb_cols, out_bytes, kind)


def test_fp8_keys_name_the_problem():
    keys = {tables.fp8_key(k, s, p) for k in ("e4m3", "e5m2") for s, p in PROBLEMS}
    assert len(keys) == 10 and not keys & {"bf16", "fp16", "fp32"}
    assert tables.fp8_key("e4m3", "row", True) == "fp8e4m3-row"
    assert tables.fp8_key("e4m3", "row", False) == "fp8e4m3-row-fast"


def test_an_fp8_entry_answers_select_fp8_and_not_select_config():
    tuned = KernelConfig(64, 64, 128, schedule="pingpong", group_m=1)
    path = write([(512, 4096, 4096, "fp8e4m3-row", tuned)])
    rule = select_fp8(512, 4096, 4096, True, 132)
    assert rule != tuned
    assert fp8(512, 4096, 4096) == (tuned, path)
    assert fp8(500, 4000, 4200)[0] == tuned  # the same buckets
    assert select_fp8(512, 4096, 4096, True, 132, H100.name, "row") == tuned
    assert fp8(512, 4096, 4096, "row", False) == (select_fp8(512, 4096, 4096, False, 132), "rule")  # fast: own key
    assert fp8(512, 4096, 4096, "tensor") == (rule, "rule")
    assert fp8(512, 4096, 4096, "block") == (rule, "rule")
    assert fp8(512, 4096, 4096, kind="e5m2") == (rule, "rule")
    assert fp8(4096, 4096, 4096) == (select_fp8(4096, 4096, 4096, True, 132), "rule")  # another M bucket
    assert select_fp8(512, 4096, 4096, True, 132) == rule  # no GPU named: no table
    for dtype in ("bf16", "fp16"):  # the 16-bit GEMM never reads an FP8 entry
        assert choose(512, 4096, 4096, (dtype, dtype), "nt", H100)[1] == "heuristic"


def test_a_bf16_entry_does_not_answer_select_fp8():
    tuned = KernelConfig(64, 64, 128, schedule="pingpong")  # valid for both products
    path = write([(512, 4096, 4096, "bf16", tuned)])
    assert choose(512, 4096, 4096, device=H100) == (tuned, path)
    for scaling, promote in PROBLEMS:
        assert fp8(512, 4096, 4096, scaling, promote)[1] == "rule"


@pytest.mark.parametrize("bad, why", [
    (KernelConfig(128, 256, 128), "two 128-register accumulators"),
    (KernelConfig(64, 256, 128, schedule="pingpong"), "two 128-register accumulators"),
    (KernelConfig(128, 128, 64), "block_k 64"),
    (KernelConfig(64, 192, 128, schedule="pingpong"), "two column pieces on ping-pong"),
    (KernelConfig(128, 128, 128, schedule="persistent"), "persistent schedule"),
])
def test_an_fp8_entry_the_kernel_cannot_run_falls_back_to_the_rule(bad, why):
    with pytest.raises(ConfigError):
        check_fp8_config(bad, True, 2)
    write([(512, 4096, 4096, "fp8e4m3-row", bad)])
    assert fp8(512, 4096, 4096) == (select_fp8(512, 4096, 4096, True, 132), "rule"), why


def test_an_entry_valid_for_row_scales_but_not_block_scales_falls_back_there():
    """Explicit stages that fit row-wise but not with block-wise scale boxes in every slot."""
    c = KernelConfig(128, 128, 128, stages=6)
    check_fp8_config(c, True, 2, scale_boxes("row", 128, c))
    with pytest.raises(ConfigError):
        check_fp8_config(c, True, 2, scale_boxes("block", 128, c))
    write([(512, 4096, 4096, "fp8e4m3-row", c), (512, 4096, 4096, "fp8e4m3-block", c)])
    assert fp8(512, 4096, 4096, "row")[0] == c
    assert fp8(512, 4096, 4096, "block") == (select_fp8(512, 4096, 4096, True, 132), "rule")


def test_a_table_with_fp8_entries_still_reads():
    """FP8 entries are validated as 1-byte configs: 6 stages of 128×128×128 fit in fp8 but not
    in bf16, and must not make the reader throw the whole table away."""
    fp8_only = KernelConfig(128, 128, 128, stages=6)
    with pytest.raises(ConfigError):
        fp8_only.validate(2, 2)
    bf16 = KernelConfig(128, 128, 64, schedule="pingpong")
    path = write([(512, 4096, 4096, "fp8e4m3-row", fp8_only), (512, 4096, 4096, "bf16", bf16)])
    tables.clear_cache()
    assert choose(512, 4096, 4096, device=H100) == (bf16, path)
    assert fp8(512, 4096, 4096) == (fp8_only, path)


def test_the_fp8_plan_takes_its_config_from_the_table(monkeypatch):
    """fp8_launch.plan hands select_fp8 the GPU, the scaling, the out dtype and the fp8 kind of
    the call (CPU tensors; the device facts faked)."""
    tuned = KernelConfig(64, 64, 128, schedule="pingpong", group_m=1)
    write([(512, 4096, 4096, "fp8e4m3-row", tuned), (512, 4096, 4096, "fp8e4m3-block", tuned)])
    monkeypatch.setattr(fp8_launch.Device, "of", classmethod(lambda cls, device, carveout=None: H100))

    def planned(dtype=torch.float8_e4m3fn, fast=False, out=torch.bfloat16, block=False):
        a = torch.zeros(512, 4096, dtype=dtype)
        w = torch.zeros(4096, 4096, dtype=dtype)
        sa, sw = (torch.ones(4096 // 128, 512).t(), torch.ones(32, 32)) if block else (torch.ones(512, 1),
                                                                                      torch.ones(4096, 1))
        return fp8_launch.plan(specs.build(a, w.t(), out_dtype=out, scales=(sa, sw.t(), fast))).config

    rule = select_fp8(512, 4096, 4096, True, 132)
    assert planned() == tuned
    assert planned(block=True) == tuned
    assert planned(fast=True) == select_fp8(512, 4096, 4096, False, 132)
    assert planned(dtype=torch.float8_e5m2) == rule
    assert planned(out=torch.float32) == tuned  # 4-byte output: still fits


# ----------------------------------------------------------------------------- the command line


def cli(capsys, *args):
    from pingpong.tools.cli import main

    code = main(["tune", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, needle", [
    (["--dtype", "fp8", "--scaling", "col"], "--scaling: 'col' is not one of tensor, row, block"),
    (["--dtype", "fp8", "--scaling", "Row"], "--scaling: 'Row' is not one of"),
    (["--scaling", "row"], "--scaling/--fast-accum: FP8 options; add --dtype fp8"),
    (["--fast-accum"], "--scaling/--fast-accum: FP8 options"),
    (["--dtype", "fp8", "--scaling", "block", "--fast-accum"], "--fast-accum: block-wise scales always promote"),
    (["--dtype", "fp8", "--layout", "nn"], "--layout: 'nn'; FP8 operands are K-major"),
    (["--dtype", "fp8", "--clusters"], "--clusters: the FP8 kernel runs no clusters"),
    (["--dtype", "fp9"], "--dtype: 'fp9' is not one of bf16, fp16, fp8"),
])
def test_bad_fp8_arguments_exit_2_and_write_nothing(args, needle, cache, capsys):
    code, _, err = cli(capsys, "--shapes", "512,4096,4096", *args)
    assert code == 2 and needle in err, err
    assert not cache.exists()


def test_without_a_gpu_fp8_tune_refuses(cache):
    r = subprocess.run([sys.executable, "-m", "pingpong", "tune", "--dtype", "fp8", "--scaling", "block",
                        "--shapes", "512,4096,4096", "--quick"], capture_output=True, text=True)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr, r.stderr
    assert not cache.exists()


def test_fp8_tune_run_writes_entries_select_fp8_reads(monkeypatch, cache, capsys):
    monkeypatch.setattr(tune, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(tune, "current_device", lambda: H100)
    gpus = {}

    def measure(M, N, K, s):
        gpus[M, N, K, s.scaling, s.fast_accum] = FakeFp8GPU(s.scaling, s.scaling == "block" or not s.fast_accum)
        return gpus[M, N, K, s.scaling, s.fast_accum]

    monkeypatch.setattr(tune, "gpu_measure", measure)
    monkeypatch.setattr(tune, "cublas_ms", lambda M, N, K, s: 2.0)
    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    shapes = ["--shapes", "512,4096,4096", "16,8192,8192"]
    assert tune.run(p.parse_args(["--dtype", "fp8", "--scaling", "row", "--quick", *shapes])) == 0
    assert tune.run(p.parse_args(["--dtype", "fp8", "--scaling", "row", "--fast-accum", "--trials", "6",
                                  *shapes])) == 0
    path = tables.user_table_path(tables.TableKey.current(H100.name, H100.sms))
    doc = json.loads(path.read_text())
    assert sorted((e["M"], e["dtype"]) for e in doc["entries"]) == [
        (16, "fp8e4m3-row"), (16, "fp8e4m3-row-fast"), (512, "fp8e4m3-row"), (512, "fp8e4m3-row-fast")]
    for e in doc["entries"]:
        promote = not e["dtype"].endswith("-fast")
        gpu = gpus[e["M"], e["N"], e["K"], "row", not promote]
        tuned = KernelConfig(**e["config"])
        fastest = min(gpu.measured, key=lambda c: gpu.cost(c))
        assert tuned == fastest and e["out_dtype"] == "bf16" and e["layout"] == "nt" and e["cublas_us"] == 2000.0
        assert select_fp8(e["M"], e["N"], e["K"], promote, 132, H100.name, "row") == tuned
        assert choose(e["M"], e["N"], e["K"], device=H100)[1] == "heuristic"  # not a bf16 entry
    assert "tuning table:" in capsys.readouterr().out
    # a second run measures the table's config right after the rule's
    gpu = FakeFp8GPU()
    current = tune.tabled_config(512, 4096, 4096, settings(), H100)
    assert current == select_fp8(512, 4096, 4096, True, 132, H100.name, "row")
    tune.search(512, 4096, 4096, settings(trials=4), gpu, current=current)
    assert gpu.measured[1] == current


def test_show_lists_fp8_entries(monkeypatch, capsys):
    monkeypatch.setattr(tune, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(tune, "current_device", lambda: H100)
    t = tables.Table(tables.TableKey.current(H100.name, H100.sms))
    t.add(16, 4096, 4096, "bf16", "bf16", "nt", KernelConfig(128, 16, 64, split_k=4, swap_ab=True), us=9.5,
          cublas_us=20.0)
    t.add(512, 4096, 4096, "fp8e4m3-row-fast", "bf16", "nt", KernelConfig(64, 128, 128, schedule="pingpong", group_m=4),
          us=7.5, cublas_us=8.0)
    tables.write(t, tables.user_table_path(t.key))
    code, out, _ = cli(capsys, "--show")
    assert code == 0 and "16x4096x4096 bf16 nt: 128x16x64 cooperative split_k=4 swap_ab=True  9.5 us" in out
    assert ("512x4096x4096 fp8e4m3-row-fast nt: 64x128x128 pingpong group_m=4 stages=auto  7.5 us"
            " (torch._scaled_mm 8.0 us)") in out


@pytest.mark.parametrize("scaling, promote", PROBLEMS)
def test_fp8_space_holds_split_k_and_decode_swap_ab(scaling, promote):
    """Split-K everywhere; swap-AB with tensor- or row-wise scales only: 16-64 columns of M for
    decode rows, ping-pong 64×64 up to the FP8 mid-rows model's limit for it (192 rows), the
    two-piece 64×144 and 64×160 from 129 rows up to their widths, the cooperative 128×128-192
    (staged through TMA) from 129 rows up to the FP8 rule's last row for them
    (fp8_select.STAGED_SWAP_MAX_M), none beyond, the narrow staged 128×80 and 128×96 from 65
    rows up to their widths; the selection's swap-AB pick at 150 rows is in the space."""
    from pingpong.hopper.host.fp8_select import STAGED_SWAP_MAX_M

    decode, wide = tune.fp8_space(16, 8192, 8192, scaling, promote), tune.fp8_space(512, 4096, 4096, scaling, promote)
    mid = tune.fp8_space(150, 2048, 10944, scaling, promote)
    staged = {(128, bn, "cooperative") for bn in (128, 144, 160, 192)} if scaling != "block" else set()
    assert {1, 2, 4, 8} <= {c.split_k for c in decode} and {1, 2} <= {c.split_k for c in wide}
    assert any(c.swap_ab for c in decode) == (scaling != "block")
    for M in (193, 512, STAGED_SWAP_MAX_M):
        got = {(c.block_m, c.block_n, c.schedule) for c in tune.fp8_space(M, 4096, 4096, scaling, promote) if c.swap_ab}
        assert got == staged, (M, got)
    assert not any(c.swap_ab for c in tune.fp8_space(STAGED_SWAP_MAX_M + 1, 4096, 4096, scaling, promote))
    assert {c.block_n for c in decode if c.swap_ab} == ({16, 32, 64} if scaling != "block" else set())
    assert {(c.block_m, c.block_n, c.schedule) for c in mid if c.swap_ab} == (
        {(64, 64, "pingpong"), (64, 160, "pingpong")} | staged if scaling != "block" else set())
    wide_swaps = {144, 160, 192, 128}  # block_n of the staged tiles
    for M, widths in ((64, {64}), (65, {64, 80, 96}), (80, {64, 80, 96}), (81, {64, 96}), (96, {64, 96}), (128, {64}),
                      (129, {64, 144, 160} | wide_swaps), (144, {64, 144, 160} | wide_swaps),
                      (145, {64, 160} | wide_swaps), (161, {64} | wide_swaps)):
        got = {c.block_n for c in tune.fp8_space(M, 2048, 10944, scaling, promote) if c.swap_ab}
        assert got == (widths if scaling != "block" else set()), (M, got)
    if scaling != "block" and promote:
        pick = tune.fp8_normalize(select_fp8(150, 2048, 10944, True, 132, scaling=scaling), 150, 2048, 10944, scaling,
                                  True)
        assert pick.swap_ab and pick in mid and pick.group_m == 8, pick  # under swap-AB the tile rows are N's
        assert {c.group_m for c in mid if c.swap_ab} == set(tune.FP8_GROUP_M)
