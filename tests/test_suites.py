"""Named suites, `pingpong bench --suite` and the HBM column (CPU)."""

import argparse

import pytest

from pingpong import bench
from pingpong.errors import PingpongError
from pingpong.suites import SUITES


def settings(*argv):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return bench.settings_from_args(p.parse_args(list(argv)))


def test_suites_hold_the_named_shapes():
    assert len(SUITES["llm"]) == 7 * 4 and (1, 28672, 4096) in SUITES["llm"] and (8192, 4096, 14336) in SUITES["llm"]
    assert SUITES["squares"] == tuple((n, n, n) for n in (1024, 2048, 4096, 8192, 16384))
    assert SUITES["largek"] == ((512, 512, 65536), (1024, 1024, 16384), (64, 4096, 65536))
    assert set(SUITES["all"]) == set(SUITES["llm"]) | set(SUITES["squares"]) | set(SUITES["largek"])


def test_bench_suite_adds_to_shapes():
    assert settings("--suite", "largek").shapes == SUITES["largek"]
    s = settings("--shapes", "7,8,9", "--suite", "squares")
    assert s.shapes == ((7, 8, 9),) + SUITES["squares"]
    assert settings().shapes == bench.DEFAULT_SHAPES


def test_bench_unknown_suite_names_the_option():
    with pytest.raises(PingpongError, match="--suite: unknown suite 'big'"):
        settings("--suite", "big")


def test_hbm_column_only_for_bandwidth_bound_rows():
    h100 = 3.35e12
    decode = bench.Row(16, 8192, 8192, "hopper", "ok", 1e-3, 0.050, 0.045, 100, 100, hbm_bytes_per_s=h100)
    moved = (16 * 8192 + 8192 * 8192) * 2 + 16 * 8192 * 2
    assert decode.hbm_fraction == pytest.approx(moved / 50e-6 / h100)
    square = bench.Row(8192, 8192, 8192, "hopper", "ok", 1e-3, 1.2, 1.2, 100, 100, hbm_bytes_per_s=h100)
    assert square.hbm_fraction is None
    text = bench.format_table([decode, square])
    assert "HBM" in text and f"{100 * decode.hbm_fraction:.0f}%" in text
    assert bench.Row(16, 8192, 8192, "hopper", "ok", 1e-3, 0.05, 0.05).hbm_fraction is None  # bandwidth unknown
