"""The stream-K fix-up in the schedule checker: the model comes from the kernel's own scheduler
and epilogue code; the protocol is safe on hybrid and all-streamed launches of both schedules,
its counters end at 0, and each broken variant is reported with the hazard named."""

import inspect

import pytest

from pingpong.hopper.device import fixup
from pingpong.hopper.kernels import gemm as kernel
from pingpong.hopper.host import launch
from pingpong.hopper.device import scheduler as sk
from pingpong.schedule import ScheduleBuilder, ScheduleError, check
from pingpong.schedule.schedules import streamk
from pingpong.tools.cli import main

LAUNCHES = [
    (7, 12, 5),  # a data-parallel wave, 2 tiles streamed by 3 programs (one finishes one, starts the next)
    (1, 24, 8),  # one tile, 3 programs
    (3, 12, 8),  # fewer tiles than SMs: every tile shared by 2 programs
    (5, 24, 4),  # a wave, the fifth tile shared by 3
]


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
@pytest.mark.parametrize("launch_", LAUNCHES)
def test_fixup_is_safe_and_resets_its_counters(launch_, schedule):
    r = check(streamk.streamk_fixup(*launch_, schedule=schedule))
    assert r.verdict == "SAFE", r.violations[:1]
    assert r.final_atomics, "some tile must be shared (else nothing was checked)"
    for final in r.final_atomics:  # every complete execution leaves the counters at 0 (the plan reuses them)
        assert final and all(v == 0 for _, v in final), final


def test_both_cooperative_halves_are_safe_and_share_nothing():
    s = streamk.streamk_fixup(1, 24, 8, halves=(0, 1))
    assert check(s).verdict == "SAFE"
    for g in s.groups:
        names = {n for op in g.ops for n in op.bufs + ((op.sync,) if op.sync else ())}
        half = g.name[-1]
        assert names and all(n.endswith(f"h{half}") or n.endswith(f"h{half}]") for n in names), (g.name, names)


def test_early_arrival_is_a_race_on_an_unpublished_partial():
    r = check(streamk.streamk_fixup(variant="early_arrival"), stop_after=1)
    assert r.verdict == "RACE"
    v = r.first("race")
    assert "sum += ld.global ws[" in v.message and "st.global partial" in v.message
    assert "may still be writing it" in v.message
    (a, _), (b, _) = v.ops
    assert a != b, "the finisher reads another unit's partial"


def test_unchecked_sum_reads_a_partial_never_stored():
    r = check(streamk.streamk_fixup(variant="unchecked_sum"), stop_after=1)
    assert r.verdict == "STALE READ"
    assert "holding 'never stored'" in r.first().message and "slot 1" in r.first().message


@pytest.mark.parametrize("variant", ["early_arrival", "unchecked_sum"])
@pytest.mark.parametrize("launch_", LAUNCHES)
def test_broken_variants_flagged_on_every_launch(launch_, variant):
    for schedule in ("cooperative", "pingpong"):
        assert check(streamk.streamk_fixup(*launch_, schedule=schedule, variant=variant), stop_after=1).violations


def test_model_follows_the_kernel_scheduler(monkeypatch):
    """A wrong owner helper (every unit its tile's only part) makes two programs store one tile."""
    monkeypatch.setattr(sk.stream_owner, "fn", lambda step, programs, total: 0)
    r = check(streamk.streamk_fixup(), stop_after=1)
    assert r.verdict == "RACE" and "st.global result → out t6" in r.first().message  # programs 1 and 2 both run tile 6 first


