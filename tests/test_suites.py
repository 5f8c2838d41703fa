"""Named suites, `pingpong bench --suite` and the HBM column (CPU)."""

import argparse

import pytest

from pingpong.tools import bench, rows
from pingpong.errors import PingpongError
from pingpong.tools.suites import SUITES


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
    decode = rows.Row(16, 8192, 8192, "hopper", "ok", 1e-3, 0.050, 0.045, 100, 100, hbm_bytes_per_s=h100)
    moved = (16 * 8192 + 8192 * 8192) * 2 + 16 * 8192 * 2
    assert decode.hbm_fraction == pytest.approx(moved / 50e-6 / h100)
    square = rows.Row(8192, 8192, 8192, "hopper", "ok", 1e-3, 1.2, 1.2, 100, 100, hbm_bytes_per_s=h100)
    assert square.hbm_fraction is None
    text = bench.format_table([decode, square])
    assert "HBM" in text and f"{100 * decode.hbm_fraction:.0f}%" in text
    assert rows.Row(16, 8192, 8192, "hopper", "ok", 1e-3, 0.05, 0.05).hbm_fraction is None  # bandwidth unknown


def test_random_suite_is_a_seeded_held_out_draw():
    from pingpong.tools.suites import LLM_PROJECTIONS, RANDOM_COUNT, RANDOM_MAX_WORK, random_suite

    a, b = random_suite(1), random_suite(2)
    assert a == random_suite(1) and a != b  # a pure function of the seed
    assert len(a) == len(set(a)) == RANDOM_COUNT >= 60
    named = set(LLM_PROJECTIONS)  # the llm suite's model family
    for shapes in (a, b):
        assert all(1 <= m <= 16384 and m * n * k <= RANDOM_MAX_WORK for m, n, k in shapes)
        assert not {(n, k) for _, n, k in shapes} & named, "families the other suites do not name"
        assert sum(m % 64 != 0 for m, _, _ in shapes) > len(shapes) // 2, "most M off multiples of 64"
        assert min(m for m, _, _ in shapes) < 16 and max(m for m, _, _ in shapes) > 2048, "decode to prefill"
    assert settings("--suite", "random", "--seed", "7").shapes == random_suite(7)
