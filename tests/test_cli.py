"""The command line's manners: help and usage errors without torch, arguments checked before the
device, a reader that goes away, no leak report at exit, aligned tables, `python -m` entries."""

import os
import subprocess
import sys

import pytest

from pingpong.tools.cli import main


def _python(*args, **kwargs):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, **kwargs)


def test_help_and_usage_errors_do_not_import_torch():
    """What makes `pingpong --help` quick: torch (seconds to import) stays out; checked by what is
    imported, not by a clock, so a slow machine cannot fail it."""
    code = """if True:
        import contextlib, io, sys
        from pingpong.tools.cli import main
        codes = []
        for argv in (["--help"], ["frob"], ["bench", "--help"], ["check", "--help"],
                     ["bench", "--op", "grouped", "--tokens", "-5"], ["bench", "--models", "bogus"]):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                try:
                    codes.append(main(argv))
                except SystemExit as e:
                    codes.append(e.code)
        print(codes, sorted(m for m in ("torch", "triton") if m in sys.modules))
    """
    out = _python("-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[0,", "2,", "0,", "0,", "2,", "2]", "[]"], out.stdout


@pytest.mark.parametrize("argv, message", [
    (["--op", "grouped", "--tokens", "-5"], "--tokens: -5 is not a positive token count"),
    (["--op", "grouped", "--tokens", "0"], "--tokens: 0"),
    (["--op", "grouped", "--products", "bogus"], "--products: unknown product 'bogus'"),
    (["--models", "bogus"], "--models: applies to --op grouped only"),
    (["--tokens", "16"], "--tokens: applies to --op grouped only"),
    (["--overhead", "--shapes", "-5"], "--shapes: '-5'"),
    (["--op", "vector_add", "--dtype", "fp8"], "--dtype: --op vector_add"),  # not a KeyError after the fp32 rows
    (["--op", "vector_add", "--seed", "5"], "--seed: applies to --op"),  # its inputs are not seeded
    (["--overhead", "--json", "o.json"], "--json: not read by --overhead"),  # no file written, exit 0
    (["--overhead", "--dtype", "fp8"], "--dtype: not read by --overhead"),
    (["--overhead", "--shapes", "64,32,16"], "--shapes: --overhead times square sizes"),  # 64³, silently
    (["--overhead", "--rounds", "0"], "--rounds: 0 must be ≥ 1"),
])
def test_bench_arguments_are_checked_before_the_device(argv, message, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a device check would pass: not reached
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "GPU" not in err


def test_bench_help_names_every_dtype_it_takes(capsys):
    from pingpong.tools import bench

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    options = text[text.index("options:"):]
    dtype_help = options[options.index("--dtype DTYPE"):options.index("--layout LAYOUT")]
    assert all(name in dtype_help for name in bench.DTYPES), dtype_help


def test_a_reader_that_goes_away_ends_the_output_quietly():
    """`pingpong check --list | head -1`: no BrokenPipeError traceback; the exit status of a tool
    ended by SIGPIPE."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        out = subprocess.run([sys.executable, "-m", "pingpong", "check", "--list"], stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert out.stderr == "" and out.returncode == 141


def test_no_leak_report_at_exit():
    """libtriton's nanobind teardown prints a leak report after a cold compile (`pingpong demo`,
    `pingpong isa --kernel pingpong` with an empty Triton cache: 24 lines). What comes after the
    program's last word is silenced, what comes before is kept: a late writer stands in for the
    report (registered first, an atexit handler runs last)."""
    code = """if True:
        import atexit, os, sys
        atexit.register(os.write, 2, b"nanobind: leaked 4 instances!")
        from pingpong.tools.cli import main
        code = main(["check", "simplified"])
        import triton
        print("the program's own message", file=sys.stderr)
        sys.exit(code)
    """
    out = _python("-c", code)
    assert out.returncode == 0 and "SAFE" in out.stdout
    assert out.stderr == "the program's own message\n", out.stderr


@pytest.mark.parametrize("command, anchor", [(["isa", "--list"], None), (["check", "--list"], "expected ")])
def test_list_columns_are_aligned(command, anchor, capsys):
    assert main(command) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 3

    def column(line):  # where the second column (or the anchor) starts
        if anchor:
            return line.index(anchor)
        first = line.index(" ")
        return first + len(line[first:]) - len(line[first:].lstrip())

    assert len({column(line) for line in lines}) == 1, lines


def test_python_m_pingpong_schedule():
    out = _python("-m", "pingpong.schedule", "simplified")
    assert out.returncode == 0 and "SAFE" in out.stdout, out.stdout + out.stderr
    out = _python("-m", "pingpong.schedule.cli", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m pingpong.schedule"), out.stdout


# ----------------------------------------------------------------------------- cli values
# The command line: `pingpong check` compares the shipped schedules with their expected verdicts;
# option values are checked by argparse.

@pytest.mark.slow
def test_check_without_arguments_compares_with_the_expected_verdicts(capsys):
    from pingpong.tools.cli import main

    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "as expected" in out and "shortest trace" not in out
    assert "optimized" in out and "expected RACE" in out


@pytest.mark.slow
@pytest.mark.parametrize("schedule, claim, found, traces", [
    ("simplified", "RACE", "expected RACE, found SAFE: UNEXPECTED", 0),  # an unexpected verdict fails
    ("optimized", "SAFE", "expected SAFE, found RACE: UNEXPECTED", 1),   # and a violation shows its trace
])
def test_check_without_arguments_fails_on_an_unexpected_verdict(capsys, monkeypatch, schedule, claim, found, traces):
    import dataclasses

    from pingpong.tools.cli import main
    from pingpong.schedule import cli as scli

    wrong = dict(scli.SHIPPED)
    wrong[schedule] = dataclasses.replace(wrong[schedule], claim=claim)
    monkeypatch.setattr(scli, "SHIPPED", wrong)
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert found in out and out.count("shortest trace") == traces


def test_named_schedules_keep_their_exit_codes(capsys):
    from pingpong.tools.cli import main

    assert main(["check", "optimized"]) == 1 and "shortest trace" in capsys.readouterr().out
    assert main(["check", "simplified"]) == 0


# ----------------------------------------------------------------------------- 9: argparse


@pytest.mark.parametrize("argv, needle", [
    (["demo", "--size", "0"], "--size"),
    (["demo", "--size", "-5"], "--size"),
    (["isa", "--target", "sm_80"], "sm_90a"),
])
def test_cli_values_are_checked_by_argparse(argv, needle, capsys):
    from pingpong.tools.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_gpu_check_without_a_gpu_fails_and_writes_nothing(tmp_path):
    """scripts/gpu_check.sh on a machine without a GPU: a non-zero exit that says why, and no
    (empty) log directory left behind."""
    import pathlib

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the script would run")
    script = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OUT": str(tmp_path / "out")})
    assert out.returncode != 0 and "no CUDA GPU here" in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()
