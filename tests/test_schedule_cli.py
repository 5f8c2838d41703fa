"""`pingpong check`: verdicts, exit codes, --list, user files."""

import textwrap

import pytest

from pingpong.schedule import check
from pingpong.schedule.errors import ScheduleError
from pingpong.schedule.schedules import build
from pingpong.tools.cli import main


def test_list_names_every_shipped_schedule(capsys):
    from pingpong.schedule.schedules import SHIPPED

    assert main(["check", "--list"]) == 0
    out = capsys.readouterr().out
    for name in SHIPPED:
        assert name in out
    lines = out.splitlines()  # the summaries start in one column, after the longest verdict (DEADLOCK)
    assert len({line.index(e.summary) for line, e in zip(lines, SHIPPED.values())}) == 1, lines


def test_safe_schedule_exits_0_and_race_exits_1_with_trace(capsys):
    assert main(["check", "simplified", "vector_add", "--k-iters", "2"]) == 0
    assert "SAFE" in capsys.readouterr().out
    assert main(["check", "vector_add_vmcnt4"]) == 1
    out = capsys.readouterr().out
    assert "RACE" in out and "shortest trace: 13 steps" in out and "✗" in out


def test_trace_and_time(capsys):
    assert main(["check", "pingpong_sync_vmcnt0", "--trace", "--time"]) == 0
    out = capsys.readouterr().out
    assert "counter_a=32" in out and "counter trace" in out and "a complete execution" in out
    assert "target < 10 s" in out


def test_user_file(tmp_path, capsys):
    f = tmp_path / "mine.py"
    f.write_text(textwrap.dedent('''
        from pingpong.schedule import ScheduleBuilder

        def schedules(k_iters):
            b = ScheduleBuilder("mine")
            b.buffer("X")
            g0, g1 = b.group("G0"), b.group("G1")
            for k in range(k_iters):
                g0.load("X").barrier()          # no vmcnt wait before the barrier
                g1.barrier().read("X").wait("lgkmcnt", 0)
            return [b.build()]
    '''))
    assert main(["check", str(f), "--k-iters", "1"]) == 1
    assert "mine" in capsys.readouterr().out
    assert main(["check", "no_such_schedule"]) == 2
    assert "neither a shipped schedule" in capsys.readouterr().err


# ----------------------------------------------------------------------------- schedule cli
# `pingpong check` on its own bad input, and truncated searches: exit 2 for usage or input
# errors, 3 for INCOMPLETE (never SAFE), 1 only for a violation found.

@pytest.mark.parametrize("argv, needle", [
    (["optimized", "--k-iters", "0"], "--k-iters must be >= 1"),
    (["vector_add_vmcnt4", "--k-iters", "-2"], "--k-iters must be >= 1"),
    (["hopper_pingpong", "--k-iters", "0"], "--k-iters must be >= 1"),
    (["optimized", "--max-states", "-1"], "--max-states must be >= 1"),
    (["optimized", "--max-states", "0"], "--max-states must be >= 1"),
    (["optimized", "--stop-after", "-1"], "--stop-after must be >= 0"),
])
def test_bad_option_values_are_usage_errors(argv, needle, capsys):
    assert main(["check", *argv]) == 2
    out, err = capsys.readouterr()
    assert needle in err and out == ""  # on stderr: `pingpong check ... > report` does not hide it


def test_api_rejects_what_the_cli_rejects():
    with pytest.raises(ScheduleError, match="k_iters"):
        build("optimized", 0)
    s = build("vector_add", 2)
    with pytest.raises(ScheduleError, match="max_states"):
        check(s, max_states=-1)
    with pytest.raises(ScheduleError, match="stop_after"):
        check(s, stop_after=0)


def test_truncated_search_is_incomplete_never_safe(capsys):
    """A schedule that is SAFE when explored fully: cut one state short it is INCOMPLETE
    (exit 3); given exactly its state count it is SAFE (exit 0)."""
    s = build("optimized_vmcnt00", 1)
    full = check(s)
    assert full.safe and full.verdict == "SAFE" and not full.truncated
    n = full.states
    cut = check(s, max_states=n - 1)
    assert cut.truncated and not cut.safe and cut.verdict == "INCOMPLETE"
    assert check(s, max_states=n).verdict == "SAFE"
    assert main(["check", "optimized_vmcnt00", "--k-iters", "1", "--max-states", str(n - 1)]) == 3
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and "SAFE" not in out
    assert main(["check", "optimized_vmcnt00", "--k-iters", "1", "--max-states", str(n)]) == 0
    assert "SAFE" in capsys.readouterr().out


def test_violation_beats_incomplete(capsys):
    """A race found before the bound is a real race: exit 1, even though the search stopped."""
    assert main(["check", "optimized", "--stop-after", "1"]) == 1
    assert "RACE" in capsys.readouterr().out


def _user_file(tmp_path, body):
    f = tmp_path / "user_sched.py"
    f.write_text(textwrap.dedent(body))
    return str(f)


@pytest.mark.parametrize("body, needle", [
    ("import no_such_module_here\n", "failed to import: ModuleNotFoundError"),
    ("raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
    ("def schedules(k):\n    return 42\n", "must return a Schedule or a non-empty list of Schedules, got int"),
    ("def schedules(k):\n    return ['x']\n", "got a list of str"),
    ("def schedules(k):\n    return []\n", "got a list of nothing"),
    ("def schedules(k):\n    raise ValueError('bad k')\n", "schedules(4) raised ValueError: bad k"),
    ("import sys\nsys.exit(1)\n", "failed to import: SystemExit"),
    ("x = 1\n", "defines no Schedule"),
    ("""
     from pingpong.schedule.model import Group, Op, Schedule
     S = Schedule("bad", "", (Group("G", 1, (Op("wait", counter="vmcnt"),)),), ())
     """, "waits on counter 'vmcnt'"),
])
def test_user_file_errors_are_input_errors(tmp_path, capsys, body, needle):
    assert main(["check", _user_file(tmp_path, body)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and needle in err and out == "", (out, err)


def test_user_file_attribute_that_is_not_a_schedule(tmp_path, capsys):
    path = _user_file(tmp_path, "NAME = 3\n")
    assert main(["check", f"{path}:NAME"]) == 2
    assert "is not a Schedule" in capsys.readouterr().err
