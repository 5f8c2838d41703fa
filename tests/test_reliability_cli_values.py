"""The command line: `pingpong check` compares the shipped schedules with their expected verdicts;
option values are checked by argparse."""

import pytest


# ----------------------------------------------------------------------------- 8: pingpong check


def test_check_without_arguments_compares_with_the_expected_verdicts(capsys):
    from pingpong.tools.cli import main

    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "as expected" in out and "shortest trace" not in out
    assert "optimized" in out and "expected RACE" in out


def test_check_without_arguments_fails_on_an_unexpected_verdict(capsys, monkeypatch):
    import dataclasses

    from pingpong.tools.cli import main
    from pingpong.schedule import cli as scli

    wrong = dict(scli.SHIPPED)
    wrong["simplified"] = dataclasses.replace(wrong["simplified"], claim="RACE")
    monkeypatch.setattr(scli, "SHIPPED", wrong)
    assert main(["check"]) == 1
    assert "expected RACE, found SAFE: UNEXPECTED" in capsys.readouterr().out


def test_check_without_arguments_shows_the_trace_of_an_unexpected_violation(capsys, monkeypatch):
    import dataclasses

    from pingpong.tools.cli import main
    from pingpong.schedule import cli as scli

    wrong = dict(scli.SHIPPED)
    wrong["optimized"] = dataclasses.replace(wrong["optimized"], claim="SAFE")
    monkeypatch.setattr(scli, "SHIPPED", wrong)
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "expected SAFE, found RACE: UNEXPECTED" in out and out.count("shortest trace") == 1


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
