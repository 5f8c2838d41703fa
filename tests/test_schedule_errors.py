"""Malformed schedules: the error names the operation and its position."""

import pytest

from pingpong.errors import PingpongError
from pingpong.schedule import ScheduleBuilder, ScheduleError


def builder():
    b = ScheduleBuilder("bad")
    b.buffer("X")
    return b, b.group("G0")


def test_unknown_buffer():
    b, g = builder()
    g.load("X").load("Y")
    with pytest.raises(ScheduleError, match=r"group 'G0' op #1 `Y →LDS.*unknown buffer 'Y'"):
        b.build()


def test_negative_count():
    b, g = builder()
    g.load("X").wait("vmcnt", -1)
    with pytest.raises(ScheduleError, match=r"op #1 `wait vmcnt<=-1`.*negative count -1"):
        b.build()
    b, g = builder()
    g.load("X", n=0)
    with pytest.raises(ScheduleError, match=r"op #0 .*n=0 must be >= 1"):
        b.build()


def test_wait_on_counter_nobody_increments():
    b, g = builder()
    g.load("X").wait("lgkmcnt", 0)
    with pytest.raises(ScheduleError, match=r"op #1 `wait lgkmcnt<=0`.*no op of group 'G0' increments"):
        b.build()
    # counters are per wave: another group's loads do not count
    b, g = builder()
    b.group("G1").read("X")
    g.load("X").wait("lgkmcnt", 0)
    with pytest.raises(ScheduleError, match="lgkmcnt"):
        b.build()


def test_unknown_sync_objects_and_bad_parity():
    b, g = builder()
    g.await_("nope", 1)
    with pytest.raises(ScheduleError, match=r"op #0 .*unknown atomic counter 'nope'"):
        b.build()
    b, g = builder()
    b.mbarrier("m", 1)
    g.mwait("m", 2)
    with pytest.raises(ScheduleError, match=r"parity must be 0 or 1"):
        b.build()
    b, g = builder()
    g.barrier("named")
    with pytest.raises(ScheduleError, match=r"unknown barrier 'named'"):
        b.build()
    b, g = builder()
    g.load("X").wait("vmcnt", 64)
    with pytest.raises(ScheduleError, match=r"vmcnt is at most 63"):
        b.build()


def test_schedule_error_is_a_pingpong_error():
    assert issubclass(ScheduleError, PingpongError)


@pytest.mark.parametrize("build, kwargs", [
    ("hopper_pingpong", dict(variant="early_releas")),
    ("hopper_pingpong_counted", dict(variant="early_release")),  # the ping-pong model's, not the counted one's
    ("hopper_fp8_pingpong", dict(variant="no_turn_wait")),
    ("hopper_cooperative", dict(variant="no_turn_wait")),
    ("hopper_cluster", dict(variant="single_releaser")),
])
def test_hopper_builders_refuse_a_variant_they_do_not_model(build, kwargs):
    """An unknown variant would build the correct protocol under a broken one's name, and a
    mutation test on it would pass for the wrong reason."""
    from pingpong.schedule.schedules import hopper

    with pytest.raises(ScheduleError, match=rf"variant must be one of .*got {kwargs['variant']!r}"):
        getattr(hopper, build)(**kwargs)


def test_hopper_cluster_refuses_an_unknown_schedule():
    from pingpong.schedule.schedules import hopper

    with pytest.raises(ScheduleError, match="schedule must be 'pingpong' or 'cooperative', got 'persistent'"):
        hopper.hopper_cluster(schedule="persistent")
