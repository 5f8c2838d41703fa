"""The Triton range: a clear error at import outside it, and the tables of another Triton
minor are neither read nor warned about."""

import subprocess
import sys
import warnings

import pytest

from pingpong import toolchain
from pingpong.hopper.host import table as tables


def test_supported_versions_pass():
    assert toolchain.check("3.9.0") == "3.9"
    assert toolchain.check("3.9.1+git0123abc") == "3.9"


@pytest.mark.parametrize("version", ["3.6.0", "3.8.0", "3.10.0", "4.0.0"])
def test_unsupported_version_names_both(version):
    with pytest.raises(toolchain.UnsupportedTritonError) as e:
        toolchain.check(version)
    msg = str(e.value)
    assert version in msg and "3.9" in msg and "pip install 'triton>=3.9,<3.10'" in msg


def test_import_refuses_an_unsupported_triton():
    """`import pingpong` under a Triton reporting 3.6.0 fails with the error, not later."""
    code = ("import triton; triton.__version__ = '3.6.0'\n"
            "try:\n    import pingpong\nexcept ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("UnsupportedTritonError") and "3.6.0" in out and "3.9" in out


def test_tables_are_per_triton_minor(monkeypatch, tmp_path):
    """A table written under another Triton minor has another file name: not read, no warning."""
    monkeypatch.setenv(tables.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(tables, "minor", lambda version: "3.8")
    key38 = tables.TableKey.current("A GPU", 100)
    monkeypatch.setattr(tables, "minor", lambda version: "3.9")
    key39 = tables.TableKey.current("A GPU", 100)
    assert key38.filename != key39.filename and key39.filename.endswith("-triton3.9.json")
    t = tables.Table(key38)
    tables.write(t, tables.user_table_path(key38))
    tables.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tables.active(key39) == (None, None)
    tables.clear_cache()


def test_every_registered_kernel_launch_carries_the_kernel_options():
    """The offline build of each kernel is the runtime launch's own kwargs, so each carries
    KERNEL_OPTIONS itself (nothing adds them on the way to the compiler)."""
    from pingpong.runtime import compile as cc

    for name, (targets, _) in cc.kernels().items():
        build = cc._REGISTRY[name][0]
        for target in targets:
            with cc.offline(target):
                launch = build(target)
            assert toolchain.KERNEL_OPTIONS.items() <= launch.kwargs.items(), (name, target)
