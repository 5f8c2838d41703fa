"""The CDNA ping-pong's schedule, checked race-free by pingpong.schedule and tied to the ISA."""

import functools

import pytest

from pingpong import compile as cc
from pingpong.amd.schedule_model import cdna_pingpong, vmcnt_sequence
from pingpong.schedule import check


@functools.cache
def model(target):
    return cdna_pingpong(target, pairs=3)


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_schedule_is_race_free(target):
    r = check(model(target))
    assert r.safe, r.verdict


@pytest.mark.parametrize("label", ["S2", "S3", "S4"])
def test_dropping_a_loop_barrier_is_caught(label):
    s = model("gfx950")
    ops = s.group("WG0").ops
    i = next(i for i, op in enumerate(ops) if op.kind == "barrier" and op.label == label and op.where == "loop")
    gi = [g.name for g in s.groups].index("WG0")
    # drop it from both groups (they run the same code)
    j = next(j for j, op in enumerate(s.group("WG1").ops)
             if op.kind == "barrier" and op.label == label and op.where == "loop")
    mutated = s.without(gi, i).without(1 - gi, j)
    assert not check(mutated).safe


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_isa_waits_match_the_checked_schedule(target):
    isa_loop = tuple(cc.compile_kernel("cdna_pingpong", target).facts().extra["loop vmcnt sequence"])
    assert isa_loop == vmcnt_sequence(model(target), "loop")
