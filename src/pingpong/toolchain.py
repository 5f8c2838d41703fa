"""The Triton versions pingpong is built and tested with, checked once at import.

Gluon's API moves between Triton releases (3.9 renamed the TMA copies, removed
`gl.thread_barrier`, described AMD WMMA layouts by linear bases and replaced the CUDA
launcher), so a Triton outside the tested range fails in obscure compile errors deep inside
a kernel. `check()` turns that into one clear error at `import pingpong`.

    TESTED = ("3.9",)   torch 2.15 requires triton 3.9

Triton 3.8 (torch 2.14) is not supported. Checked offline on 2026-11-25: the Hopper kernels
compile and pass the CPU suite under 3.8, but the AMD CDNA ping-pong spills under 3.8's LLVM
(36-172 bytes of scratch on gfx942/gfx950) and 3.8's Gluon has no scheduling hints
(`gl.amd.hint`), which is what keeps it in registers under 3.9. Supporting both would mean a
second AMD kernel, not a thin compatibility layer.

Every kernel launch passes `KERNEL_OPTIONS`: FP fusion (a·b + c as one FMA) is on
explicitly, as it has always been for these kernels, so results do not change when a later
Triton flips its default, and Triton 3.9 does not warn about the default on every compile.
"""

from __future__ import annotations

import re

#: This package's version (pyproject's; `pingpong.__version__`, and part of a tuning table's key).
__version__ = "0.1.0"

#: Triton minor versions the CPU suite runs under in CI (pyproject: triton>=3.9,<3.10).
TESTED = ("3.9",)

#: Compile options of every pingpong kernel (keyword arguments of a launch or a warmup).
KERNEL_OPTIONS = {"enable_fp_fusion": True}


class UnsupportedTritonError(ImportError):
    """The installed Triton is outside the range pingpong is tested with."""


def minor(version: str) -> str:
    """'3.9.0' -> '3.9' (also for local builds such as '3.9.0+git1234')."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        raise UnsupportedTritonError(f"pingpong: cannot read the Triton version {version!r}")
    return f"{m.group(1)}.{m.group(2)}"


def check(version: str | None = None) -> str:
    """The installed Triton's minor version; UnsupportedTritonError naming it and the tested
    range if it is not one of TESTED."""
    if version is None:
        version = _installed()
    found = minor(version)
    if found not in TESTED:
        raise UnsupportedTritonError(
            f"pingpong supports Triton {' and '.join(TESTED)} (the Gluon API differs between releases); "
            f"this environment has Triton {version}. Install a supported one: "
            f"pip install 'triton>={TESTED[0]},<{_next(TESTED[-1])}' (torch 2.15 uses 3.9; torch 2.14's 3.8 is not "
            f"supported).")
    return found


def _installed() -> str:
    """The Triton version: the imported module's, else the installed distribution's (read without
    importing Triton, which takes a third of a second), else the module's after importing it."""
    import sys

    if "triton" in sys.modules:
        return sys.modules["triton"].__version__
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        pass
    try:
        import triton
    except ImportError as e:
        raise UnsupportedTritonError(
            f"pingpong needs Triton {' or '.join(TESTED)} (pip install 'triton>={TESTED[0]},"
            f"<{_next(TESTED[-1])}'); Triton is not installed ({e})") from e
    return triton.__version__


def _next(v: str) -> str:
    major, mnr = v.split(".")
    return f"{major}.{int(mnr) + 1}"


_EXIT_REPORT_SILENCED = False


def silence_exit_report() -> None:
    """At interpreter exit, send stderr to /dev/null once Triton is loaded: libtriton's nanobind
    teardown prints a known "leaked instances/functions" report there after the program's last
    word, on every exit. Triton silences the same report in its own compile workers this way
    (an atexit handler, registered once). For the command line and the test session."""
    global _EXIT_REPORT_SILENCED
    if _EXIT_REPORT_SILENCED:
        return
    import atexit

    atexit.register(_silence_stderr_if_triton_loaded)
    _EXIT_REPORT_SILENCED = True


def _silence_stderr_if_triton_loaded() -> None:
    import os
    import sys

    if "triton" not in sys.modules:
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stderr: nothing left to keep
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
