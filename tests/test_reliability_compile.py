"""`pingpong isa` output paths checked before compiling; `compile.offline()` confines its stub
driver to the calling thread."""

import threading

import pytest

from pingpong.runtime import compile as cc
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
