"""AMD configs refuse what cannot fit; dispatch and the isa CLI name valid choices."""

import pytest

from pingpong.tools import isa
from pingpong.amd import select_kernel
from pingpong.amd.config import CdnaConfig, WmmaConfig
from pingpong.errors import ConfigError


@pytest.mark.parametrize("config, reason", [
    (CdnaConfig("gfx942", (256, 256, 64)), "lds"),
    (CdnaConfig("gfx950", (256, 256, 128)), "lds"),
    (CdnaConfig("gfx950", (256, 256, 64), waves_per_group=16), "waves"),
    (CdnaConfig("gfx950", (512, 256, 32)), "registers"),
    (CdnaConfig("gfx950", (256, 256, 64), stages=3), "stages"),
    (CdnaConfig("gfx1151"), "target"),
    (CdnaConfig("gfx900"), "target"),
    (WmmaConfig("gfx1151", (128, 64, 16), pad=8, stages=2, warps=(4, 3)), "block"),
    (WmmaConfig("gfx1151", (512, 512, 32)), "lds"),
    (WmmaConfig("gfx950"), "target"),
])
def test_validate_names_the_violated_constraint(config, reason):
    with pytest.raises(ConfigError, match=rf"^{reason}:"):
        config.validate()


def test_defaults_validate():
    for t in ("gfx942", "gfx950"):
        CdnaConfig.for_target(t).validate()
    WmmaConfig().validate()


@pytest.mark.parametrize("arch, kernel", [
    ("gfx942", "cdna_pingpong"), ("gfx950", "cdna_pingpong"), ("gfx942:sramecc+:xnack-", "cdna_pingpong"),
    ("gfx1151", "rdna_wmma"), ("gfx1100", "rdna_wmma"), ("gfx90a", "portable"), ("gfx1201", "portable"),
])
def test_select_kernel(arch, kernel):
    assert select_kernel(arch) == kernel


def _isa(argv, capsys):
    import argparse

    p = argparse.ArgumentParser()
    isa.add_arguments(p)
    rc = isa.run(p.parse_args(argv))
    return rc, capsys.readouterr()


def test_isa_unknown_target_lists_valid(capsys):
    with pytest.raises(SystemExit) as e:  # an argparse usage error, before anything is compiled
        _isa(["--target", "gfx1030", "--kernel", "cdna_pingpong"], capsys)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "gfx942" in err and "gfx950" in err and "gfx1151" in err


def test_isa_unknown_kernel_lists_valid(capsys):
    rc, out = _isa(["--target", "gfx950", "--kernel", "nope"], capsys)
    assert rc == 2 and "cdna_pingpong" in out.err and "rdna_wmma" in out.err


def test_isa_wrong_target_for_kernel(capsys):
    rc, out = _isa(["--target", "gfx1151", "--kernel", "cdna_pingpong"], capsys)
    assert rc == 2 and "gfx942" in out.err