def test_kernel_runs_the_protocol_the_model_models():
    """The model's premises, read off the kernel source."""
    part = inspect.getsource(fixup.SplitEpilogue.fix_up.fn)
    order = ["last = published(counter, arrived)", "if not last:",
             "self.store_partial(mma.acc, off_r, off_c, slot)", "last = arrive(counter, parts)",
             "if last:", "release_counter(counter, arrived)", "self.sum_into(mma.acc, off_r, off_c, slot, parts)"]
    assert all(s in part for s in order) and [part.index(s) for s in order] == sorted(part.index(s) for s in order)
    arrival = inspect.getsource(fixup.arrive.fn)  # one thread's acq_rel add of 1, after a barrier
    assert 'sem="acq_rel"' in arrival and "mask=first" in arrival
    assert arrival.index("gl.barrier()") < arrival.index("gl.atomic_add(")
    assert "mask=first" in inspect.getsource(fixup.release_counter.fn)
    assert 'sem="acquire"' in inspect.getsource(fixup.published.fn)
    assert "for s in range(parts):  # fixed order" in inspect.getsource(fixup.SplitEpilogue.sum_into.fn)
    assert "self.part.fix_up(mma, off_r, off_c, slot, parts)" in inspect.getsource(fixup.StreamKEpilogue.store.fn)
    consumer = inspect.getsource(kernel.consumer.fn)  # ping-pong: units CONSUMER, CONSUMER + 2, ...; cooperative: all
    assert 'EVERY: gl.constexpr = 2 if PINGPONG else 1' in consumer and "t = EVERY * j + FIRST" in consumer
    assert "sched.split(t)" in inspect.getsource(kernel.PlainKLoop.store.fn)
    assert "StreamKScheduler.create(M, N, K, dp_tiles, streamers," in inspect.getsource(kernel.stream_k_gemm.fn)
    assert "stream_k_split(tiles, -(-K // d.block_k), sms)" in inspect.getsource(launch)


@pytest.mark.parametrize("kw, needle", [
    (dict(variant="late"), "variant must be one of"),
    (dict(schedule="persistent"), "schedule must be"),
    (dict(tiles=0), "tiles must be an int >= 1"),
    (dict(sms=2.0), "sms must be an int >= 1"),
    (dict(halves=(2,)), "halves must name row halves"),
    (dict(schedule="pingpong", halves=(1,)), "halves must name row halves"),
])
def test_bad_arguments_name_the_argument(kw, needle):
    with pytest.raises(ScheduleError, match=needle):
        streamk.streamk_fixup(**kw)


def test_cli_checks_the_streamk_models(capsys):
    assert main(["check", "streamk_cooperative", "streamk_pingpong"]) == 0
    assert capsys.readouterr().out.count("SAFE") == 2
    assert main(["check", "streamk_unchecked_sum"]) == 1
    out = capsys.readouterr().out
    assert "STALE READ" in out and "never stored" in out


# ----------------------------------------------------------------------------- if_last semantics


def test_if_last_runs_the_block_in_exactly_one_group():
    b = ScheduleBuilder("last")
    b.buffer("X")
    b.atomic("n")
    for name in ("G0", "G1", "G2"):
        g = b.group(name, 4)
        g.if_last("n", 12).write("X").signal("n", -12).end_if()
    r = check(b.build())
    assert r.verdict == "SAFE"  # one writer: no two writes of X in one step of two groups
    assert r.final_atomics == {(("n", 0),)}
    b2 = ScheduleBuilder("every")  # the threshold never reached: nobody runs the block
    b2.atomic("n")
    for name in ("G0", "G1"):
        b2.group(name).if_last("n", 3).signal("n", 100).end_if()
    assert check(b2.build()).final_atomics == {(("n", 2),)}


def test_if_last_block_runs_only_for_the_add_that_reaches_the_total():
    """G0 and G1 each add 1 towards 1: the second add passes the total without reaching it
    from below, so one group stores X; two would race (the second schedule)."""
    b = ScheduleBuilder("one")
    b.buffer("X")
    b.atomic("n")
    for name in ("G0", "G1"):
        b.group(name).if_last("n", 1).gstore("X").end_if()
    assert check(b.build()).verdict == "SAFE"
    b = ScheduleBuilder("both")
    b.buffer("X")
    for name in ("G0", "G1"):
        b.group(name).gstore("X")
    assert check(b.build()).verdict == "RACE"


@pytest.mark.parametrize("build, needle", [
    (lambda g: g.end_if(), "end_if without an if_last"),
    (lambda g: g.if_last("n", 1), "if_last without its end_if"),
    (lambda g: g.if_last("n", 1).barrier().end_if(), "a barrier inside an if_last block"),
    (lambda g: g.if_last("m", 1).end_if(), "unknown atomic counter 'm'"),
])
def test_malformed_if_last(build, needle):
    b = ScheduleBuilder("bad")
    b.atomic("n")
    build(b.group("G0"))
    with pytest.raises(ScheduleError, match=needle):
        b.build()
