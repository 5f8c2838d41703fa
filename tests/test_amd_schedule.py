"""The CDNA ping-pong's schedule, checked race-free by pingpong.schedule and tied to the ISA."""

import dataclasses
import functools
import re

import pytest

from pingpong.runtime import compile as cc
from pingpong.amd.config import CdnaConfig
from pingpong.amd.buffers import storage_half, storage_row
from pingpong.amd.schedule_model import cdna_pingpong, emitted_ops, sharing, vmcnt_sequence
from pingpong.schedule import check

CDNA = ("gfx950", "gfx942")


@functools.cache
def model(target):
    return cdna_pingpong(target, pairs=3)


@functools.cache
def isa_loop(target):
    return cc._amd_loop_body(cc.compile_kernel("cdna_pingpong", target).isa)


@pytest.mark.parametrize("target", CDNA)
def test_schedule_is_race_free(target):
    r = check(model(target))
    assert r.safe, r.verdict


@pytest.mark.parametrize("target", CDNA)
def test_sharing_comes_from_the_layouts(target):
    """Group g loads half g; A's half g is read by group g only; B's halves by both groups."""
    share = sharing(target)
    assert share["load"] == {0: {0}, 1: {1}}
    assert share["A"] == {0: {0}, 1: {1}}
    assert share["B"] == {0: {0, 1}, 1: {0, 1}}


def test_storage_row_and_half_are_inverse():
    rows = [storage_row(h, rb, r) for rb in range(8) for h in range(2) for r in range(16)]
    assert sorted(rows) == list(range(256))
    assert all(storage_half(storage_row(h, rb, r)) == h for rb in range(8) for h in range(2) for r in range(16))


def test_a_shared_between_groups_would_race():
    """The mapping matters: with A's halves read by both groups (the earlier top/bottom
    128-row halves), the same waits and barriers race."""
    share = dict(sharing("gfx950"), A={0: frozenset({0, 1}), 1: frozenset({0, 1})})
    assert not check(cdna_pingpong("gfx950", pairs=3, share=share)).safe


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


def _loosen(s, k):
    """The schedule with the k-th loop vmcnt wait of every group one load looser."""
    groups = []
    for g in s.groups:
        idx = [i for i, op in enumerate(g.ops) if op.kind == "wait" and op.counter == "vmcnt" and op.where == "loop"]
        ops = list(g.ops)
        ops[idx[k]] = dataclasses.replace(ops[idx[k]], value=ops[idx[k]].value + 1)
        groups.append(dataclasses.replace(g, ops=tuple(ops)))
    return dataclasses.replace(s, groups=tuple(groups))


@pytest.mark.parametrize("target", CDNA)
def test_loop_waits_are_tight(target):
    """Before S2, S3 and S1 one more load in flight is a race; before S4 only A0's loads are
    in flight, so that wait (a vmcnt(N) across a barrier) has slack by design."""
    s = model(target)
    verdicts = [check(_loosen(s, k)).safe for k in range(4)]
    assert verdicts == [False, False, True, False]


@pytest.mark.slow
@pytest.mark.parametrize("target", CDNA)
def test_isa_waits_match_the_checked_schedule(target):
    # Triton 3.9 lowers wait_group to LLVM async marks, and LLVM emits no s_waitcnt for a wait
    # that is already satisfied: the ISA has the model's waits minus those (emitted=True
    # replays the model's loads and waits to find them; only S4's, test below).
    isa = tuple(cc.compile_kernel("cdna_pingpong", target).facts().extra["loop vmcnt sequence"])
    assert isa == vmcnt_sequence(model(target), "loop", emitted=True)


@pytest.mark.slow
@pytest.mark.parametrize("target", CDNA)
def test_only_the_slack_wait_is_left_out_of_the_isa(target):
    """The waits the ISA omits are exactly those the model shows cannot block: the one before
    S4 (at most A0's loads in flight, which is all that was issued since S3's vmcnt(0)), the
    only loop wait whose loosening is safe (test_loop_waits_are_tight). The derived config
    gives the same ISA waits."""
    s = model(target)
    d = CdnaConfig.for_target(target).derive()
    assert vmcnt_sequence(s, "loop") == d.main_loop_vmcnt
    waits = [op for op in s.group("WG0").ops if op.kind == "wait" and op.counter == "vmcnt" and op.where == "loop"]
    kept = set(map(id, emitted_ops(s, "WG0")))
    assert [k for k, op in enumerate(waits) if id(op) not in kept] == [2]
    assert vmcnt_sequence(s, "loop", emitted=True) == d.main_loop_vmcnt_isa == (d.a_loads, 0, 0)


@pytest.mark.parametrize("target", CDNA)
def test_loop_keeps_loads_in_flight_across_barriers(target):
    """Loads stay in flight across barriers: non-zero vmcnt in the main loop (A1 across S2, A0 across S4)."""
    d = CdnaConfig.for_target(target).derive()
    assert d.main_loop_vmcnt == (d.a_loads, 0, d.a_loads, 0) and d.a_loads > 0
    assert max(vmcnt_sequence(model(target), "loop")) == d.a_loads


def _model_phases(s):
    """(DMA instructions issued, vmcnt waits that can block) between consecutive loop barriers of WG0."""
    phases = [[0, []]]
    for op in emitted_ops(s, "WG0"):  # the waits the ISA has (test_isa_waits_match_the_checked_schedule)
        if op.where != "loop":
            continue
        if op.kind == "barrier":
            phases.append([0, []])
        elif op.kind == "load":
            phases[-1][0] += op.n
        elif op.kind == "wait" and op.counter == "vmcnt":
            phases[-1][1].append(op.value)
    return [tuple((n, tuple(w))) for n, w in phases]


def _isa_phases(loop):
    parts = re.split(r"\bs_barrier\b", loop)
    return [(len(re.findall(r"\bbuffer_load_\w+.*\blds\b", p)), tuple(int(v) for v in re.findall(r"vmcnt\((\d+)\)", p)))
            for p in parts]


@pytest.mark.slow
@pytest.mark.parametrize("target", CDNA)
def test_isa_loop_phases_match_the_checked_schedule(target):
    """Per barrier phase of the loop, the ISA issues the DMA loads and waits of the model."""
    assert _isa_phases(isa_loop(target)) == _model_phases(model(target))
