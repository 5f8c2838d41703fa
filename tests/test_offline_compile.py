"""Offline compiles (pingpong.runtime.compile) on the CPU: `pingpong isa` output paths checked
before compiling; `compile.offline()` confines its stub driver to the calling thread; the
detectors other tests rely on (spills, TMA legality) shown to fire."""

import functools
import threading

import pytest
import torch
import triton
import triton.language as tl

from pingpong.runtime import compile as cc
from pingpong.toolchain import KERNEL_OPTIONS
from pingpong.tools.cli import main


@pytest.fixture
def no_compile(monkeypatch):
    """Fail the test if anything gets compiled."""
    def boom(*a, **k):
        raise AssertionError("compiled before checking the output path")

    monkeypatch.setattr(cc, "compile_kernel", boom)


@pytest.mark.parametrize("flag, make, needle", [
    ("--dump", lambda p: str(p / "missing_dir" / "k.sass"), "does not exist"),
    ("--dump", lambda p: str(p), "is a directory"),
    ("--dump-ir", lambda p: (p / "file").write_text("x") and str(p / "file"), "not a directory"),
])
def test_bad_output_paths_fail_before_compiling(tmp_path, capsys, no_compile, flag, make, needle):
    assert main(["isa", "--kernel", "portable", "--target", "sm_90a", flag, make(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert flag in err and needle in err


def test_output_options_need_a_kernel(tmp_path, capsys, no_compile):
    """`--dump`/`--dump-ir` without `--kernel` is not the kernel list with the option dropped."""
    for flag, path in (("--dump", tmp_path / "k.sass"), ("--dump-ir", tmp_path / "ir")):
        assert main(["isa", flag, str(path)]) == 2
        assert f"{flag}: needs --kernel" in capsys.readouterr().err and not path.exists()


def test_a_failed_compile_leaves_no_ir_directory(tmp_path, capsys, monkeypatch):
    from pingpong.errors import TargetError

    def refuse(name, target):
        raise TargetError(f"target: kernel {name!r} compiles for sm_90a, not {target!r}")

    monkeypatch.setattr(cc, "compile_kernel", refuse)
    ir = tmp_path / "new" / "ir"
    assert main(["isa", "--kernel", "pingpong", "--target", "gfx942", "--dump-ir", str(ir)]) == 2
    assert "compiles for sm_90a" in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_a_missing_cuda_tool_is_a_message_not_a_traceback(tmp_path, capsys, monkeypatch):
    from pingpong.errors import ToolMissing

    class Compiled:
        def facts(self):
            raise ToolMissing("cuobjdump: not found at /x/backends/nvidia/bin/cuobjdump")

    monkeypatch.setattr(cc, "compile_kernel", lambda name, target: Compiled())
    try:  # escaping, it would be a traceback for the user (and a skip here: tests/conftest.py)
        code = main(["isa", "--kernel", "pingpong", "--dump", str(tmp_path / "k.sass")])
    except ToolMissing as e:
        pytest.fail(f"ToolMissing escaped `pingpong isa`: {e}")
    assert code == 2
    assert "pingpong isa: cuobjdump: not found" in capsys.readouterr().err and not (tmp_path / "k.sass").exists()


class FakeDriver:
    """What another thread's real GPU driver would answer."""

    def get_current_target(self):
        return "the real GPU"


def test_offline_is_invisible_to_other_threads():
    from triton.runtime import driver

    saved = driver._active
    driver.set_active(FakeDriver())
    inside, release, seen = threading.Event(), threading.Event(), {}

    def compile_offline(target):
        with cc.offline(target):
            seen[target] = driver.active.get_current_target().arch
            inside.set()
            release.wait(5)
            seen[target + " after"] = driver.active.get_current_target().arch

    try:
        t = threading.Thread(target=compile_offline, args=("gfx942",))
        t.start()
        assert inside.wait(5)
        assert driver.active.get_current_target() == "the real GPU"  # this thread: untouched
        with cc.offline("sm_90a"):  # and a second offline user meanwhile sees its own target
            assert driver.active.get_current_target().arch == 90
        release.set()
        t.join(5)
        assert seen == {"gfx942": "gfx942", "gfx942 after": "gfx942"}
        assert driver.active.get_current_target() == "the real GPU"
        assert isinstance(driver._active, FakeDriver), "the dispatcher must be removed when the last offline() exits"
    finally:
        release.set()
        driver._active = saved


def test_offline_nests_and_restores():
    from triton.runtime import driver

    saved = driver._active
    with cc.offline("gfx942"):
        with cc.offline("sm_90a"):
            assert driver.active.get_current_target().arch == 90
        assert driver.active.get_current_target().arch == "gfx942"
    assert driver._active is saved


# ----------------------------------------------------------------------------- detectors
# The detectors other tests rely on, shown to fire: the spill/local-memory detector on kernels
# that do spill, and TMA legality on a misaligned base (a detector that never fires would let
# every "no spills" / "TMA-legal" assertion pass).

@triton.jit
def _register_hog(x_ptr, y_ptr, BLOCK: tl.constexpr):
    """Keeps a whole BLOCK live across a reduction: far more values per thread than registers."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    s = tl.sum(x * x, axis=0)
    tl.store(y_ptr + offs, x * s + tl.flip(x, 0))


@functools.lru_cache(maxsize=None)
def hog_facts(target):
    """8192 fp32 per warp under a 64-register cap (sm_90a); 32768 per wave (gfx942: > 512 VGPRs+AGPRs)."""
    block, kw = {"sm_90a": (8192, dict(num_warps=1, maxnreg=64)), "gfx942": (32768, dict(num_warps=1))}[target]
    x = torch.empty(block)
    with cc.offline(target):
        ck = _register_hog.warmup(x, x, BLOCK=block, grid=(1,), **kw, **KERNEL_OPTIONS)
    return cc.Compiled("register_hog", target, dict(ck.asm), ck.metadata).facts()


@pytest.mark.slow
def test_spill_detector_sees_local_memory_on_hopper():
    f = hog_facts("sm_90a")
    assert f.spill_bytes > 0, "cuobjdump's STACK/LOCAL bytes not read"
    assert f.counts["LDL/STL"] > 0, "the SASS local load/store pattern does not match"
    assert f.registers <= 64


def test_a_missing_cuda_tool_is_named(monkeypatch):
    """A Triton without cuobjdump (a trimmed bundle): the facts' tool call is a ToolMissing naming
    the tool and the path looked at, before any subprocess runs (tests/conftest.py reports a test
    it stops as skipped, with this message)."""
    from pingpong.errors import ToolMissing

    real = cc.os.path.isfile
    monkeypatch.setattr(cc.os.path, "isfile", lambda p: False if p.endswith("cuobjdump") else real(p))
    monkeypatch.setattr(cc.subprocess, "run", lambda *a, **k: pytest.fail("a subprocess ran"))
    with pytest.raises(ToolMissing, match=r"cuobjdump: not found at .*backends/nvidia/bin/cuobjdump"):
        cc._cuda_tool("cuobjdump", "-sass", b"")


@pytest.mark.slow
def test_spill_detector_sees_scratch_on_cdna():
    f = hog_facts("gfx942")
    assert f.extra["scratch bytes"] > 0, "the scratch (private segment) size is not read"
    assert f.extra["vgpr spills"] > 0, "the VGPR spill count is not read"
    assert f.spill_bytes >= f.extra["scratch bytes"] + 4 * f.extra["vgpr spills"], "spill_bytes drops a term"


def _bf16(rows, cols, offset_elems=0):
    flat = torch.empty(offset_elems + rows * cols, dtype=torch.bfloat16)
    return flat[offset_elems:].view(rows, cols)


def test_tma_orientation_refuses_misaligned_bases():
    from pingpong.hopper.host.launch import tma_orientation

    assert tma_orientation(_bf16(64, 64)) == "row"
    assert tma_orientation(_bf16(64, 64).t()) == "col"
    assert _bf16(64, 64, 1).data_ptr() % 16 == 2
    assert tma_orientation(_bf16(64, 64, 1)) is None  # x[1:]: base 2 bytes off
    assert tma_orientation(_bf16(64, 64, 1).t()) is None
    assert tma_orientation(_bf16(64, 64, 8)) == "row"  # 16 bytes off: aligned
    assert tma_orientation(_bf16(64, 64)[:, 1:]) is None  # row-major view whose base is 2 bytes in
