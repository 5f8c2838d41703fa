"""`pingpong check`: verdicts, exit codes, --list, user files."""

import textwrap

from pingpong.tools.cli import main


def test_list_names_every_shipped_schedule(capsys):
    from pingpong.schedule.schedules import SHIPPED

    assert main(["check", "--list"]) == 0
    out = capsys.readouterr().out
    for name in SHIPPED:
        assert name in out


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
    assert "neither a shipped schedule" in capsys.readouterr().out
