"""Module wiring: every module exists, so an import error surfaces instead of hiding a
subcommand or a kernel; the two benchmarks share one timing module instead of importing
each other."""

import subprocess
import sys

import pytest

from pingpong.tools import cli
from pingpong.runtime import compile


def test_cli_does_not_hide_an_import_error(monkeypatch):
    monkeypatch.setitem(cli.SUBCOMMANDS, "broken", ("pingpong.no_such_module", "a subcommand that fails to import"))
    with pytest.raises(ModuleNotFoundError, match="pingpong.no_such_module"):
        cli.main(["--help"])


def test_kernel_registry_does_not_hide_an_import_error(monkeypatch):
    monkeypatch.setattr(compile, "KERNEL_MODULES", compile.KERNEL_MODULES + ("pingpong.no_such_module",))
    with pytest.raises(ModuleNotFoundError, match="pingpong.no_such_module"):
        compile.kernels()


def test_streaming_bench_does_not_import_the_gemm_bench():
    code = ("import sys, pingpong.streaming.bench; "
            "assert 'pingpong.tools.bench' not in sys.modules, 'pingpong.streaming.bench imports pingpong.tools.bench'")
    subprocess.run([sys.executable, "-c", code], check=True)
